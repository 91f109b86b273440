// apps/datainfo.cpp: what a data set holds, per split: tokens and vocabulary for text, images
// per class for images. Also a quick check that the files are where the trainers look.
//
//   apps/datainfo --dataset ptb --data-dir ../shared/data/ptb
//   apps/datainfo --dataset folder --data-dir ../shared/data/cifar10-jpeg --decode
//   apps/datainfo --dataset cifar10-jpeg --bench-loader --randaug 2     (loader throughput)
#include <CLI/CLI.hpp>

#include <sys/resource.h>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include "data/cifar.h"
#include "data/image_codec.h"
#include "data/image_folder.h"
#include "data/loader.h"
#include "data/paths.h"
#include "data/text.h"
#include "engine/error.h"

namespace fs = std::filesystem;

// 929589 -> "929,589"
static std::string commas(int64_t v) {
    std::string s = std::to_string(v < 0 ? -v : v), out;
    for (size_t i = 0; i < s.size(); i++) {
        if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
        out += s[i];
    }
    return v < 0 ? "-" + out : out;
}

static void print_text(const std::string& name, const std::string& dir, const std::string& level) {
    data::CorpusOptions opt;
    opt.level = data::parse_level(level);
    data::TextCorpus c = data::load_corpus(name, dir, opt);
    std::printf("%s (%s level) in %s\n", name.c_str(), data::level_name(c.level), dir.c_str());
    const std::string files[3] = {c.train_file, c.valid_file, c.test_file};
    const char* splits[3] = {"train", "valid", "test"};
    for (int s = 0; s < 3; s++)
        std::printf("  %-5s %12s tokens  %s\n", splits[s], commas((int64_t)c.split(splits[s]).size()).c_str(),
                    files[s].c_str());
    std::printf("  vocabulary %s tokens (from train)%s\n", commas(c.vocab.size()).c_str(),
                c.vocab.find("<unk>") >= 0 ? ", with <unk>" : "");
}

static void print_classes(const std::vector<std::string>& classes, const std::vector<int64_t>& counts) {
    for (size_t k = 0; k < classes.size(); k++)
        std::printf("    %-20s %10s\n", classes[k].c_str(), commas(counts[k]).c_str());
}

static void print_image_set(const std::string& split, const data::ImageSet& set) {
    std::printf("  %s: %s images, %d classes, %dx%d RGB (%s)\n", split.c_str(), commas(set.n).c_str(),
                set.num_classes(), set.h, set.w, set.source.c_str());
    print_classes(set.classes, set.class_counts());
    if (!set.coarse_classes.empty()) {
        std::vector<int64_t> coarse(set.coarse_classes.size(), 0);
        for (int32_t l : set.coarse_labels) coarse[l]++;
        std::printf("  %s coarse labels: %zu superclasses\n", split.c_str(), set.coarse_classes.size());
        print_classes(set.coarse_classes, coarse);
    }
}

static void print_cifar(const std::string& name, const std::string& dir) {
    auto kind = name == "cifar10" ? data::CifarKind::Cifar10 : data::CifarKind::Cifar100;
    data::ImageSet train = data::load_cifar(kind, dir, "train"), test = data::load_cifar(kind, dir, "test");
    std::printf("%s (binary release) in %s\n", name.c_str(), dir.c_str());
    print_image_set("train", train);
    print_image_set("test", test);
}

// Without --decode: count the files and decode one image per split for its size.
static void print_folder(const std::string& dir, bool decode, int threads) {
    std::vector<std::string> splits = data::list_splits(dir);
    engine::check(!splits.empty(), "image folder {}: no split folders with class folders inside (expected "
                  "{}/<split>/<class>/*.jpg|png)", dir, dir);
    std::printf("image folder %s\n", dir.c_str());
    for (const std::string& split : splits) {
        fs::path sdir = fs::path(dir) / split;
        if (decode) {
            auto t0 = std::chrono::steady_clock::now();
            data::FolderOptions opt;
            opt.threads = threads;
            data::ImageSet set = data::load_image_folder(sdir.string(), opt);
            double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            print_image_set(split, set);
            std::printf("  (decoded in %.2f s, %.0f images/s)\n", s, set.n / s);
            continue;
        }
        data::FolderIndex index = data::index_image_folder(sdir.string());
        std::vector<int64_t> counts(index.classes.size(), 0);
        for (int32_t l : index.labels) counts[l]++;
        int h = 0, w = 0;
        data::read_image(index.files[0], h, w);
        std::printf("  %s: %s images, %zu classes, first image %dx%d RGB\n", split.c_str(),
                    commas((int64_t)index.files.size()).c_str(), index.classes.size(), h, w);
        print_classes(index.classes, counts);
    }
}

static double cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}

struct BenchOptions {
    std::string split = "train";
    int64_t batch = 128;
    int workers = 2, prefetch = 4, randaug = 0, epochs = 1;
    float randaug_m = 9;
    double step_ms = 0;
};

// The loader alone: decode the split once, then time epochs of shuffled, augmented (crop 4 + flip,
// RandAugment when asked), normalized batches, consumed as fast as they come.
static void bench_loader(const std::string& dataset, const std::string& dir, const BenchOptions& b, int threads) {
    data::ImageSet set;
    auto t0 = std::chrono::steady_clock::now();
    if (dataset == "cifar10" || dataset == "cifar100")
        set = data::load_cifar(dataset == "cifar10" ? data::CifarKind::Cifar10 : data::CifarKind::Cifar100, dir,
                               b.split);
    else {
        data::FolderOptions fo;
        fo.threads = threads;
        set = data::load_image_folder((fs::path(dir) / b.split).string(), fo);
    }
    double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("loaded %s: %s images %dx%d in %.2f s\n", set.source.c_str(), commas(set.n).c_str(), set.h, set.w,
                load_s);
    data::LoaderOptions opt;
    opt.batch_size = b.batch;
    opt.workers = b.workers;
    opt.prefetch = b.prefetch;
    opt.augment = data::cifar_augment(b.randaug, b.randaug_m);
    opt.normalize = data::cifar10_normalize();
    data::ImageLoader loader(set, opt);
    int64_t images = 0;
    double cpu0 = cpu_seconds(), waited = 0;
    using clock = std::chrono::steady_clock;
    auto w0 = clock::now();
    for (int e = 0; e < b.epochs; e++) {
        loader.start_epoch(e);
        data::ImageBatch batch;
        for (;;) {
            auto t = clock::now();
            bool more = loader.next(batch);
            waited += std::chrono::duration<double>(clock::now() - t).count();
            if (!more) break;
            images += batch.images.size(0);
            // A stand-in for the training step: keep this thread busy for step_ms.
            auto until = clock::now() + std::chrono::duration<double, std::milli>(b.step_ms);
            while (b.step_ms > 0 && clock::now() < until) {}
        }
    }
    double wall = std::chrono::duration<double>(clock::now() - w0).count();
    double cpu = cpu_seconds() - cpu0;
    std::printf("loader: augment %s, batch %lld, %d workers, prefetch %d: %s images in %.2f s = %.0f images/s "
                "(%.0f images per CPU-second)\n", opt.augment.describe().c_str(), (long long)b.batch, b.workers,
                b.prefetch, commas(images).c_str(), wall, images / wall, images / cpu);
    if (b.step_ms > 0)
        std::printf("  with a %.1f ms step per batch: the consumer waited %.1f%% of the time in next()\n", b.step_ms,
                    100 * waited / wall);
}

int main(int argc, char** argv) {
    CLI::App app{"datainfo: per split, the token count and vocabulary size of a text data set, or the images per "
                 "class of an image data set"};
    app.option_defaults()->always_capture_default();
    std::string dataset, dir, level = "word";
    bool decode = false;
    int threads = 0;
    std::string names;
    for (const std::string& n : data::dataset_names()) names += (names.empty() ? "" : "|") + n;
    app.add_option("--dataset", dataset, "data set: " + names)->required()->check(CLI::IsMember(data::dataset_names()));
    app.add_option("--data-dir", dir,
                   "folder holding the data set (default: $INITLAB_DATA/<folder> when INITLAB_DATA is set, else "
                   "data_local/<folder>; text and folder need it)");
    app.add_option("--level", level, "text level for --dataset text: word|symbols|char|byte; wikitext*-raw: char|byte")
        ->check(CLI::IsMember({"word", "symbols", "char", "byte"}));
    app.add_flag("--decode", decode,
                 "folder: decode every image (checks them all and times it) instead of counting files");
    app.add_option("--threads", threads, "decoding threads for --decode and --bench-loader (0: OpenMP default)");
    bool bench = false;
    BenchOptions b;
    app.add_flag("--bench-loader", bench, "image data sets: time the loader alone (augment + batch) on --split");
    app.add_option("--split", b.split, "--bench-loader: the split to load");
    app.add_option("--batch", b.batch, "--bench-loader: batch size");
    app.add_option("--workers", b.workers, "--bench-loader: loader threads (0: on the consumer's thread)");
    app.add_option("--prefetch", b.prefetch, "--bench-loader: batches in flight ahead of the consumer");
    app.add_option("--randaug", b.randaug, "--bench-loader: RandAugment ops per image (0: crop + flip only)");
    app.add_option("--randaug-m", b.randaug_m, "--bench-loader: RandAugment magnitude (0..30)");
    app.add_option("--epochs", b.epochs, "--bench-loader: epochs to time");
    app.add_option("--step-ms", b.step_ms, "--bench-loader: busy-wait this long per batch, as a training step would");
    CLI11_PARSE(app, argc, argv);
    if (data::is_raw_wikitext(dataset) && !app.count("--level")) level = "char";

    const bool defaulted = dir.empty();
    try {
        if (defaulted) dir = data::default_data_dir(dataset);
        engine::check(!dir.empty(), "--dataset {} needs --data-dir", dataset);
        if (bench) {
            engine::check(!data::is_text_dataset(dataset), "--bench-loader is for image data sets, not {}", dataset);
            bench_loader(dataset, dir, b, threads);
        } else if (data::is_text_dataset(dataset)) print_text(dataset, dir, level);
        else if (dataset == "cifar10" || dataset == "cifar100") print_cifar(dataset, dir);
        else print_folder(dir, decode, threads);
    } catch (const engine::Error& e) {
        std::fprintf(stderr, "datainfo: %s\n", e.what());
        if (defaulted && !dir.empty())
            std::fprintf(stderr, "(no --data-dir given, so datainfo looked in the default %s; pass --data-dir DIR or "
                         "set INITLAB_DATA to the folder holding %s)\n", dir.c_str(),
                         data::dataset_folder(dataset).c_str());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "datainfo: %s\n", e.what());
        return 1;
    }
    return 0;
}
