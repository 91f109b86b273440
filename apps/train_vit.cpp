// apps/train_vit.cpp: train a ViT (or ConvMixer) on CIFAR-10/100 or an image folder, with any
// initialization scheme of init/.
//
//   make && ./apps/train_vit --init mimetic
//   ./apps/train_vit --init impulse3 --pool avg --epochs 10 --train-subset 5000 --out runs/imp3
//
// Defaults follow the structured-init paper's ViT-Tiny CIFAR recipe (../shared/specs/README.md):
// ViT-Tiny (192 wide, 12 deep, 3 heads), patch 2, 2D sin-cos position embedding, AdamW
// lr 1e-3 (eps 1e-3), weight decay 0.01, clip 3, 10 warmup epochs then cosine to 1e-6,
// 200 epochs, batch 512, label smoothing 0.1. On a CPU that is days: for a quick look use
// --epochs, --train-subset, --depth and --patch 4.
//
// Device: --device cuda (or auto, with a GPU): the model is built and initialized on the CPU
// (data-dependent schemes see their init batch there), then moved; each batch is copied to the
// device; the loss is read back where a metrics line is written (and the gradient norm, which
// clipping needs, every step).
//
// Data: --data-dir, else $INITLAB_DATA/<folder> (cifar-10-batches-bin, cifar-100-binary, or the
// cifar10-jpeg image folders), else data_local/<folder>.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <omp.h>
#include <set>
#include "apps/common/freeze.h"
#include "apps/common/lr_scale.h"
#include "apps/common/mfu.h"
#include "apps/common/profile_report.h"
#include "apps/common/run.h"
#include "apps/common/top1.h"
#include "data/cifar.h"
#include "data/image.h"
#include "data/image_folder.h"
#include "data/loader.h"
#include "data/paths.h"
#include "engine/device.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "engine/profile.h"
#include "engine/rng.h"
#include "init/init.h"
#include "nn/checkpoint.h"
#include "init/spatial_filters.h"
#include "nn/convmixer.h"
#include "nn/graph_step.h"
#include "nn/optim.h"
#include "nn/transformer.h"

using namespace engine;
namespace fs = std::filesystem;

struct Args {
    std::string data_dir, dataset = "cifar10", model = "vit-tiny";
    int64_t dim = 0, depth = 0, heads = 0, patch = 2;
    std::string pool = "avg", pos = "sincos2d", act = "gelu";
    bool fc_norm = false;
    float pe_scale = 1.f, layerscale = 0.f;
    int64_t kernel = 3;                // ConvMixer depthwise kernel
    std::string spatial = "train";     // ConvMixer spatial filters: train | random | impulse | box
    bool freeze_spatial = false;
    std::string init = "timm";
    init::Options init_opt;
    int64_t init_samples = 2048;
    int epochs = 200, warmup_epochs = 10, batch_size = 512, eval_every = 1, log_every = 20;
    float lr = 1e-3f, min_lr = 1e-6f, weight_decay = 0.01f, clip_grad = 3.f, label_smoothing = 0.1f, adam_eps = 1e-3f;
    float momentum = 0.9f;
    std::string opt = "adamw";
    int crop_pad = 4, cutout = 0, workers = 1;
    bool flip = true;
    std::string randaug = "2,9";  // N,M; "0" or "" turns it off
    int randaug_n = 0;            // parsed from it (parse_randaug)
    float randaug_m = 9;
    int64_t train_subset = 0;
    std::string device = "auto", precision = "fp32", cuda_graph = "on";
    apps::FreezeFlags freeze;  // --train-only, --freeze, --freeze-until (apps/common/freeze.h)
    std::string lr_scale;      // --lr-scale GLOB=FACTOR,... (apps/common/lr_scale.h)
    std::string init_from;     // a checkpoint whose weights replace the init's
    int threads = 0;
    int profile_steps = 0;  // --profile N
    uint64_t seed = 0;
    std::string out;
    bool resume = false, overwrite = false, auto_resume = false, nan_check = true, dry_run = false;
    bool eval_init = false;     // --eval-init: the test set before the first step too
    int64_t fail_at_step = -1;  // testing: poison the loss at this step to exercise the NaN stop
};

struct Data {
    data::ImageSet train, test;
    data::Normalize norm;
};

// ---------------------------------------------------------------------------------------------
// Data

static bool has_cifar_bin(const std::string& dir, data::CifarKind kind) {
    try {
        for (auto& f : data::cifar_files(kind, dir, "test"))
            if (!fs::exists(f)) return false;
        return true;
    } catch (const Error&) {
        return false;
    }
}

// An image folder's evaluation split: test/ when it has train/'s classes, else val/. Tiny-ImageNet
// has both, and its test/ is unlabelled (one folder of images, which reads as one class). A split
// with other classes would shift every label after the first difference: an error naming both.
static std::string evaluation_split(const std::string& dir, const std::vector<std::string>& train_classes) {
    std::string why;
    for (const char* split : {"test", "val"}) {
        std::string path = dir + "/" + split;
        if (!fs::is_directory(path)) continue;
        std::vector<std::string> classes = data::index_image_folder(path).classes;
        if (classes == train_classes) return path;
        size_t i = 0;
        while (i < classes.size() && i < train_classes.size() && classes[i] == train_classes[i]) i++;
        why += fmt::format("; {} has {} classes, class {} is '{}' where train/ has '{}'", path, classes.size(), i,
                           i < classes.size() ? classes[i] : "(none)",
                           i < train_classes.size() ? train_classes[i] : "(none)");
    }
    fail("image folder {}: no test/ or val/ split with train/'s {} classes{}", dir, train_classes.size(), why);
}

// Finds the data, in this order: --data-dir; $INITLAB_DATA or data_local/ with the binary
// release; the same with the cifar10-jpeg folders. Exits 2 with the places it looked.
static Data load_data(const Args& a) {
    std::vector<std::string> candidates;
    if (!a.data_dir.empty()) candidates.push_back(a.data_dir);
    else if (a.dataset != "folder") {
        candidates.push_back(data::default_data_dir(a.dataset));
        if (a.dataset == "cifar10") candidates.push_back(data::default_data_dir("cifar10-jpeg"));
    }
    auto kind = a.dataset == "cifar100" ? data::CifarKind::Cifar100 : data::CifarKind::Cifar10;
    for (const std::string& dir : candidates) {
        if (dir.empty() || !fs::is_directory(dir)) continue;
        Data d;
        if (a.dataset != "folder" && has_cifar_bin(dir, kind)) {
            d.train = data::load_cifar(kind, dir, "train");
            d.test = data::load_cifar(kind, dir, "test");
        } else if (fs::is_directory(dir + "/train")) {
            check(fs::is_directory(dir + "/test") || fs::is_directory(dir + "/val"),
                  "image folder {}: it has train/ but no test/ or val/ split to evaluate on", dir);
            d.train = data::load_image_folder(dir + "/train");
            d.test = data::load_image_folder(evaluation_split(dir, d.train.classes));
            check(d.test.h == d.train.h && d.test.w == d.train.w, "image folder {}: its images are {}x{}, {}'s {}x{}",
                  d.test.source, d.test.h, d.test.w, d.train.source, d.train.h, d.train.w);
            // A CIFAR copy as JPEG folders (cifar10-jpeg) is read with CIFAR's normalization and
            // name; another folder must not be, nor a CIFAR-10 folder as cifar100.
            const int want = a.dataset == "cifar100" ? 100 : a.dataset == "cifar10" ? 10 : 0;
            check(want == 0 || d.train.num_classes() == want,
                  "--dataset {}: {} has {} classes, not {} (for another image folder: --dataset folder)", a.dataset,
                  d.train.source, d.train.num_classes(), want);
        } else {
            continue;
        }
        d.norm = a.dataset == "cifar100" ? data::cifar100_normalize()
               : a.dataset == "cifar10"  ? data::cifar10_normalize()
                                         : data::measure_normalize(d.train);
        return d;
    }
    if (a.dataset == "folder") {
        std::fprintf(stderr, "train_vit: --data-dir %s: no train/ folder of class folders there\n", a.data_dir.c_str());
        std::exit(2);
    }
    std::fprintf(stderr, "train_vit: no %s data found. Looked in:\n", a.dataset.c_str());
    for (auto& c : candidates) std::fprintf(stderr, "  %s\n", c.empty() ? "(no default location)" : c.c_str());
    std::fprintf(stderr,
                 "Pass --data-dir DIR (the binary release's folder, or a folder with train/ and test/ class\n"
                 "folders), or set INITLAB_DATA to the folder holding cifar-10-batches-bin or cifar10-jpeg\n"
                 "(e.g. INITLAB_DATA=../shared/data), or fetch it with: data/download.sh %s\n",
                 a.dataset.c_str());
    std::exit(2);
}

// The init set of data-dependent schemes: --init-samples training images drawn at random, the
// random training subset of Aguirre & Fuentes. Not the first N: an image folder lists its images
// class by class, so those would be two or three of CIFAR-10's classes (as they were until
// 2026-11-28). A generator of its own, so the model's draws do not depend on it.
static std::vector<int64_t> init_set(const data::ImageSet& train, int64_t count, uint64_t seed) {
    Generator g(seed ^ 0x1417da7aull);
    std::vector<int32_t> perm = g.permutation((int32_t)train.n);
    std::vector<int64_t> idx(perm.begin(), perm.begin() + std::min<int64_t>(count, train.n));
    std::sort(idx.begin(), idx.end());
    return idx;
}

static int classes_in(const data::ImageSet& set, const std::vector<int64_t>& idx) {
    std::set<int32_t> seen;
    for (int64_t i : idx) seen.insert(set.labels[i]);
    return (int)seen.size();
}

// A seeded random subset of n training images that keeps every class (n/classes per class,
// the remainder spread over the first classes).
static void take_subset(data::ImageSet& set, int64_t n, uint64_t seed) {
    if (n <= 0 || n >= set.n) return;
    int k = set.num_classes();
    std::vector<std::vector<int64_t>> by_class(k);
    Generator g(seed ^ 0x5eed5eedull);
    auto perm = g.permutation((int32_t)set.n);
    for (int32_t i : perm) by_class[set.labels[i]].push_back(i);
    std::vector<int64_t> keep;
    for (int c = 0; c < k; c++) {
        int64_t want = n / k + (c < n % k ? 1 : 0);
        for (int64_t j = 0; j < want && j < (int64_t)by_class[c].size(); j++) keep.push_back(by_class[c][j]);
    }
    std::sort(keep.begin(), keep.end());
    data::ImageSet sub = set;
    sub.n = (int64_t)keep.size();
    sub.pixels.resize(sub.n * set.image_bytes());
    sub.labels.resize(sub.n);
    for (int64_t i = 0; i < sub.n; i++) {
        std::copy(set.image(keep[i]), set.image(keep[i]) + set.image_bytes(), sub.image(i));
        sub.labels[i] = set.labels[keep[i]];
    }
    if (!set.coarse_labels.empty()) {
        sub.coarse_labels.resize(sub.n);
        for (int64_t i = 0; i < sub.n; i++) sub.coarse_labels[i] = set.coarse_labels[keep[i]];
    }
    set = std::move(sub);
}

// ---------------------------------------------------------------------------------------------
// Model

static std::shared_ptr<nn::Module> build_model(const Args& a, int64_t image_size, int64_t classes,
                                               std::function<Tensor(const Tensor&)>& forward) {
    if (a.model == "convmixer-256-8") {
        nn::ConvMixerConfig c;
        c.dim = a.dim ? a.dim : 256;
        c.depth = a.depth ? a.depth : 8;
        c.patch = a.patch;
        c.kernel = a.kernel;
        c.num_classes = classes;
        c.freeze_spatial = a.freeze_spatial;
        auto net = std::make_shared<nn::ConvMixer>(c);
        forward = [net](const Tensor& x) { return net->forward(x); };
        return net;
    }
    nn::ViTConfig c = a.model == "vit-small" ? nn::ViTConfig::small() : nn::ViTConfig::tiny();
    if (a.dim) c.dim = a.dim;
    if (a.depth) c.depth = a.depth;
    if (a.heads) c.heads = a.heads;
    c.patch = a.patch;
    c.image_size = image_size;
    c.num_classes = classes;
    c.pool = a.pool;
    c.fc_norm = a.fc_norm;
    c.pos = a.pos;
    c.pe_scale = a.pe_scale;
    c.layerscale = a.layerscale;
    c.act = nn::parse_activation(a.act);
    auto net = std::make_shared<nn::ViT>(c);
    forward = [net](const Tensor& x) { return net->forward(x); };
    return net;
}

// --dry-run builds the model without the data: a CIFAR set's geometry is known (32×32, 10 or 100
// classes); a folder's comes from its images, so there a stand-in (8×8 patches, 10 classes) checks
// everything but the image size. --init runs on it (apps::dry_run_init), and the --freeze and
// --lr-scale patterns are checked against its parameters.
static std::string dry_run_model(const Args& a) {
    bool cifar = a.dataset != "folder";
    int64_t image = cifar ? 32 : 8 * a.patch, classes = a.dataset == "cifar100" ? 100 : 10;
    std::function<Tensor(const Tensor&)> forward;
    auto model = build_model(a, image, classes, forward);
    Tensor images = Tensor::normal({4, 3, image, image});
    init::InitData stand_in{[images, &forward] { NoGrad ng; forward(images); }, 4,
                            Tensor::randint({4}, 0, (int32_t)classes)};
    std::string init_line = apps::dry_run_init(*model, a.init, a.init_opt, stand_in);
    if (auto* cm = dynamic_cast<nn::ConvMixer*>(model.get())) init::set_spatial_filters(*cm, a.spatial, nullptr);
    apps::apply_freeze_flags(*model, a.freeze, "train_vit");
    apps::apply_lr_scales(nn::param_groups(*model, a.weight_decay), a.lr_scale, "train_vit");
    if (cifar) return fmt::format("{}, {} parameters; {}", a.model, model->num_parameters(), init_line);
    return fmt::format("{} builds ({} parameters with a stand-in {}x{} image: a folder's size comes from its "
                       "images); {}", a.model, model->num_parameters(), image, image, init_line);
}

// Top-1 accuracy and mean loss on a whole split, in eval mode, without gradients.
static std::pair<double, double> evaluate(nn::Module& model, const std::function<Tensor(const Tensor&)>& forward,
                                          const data::ImageSet& set, const data::Normalize& norm, int batch,
                                          Device dev) {
    NoGrad ng;
    model.eval();
    int64_t correct = 0;
    double loss_sum = 0;
    for (int64_t start = 0; start < set.n; start += batch) {
        std::vector<int64_t> idx;
        for (int64_t i = start; i < std::min<int64_t>(set.n, start + batch); i++) idx.push_back(i);
        Tensor logits = forward(data::images_tensor(set, idx, norm).to(dev));
        Tensor labels = data::labels_tensor(set, idx);
        loss_sum += cross_entropy(logits, labels.to(dev)).item() * (double)idx.size();
        correct += apps::top1_matches(logits, labels);
    }
    model.train();
    return {(double)correct / (double)set.n, loss_sum / (double)set.n};
}

// ---------------------------------------------------------------------------------------------

static int run(const Args& a, const apps::json& config, Device dev) {
    if (a.threads > 0) omp_set_num_threads(a.threads);
    manual_seed(a.seed);
    Data d = load_data(a);
    take_subset(d.train, a.train_subset, a.seed);
    check(d.train.h == d.train.w, "train_vit: images are {}x{}; the ViT needs square images", d.train.h, d.train.w);
    std::function<Tensor(const Tensor&)> forward;
    auto model = build_model(a, d.train.h, d.train.num_classes(), forward);
    std::printf("train_vit: %s, %lld parameters; %s: %lld train / %lld test images, %d classes\n",
                a.model.c_str(), (long long)model->num_parameters(), a.dataset.c_str(), (long long)d.train.n,
                (long long)d.test.n, d.train.num_classes());

    // The init set exists only for data-dependent schemes (the others never call its forward).
    init::InitData init_data;
    if (init::needs_data(a.init)) {
        std::vector<int64_t> idx = init_set(d.train, a.init_samples, a.seed);
        std::printf("init set: %zu of %lld training images at random, %d of %d classes\n", idx.size(),
                    (long long)d.train.n, classes_in(d.train, idx), d.train.num_classes());
        Tensor batch = data::images_tensor(d.train, idx, d.norm);
        init_data = init::InitData{[batch, &forward] { NoGrad ng; forward(batch); }, (int64_t)idx.size(),
                                   data::labels_tensor(d.train, idx)};  // labels: the output-layer fit
    }
    init::Report report = init::apply(*model, a.init, a.init_opt, &init_data);
    // The structured-init paper's fixed spatial filters replace what the scheme put there (a
    // data-dependent scheme measured its layers with its own filters: say so when combining them).
    if (auto* cm = dynamic_cast<nn::ConvMixer*>(model.get())) init::set_spatial_filters(*cm, a.spatial, &report);
    apps::init_from_checkpoint(*model, a.init_from, report);
    for (auto& line : report.lines) std::printf("init: %s\n", line.c_str());
    apps::FrozenByFlags frozen = apps::apply_freeze_flags(*model, a.freeze, "train_vit");
    // The initializers ran on the CPU; the model moves now, before the optimizer makes its state.
    model->to(dev);
    std::printf("device: %s\n", apps::part_device(config).c_str());

    auto groups = apps::apply_lr_scales(nn::param_groups(*model, a.weight_decay), a.lr_scale, "train_vit");
    std::unique_ptr<nn::Optimizer> opt;
    if (a.opt == "adamw") opt = std::make_unique<nn::Adam>(groups, a.lr, 0.9f, 0.999f, a.adam_eps, true);
    else opt = std::make_unique<nn::SGD>(groups, a.lr, a.momentum, true);
    data::LoaderOptions lo;
    lo.batch_size = a.batch_size;
    lo.normalize = d.norm;
    lo.seed = a.seed;
    lo.workers = a.workers;
    lo.augment.crop_padding = a.crop_pad;
    lo.augment.flip = a.flip;
    lo.augment.cutout = a.cutout;
    lo.augment.randaug.n = a.randaug_n;
    if (a.randaug_n > 0) lo.augment.randaug.m = a.randaug_m;
    data::ImageLoader loader(d.train, lo);
    std::printf("augmentation: %s\n", lo.augment.describe().c_str());
    int64_t steps_per_epoch = loader.batches_per_epoch();
    nn::WarmupCosine sched{a.lr, a.min_lr, a.warmup_epochs * steps_per_epoch, a.epochs * steps_per_epoch};

    apps::RunDir out(a.out, a.overwrite);
    // A resumed run's config.json (with this part added) is written once its checkpoint has loaded.
    if (!a.resume) out.write_json("config.json", config);
    if (!a.resume) apps::save_init_weights(out, *model, a.init, a.init_from);
    int start_epoch = 0;
    int64_t skip_batches = 0, global_step = 0;
    double best_acc = -1;
    double resumed_loss_sum = 0, resumed_seen = 0;  // the interrupted epoch's running train loss
    if (a.resume) {
        check(out.enabled() && fs::exists(out.path("last.safetensors")),
              "--resume: no checkpoint {} (give the --out of the run to continue)", out.path("last.safetensors"));
        auto meta = nn::load_checkpoint(out.path("last"), *model, opt.get());
        const std::string file = out.path("last.safetensors");
        start_epoch = (int)nn::meta_int(meta, "epoch", file);
        skip_batches = nn::meta_int(meta, "batch_in_epoch", file, 0);
        global_step = nn::meta_int(meta, "step", file);
        best_acc = nn::meta_number(meta, "best_acc", file);
        resumed_loss_sum = nn::meta_number(meta, "epoch_loss_sum", file, 0);
        resumed_seen = nn::meta_number(meta, "epoch_images", file, 0);
        global_generator().manual_seed(a.seed);
        global_generator().advance((uint64_t)nn::meta_int(meta, "rng_offset", file));
        out.trim_metrics(global_step);
        std::printf("resumed from %s: epoch %d, batch %lld\n", out.path("last").c_str(), start_epoch,
                    (long long)skip_batches);
        out.write_json("config.json", config);
    }
    // Mid-epoch (a stop), the epoch's running train loss goes with it, so the resumed epoch logs
    // the loss of all its batches.
    auto checkpoint = [&](const std::string& name, int epoch, int64_t batch_in_epoch, double loss_sum = 0,
                          double images = 0) {
        if (!out.enabled()) return true;
        if (!apps::weights_finite_for_checkpoint("train_vit", *model, name, epoch + (batch_in_epoch > 0), global_step,
                                                 out, a.nan_check))
            return false;
        nn::save_checkpoint(out.path(name), *model, opt.get(),
                            {{"epoch", std::to_string(epoch)}, {"batch_in_epoch", std::to_string(batch_in_epoch)},
                             {"step", std::to_string(global_step)}, {"best_acc", fmt::format("{}", best_acc)},
                             {"epoch_loss_sum", fmt::format("{}", loss_sum)}, {"epoch_images", fmt::format("{}", images)},
                             {"rng_offset", std::to_string(global_generator().offset())}, {"init", a.init}});
        return true;
    };

    apps::install_stop_handlers();
    auto params = model->parameters();
    apps::ProfileWindow prof(a.profile_steps, dev);
    apps::StepFlops step_flops(dev, a.precision);  // GEMM FLOPs of a step, for the MFU figure
    double final_acc = 0, final_loss = 0;
    // --cuda-graph: full batches go through a captured step (nn/graph_step.h) reading x_in, y_in,
    // refilled from each batch; a last partial batch runs eagerly, with the gradients zeroed in place
    // (the graph holds their addresses). The profiler times ops one by one: no graph under --profile;
    // nor with --freeze-until (the trained parameters change, and their update counts differ).
    bool use_graph = apps::cuda_graph_applies(a.cuda_graph, dev) && a.profile_steps == 0 && a.freeze.until == 0;
    Tensor x_in, y_in;
    std::unique_ptr<nn::GraphStep> graph_step;
    bool graph_noted = false;
    // --eval-init: what the init alone scores (a fresh run only: a resumed one has the line already).
    if (a.eval_init && !a.resume) {
        auto [acc, test_loss] = evaluate(*model, forward, d.test, d.norm, 500, dev);
        std::printf("init: test loss %.4f, test acc %.2f%% (before the first step)\n", test_loss, 100 * acc);
        out.append_metrics({{"kind", "eval"}, {"step", 0}, {"epoch", 0}, {"test_loss", test_loss}, {"test_acc", acc}});
        if (a.nan_check && !std::isfinite(test_loss)) {
            apps::report_nan_loss("train_vit", (float)test_loss, 0, 0, out, "test loss at init");
            return 1;
        }
    }
    for (int epoch = start_epoch; epoch < a.epochs; epoch++) {
        loader.start_epoch(epoch);
        apps::Progress bar(fmt::format("epoch {}/{}", epoch + 1, a.epochs), steps_per_epoch, "img");
        apps::LossMeter meter(dev == Device::CUDA, resumed_loss_sum, resumed_seen);
        int64_t seen = 0;  // images this process trained on this epoch (the progress bar's rate)
        auto t_epoch = std::chrono::steady_clock::now();
        data::ImageBatch batch;
        for (int64_t b = 0; loader.next(batch); b++) {
            if (b < skip_batches) continue;  // resuming mid-epoch: the same order, batches already trained on
            frozen.unfreeze_when_due(global_step, "train_vit");
            prof.begin();  // --profile: the loader's threads are outside the step; its copy to the device is in
            int64_t n = batch.images.size(0);
            bool graph = use_graph && n == a.batch_size;
            Tensor x, y;
            if (graph && graph_step) {
                nn::copy_into(x_in, batch.images);
                nn::copy_into(y_in, batch.labels);
            } else {
                x = batch.images.to(dev), y = batch.labels.to(dev);
            }
            profile::boundary("batch to device", profile::Phase::Outside);
            bool log_now = (global_step + 1) % a.log_every == 0;
            if (log_now) apps::wait_for_device(dev);  // the logged time is this step's alone
            auto t0 = std::chrono::steady_clock::now();
            step_flops.begin();
            opt->lr = sched.lr(global_step);
            Tensor loss;
            float gnorm = 0.f;
            if (graph) {
                if (!graph_step) {  // the first full batch's tensors become the step's inputs
                    x_in = x;
                    y_in = y;
                    graph_step = std::make_unique<nn::GraphStep>(
                        *opt, [&] { return cross_entropy(forward(x_in), y_in, -100, a.label_smoothing); },
                        a.clip_grad > 0 ? params : std::vector<Tensor>{}, a.clip_grad);
                }
                loss = graph_step->run();
                if (graph_step->captured() && !std::exchange(graph_noted, true))
                    std::fprintf(stderr, "train_vit: --cuda-graph: step %lld captured into a CUDA graph; full batches replay it\n",
                                 (long long)global_step + 1);
                if (log_now) gnorm = a.clip_grad > 0 ? graph_step->grad_norm().item() : nn::grad_norm(params);
            } else {
                if (use_graph) opt->zero_grad_in_place();
                else opt->zero_grad();
                profile::boundary("zero_grad", profile::Phase::Outside);
                loss = cross_entropy(forward(x), y, -100, a.label_smoothing);
            }
            meter.add(loss, (double)n);
            float lv = 0.f;
            if (!meter.deferred() || log_now || global_step == a.fail_at_step) {
                lv = global_step == a.fail_at_step ? NAN : meter.read();
                if (a.nan_check && (!std::isfinite(lv) || !std::isfinite(meter.sum()))) {
                    apps::report_nan_loss("train_vit", lv, epoch + 1, global_step, out);
                    return 1;
                }
            }
            profile::boundary("loss read-back", profile::Phase::Outside);
            if (!graph) gnorm = apps::backward_and_update(loss, params, *opt, a.clip_grad, log_now);
            global_step++;
            if (log_now) apps::wait_for_device(dev);  // the logged time includes the step's last kernels
            double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            seen += n;
            bar.update(b + 1 - skip_batches, seen, fmt::format("loss {:.4f}", meter.mean()));
            if (log_now)
                out.append_metrics(apps::train_metrics(global_step, epoch + (b + 1.0) / steps_per_epoch, opt->lr, lv,
                                                       gnorm, ms, (double)n, dev, step_flops));
            prof.end();
            if (const profile::Report* r = prof.finished()) apps::report_profile(*r, "train_vit --profile", out);
            if (apps::stop_requested()) {
                bar.finish();
                if (!apps::epoch_loss_finite("train_vit", meter, a.nan_check, epoch + 1, global_step, out)) return 1;
                if (!checkpoint("last", epoch, b + 1, meter.sum(), meter.weight())) return 1;
                return apps::report_stop("train_vit", epoch + 1, b + 1, out);
            }
        }
        bar.finish();
        if (!apps::epoch_loss_finite("train_vit", meter, a.nan_check, epoch + 1, global_step, out)) return 1;
        double loss_sum = meter.sum();
        skip_batches = 0;
        resumed_loss_sum = resumed_seen = 0;
        double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_epoch).count();
        bool last_epoch = epoch + 1 == a.epochs;
        if ((epoch + 1) % a.eval_every == 0 || last_epoch) {
            auto [acc, test_loss] = evaluate(*model, forward, d.test, d.norm, 500, dev);
            final_acc = acc;
            final_loss = test_loss;
            std::printf("epoch %d: train loss %.4f, test loss %.4f, test acc %.2f%% (%.1f s)\n", epoch + 1,
                        meter.weight() > 0 ? loss_sum / meter.weight() : 0.0, test_loss, 100 * acc, secs);
            out.append_metrics({{"kind", "eval"}, {"step", global_step}, {"epoch", epoch + 1},
                                {"train_loss", meter.weight() > 0 ? loss_sum / meter.weight() : 0.0}, {"test_loss", test_loss},
                                {"test_acc", acc}, {"epoch_seconds", secs}});
            if (a.nan_check && !std::isfinite(test_loss)) {
                apps::report_nan_loss("train_vit", (float)test_loss, epoch + 1, global_step, out, "test loss");
                return 1;
            }
            if (acc > best_acc) {
                best_acc = acc;
                if (!checkpoint("best", epoch + 1, 0)) return 1;
            }
        }
        if (!checkpoint("last", epoch + 1, 0)) return 1;
    }
    if (start_epoch >= a.epochs) {  // resumed after its last epoch: the result is the model's as it is
        auto [acc, test_loss] = evaluate(*model, forward, d.test, d.norm, 500, dev);
        final_acc = acc;
        final_loss = test_loss;
        std::printf("test loss %.4f, test acc %.2f%% (every epoch was done)\n", test_loss, 100 * acc);
    }
    apps::json result = {{"test_acc", final_acc}, {"test_loss", final_loss}, {"best_test_acc", best_acc},
                         {"epochs", a.epochs}, {"steps", global_step}, {"init", a.init},
                         {"init_report", report.figures}, {"finished", apps::now_iso8601()}};
    if (apps::json at_init = out.init_eval(); !at_init.is_null())
        result["init_eval"] = {{"test_loss", at_init["test_loss"]}, {"test_acc", at_init["test_acc"]}};
    out.write_json("result.json", result);
    return 0;
}

// --randaug N[,M]: N ops an image (a whole number, 0 or "" for none), magnitude M in [0, 30]
// (default 9). Returns what is wrong with the text, or "".
static std::string parse_randaug(const std::string& text, int& n, float& m) {
    n = 0;
    m = 9;
    if (text.empty() || text == "0") return "";
    const size_t comma = text.find(',');
    const std::string ns = text.substr(0, comma), ms = comma == std::string::npos ? "" : text.substr(comma + 1);
    char* end = nullptr;
    long nv = std::strtol(ns.c_str(), &end, 10);
    if (ns.empty() || *end != '\0' || nv < 0 || nv > 16)
        return "--randaug " + text + ": N (ops an image) must be a whole number from 0 to 16";
    n = (int)nv;
    if (comma != std::string::npos) {
        float mv = std::strtof(ms.c_str(), &end);
        if (ms.empty() || *end != '\0' || !(mv >= 0.f && mv <= 30.f))
            return "--randaug " + text + ": M (the magnitude) must be a number from 0 to 30";
        m = mv;
    }
    return "";
}

int main(int argc, char** argv) {
    CLI::App app{"Train a ViT or ConvMixer on CIFAR-10/100 or an image folder with any initialization scheme."};
    Args a;
    app.add_option("--data-dir", a.data_dir, "data folder (default: $INITLAB_DATA/<dataset folder>, else data_local/)");
    app.add_option("--dataset", a.dataset, "cifar10 | cifar100 | folder")->capture_default_str()
        ->check(CLI::IsMember({"cifar10", "cifar100", "folder"}));
    app.add_option("--model", a.model, "vit-tiny | vit-small | convmixer-256-8")->capture_default_str()
        ->check(CLI::IsMember({"vit-tiny", "vit-small", "convmixer-256-8"}));
    app.add_option("--dim", a.dim, "width (0: the model's preset)")->capture_default_str()
        ->check(apps::NonNegative);
    app.add_option("--depth", a.depth, "blocks (0: the model's preset)")->capture_default_str()
        ->check(apps::NonNegative);
    app.add_option("--heads", a.heads, "attention heads (0: the model's preset)")->capture_default_str()
        ->check(apps::NonNegative);
    app.add_option("--patch", a.patch, "patch size")->capture_default_str()->check(apps::Positive);
    app.add_option("--pool", a.pool, "cls | avg")->capture_default_str()->check(CLI::IsMember({"cls", "avg"}));
    app.add_flag("--fc-norm", a.fc_norm,
                 "with --pool avg: the final LayerNorm on the pooled vector (timm's use_fc_norm, the structured-init "
                 "papers' ViT) instead of on every token before the pooling");
    apps::add_act_flag(app, a.act, "ViT");
    app.add_option("--pos", a.pos, "sincos1d | sincos2d | learned")->capture_default_str()
        ->check(CLI::IsMember({"sincos1d", "sincos2d", "learned"}));
    app.add_option("--pe-scale", a.pe_scale, "position embedding scale")->capture_default_str();
    app.add_option("--layerscale", a.layerscale, "LayerScale on residual branches with this init (0: off)")
        ->capture_default_str()->check(apps::NonNegative);
    app.add_option("--kernel", a.kernel, "ConvMixer depthwise kernel size (odd)")->capture_default_str();
    app.add_option("--spatial", a.spatial,
                   "ConvMixer spatial filters, set after --init: train (as the scheme made them) | random U(±1/k) | "
                   "impulse (one random tap) | box (all taps equal)")
        ->capture_default_str()->check(CLI::IsMember(init::spatial_filter_kinds()));
    app.add_flag("--freeze-spatial", a.freeze_spatial, "ConvMixer: do not train the spatial filters");
    apps::add_init_flags(app, a.init, a.init_opt);
    apps::add_init_from_flag(app, a.init_from);
    app.add_option("--init-samples", a.init_samples, "training images data-dependent inits see, drawn at random")
        ->capture_default_str()->check(apps::Positive);
    app.add_option("--epochs", a.epochs, "epochs")->capture_default_str()->check(apps::Positive);
    app.add_option("--batch-size", a.batch_size, "batch size")->capture_default_str()->check(apps::Positive);
    app.add_option("--lr", a.lr, "peak learning rate")->capture_default_str()->check(apps::Positive);
    app.add_option("--min-lr", a.min_lr, "final learning rate of the cosine")->capture_default_str()
        ->check(apps::NonNegative);
    app.add_option("--warmup-epochs", a.warmup_epochs, "linear warmup epochs")->capture_default_str()
        ->check(apps::NonNegative);
    app.add_option("--weight-decay", a.weight_decay, "weight decay (not on norms, biases, embeddings)")
        ->capture_default_str()->check(apps::NonNegative);
    apps::add_freeze_flags(app, a.freeze);
    apps::add_lr_scale_flag(app, a.lr_scale);
    app.add_option("--clip-grad", a.clip_grad, "global gradient-norm clip (0: off)")->capture_default_str()
        ->check(apps::NonNegative);
    app.add_option("--opt", a.opt, "adamw | sgd")->capture_default_str()->check(CLI::IsMember({"adamw", "sgd"}));
    app.add_option("--adam-eps", a.adam_eps,
                   "AdamW epsilon (1e-3 is the structured-init paper's recipe, PyTorch's default 1e-8; a large one "
                   "slows the weights whose gradients are small: tools/adam_eps_share.py)")
        ->capture_default_str()->check(apps::Positive);
    app.add_option("--label-smoothing", a.label_smoothing, "label smoothing")->capture_default_str()
        ->check(CLI::Range(0.f, 0.99f));
    app.add_option("--crop-pad", a.crop_pad, "random crop padding in pixels (0: off)")->capture_default_str()
        ->check(apps::NonNegative);
    app.add_flag("!--no-flip", a.flip, "no random horizontal flips");
    app.add_option("--randaug", a.randaug, "RandAugment N,M (ops per image, magnitude 0-30); 0: off")
        ->capture_default_str();
    app.add_option("--cutout", a.cutout, "Cutout square side in pixels (0: off)")->capture_default_str()
        ->check(apps::NonNegative);
    app.add_option("--workers", a.workers, "data loader threads (0: build batches in the training thread)")
        ->capture_default_str()->check(apps::NonNegative);
    app.add_option("--train-subset", a.train_subset, "train on a seeded subset of N images, every class kept (0: all)")
        ->capture_default_str()->check(apps::NonNegative);
    apps::add_device_flags(app, a.device, &a.precision);
    apps::add_cuda_graph_flag(app, a.cuda_graph);
    app.add_option("--threads", a.threads, "CPU threads (0: all cores)")->capture_default_str()
        ->check(apps::NonNegative);
    apps::add_profile_flag(app, a.profile_steps);
    app.add_option("--seed", a.seed, "random seed (init, data order, augmentation, dropout)")->capture_default_str();
    app.add_option("--out", a.out, "run directory: config.json, metrics.jsonl, init.safetensors (the weights it "
                                   "starts from), checkpoints, result.json");
    app.add_flag("--resume", a.resume, "continue the run in --out from its last checkpoint");
    apps::add_overwrite_flag(app, a.overwrite);
    apps::add_auto_resume_flag(app, a.auto_resume);
    apps::add_dry_run_flag(app, a.dry_run);
    app.add_option("--eval-every", a.eval_every, "evaluate every N epochs")->capture_default_str()
        ->check(apps::Positive);
    app.add_flag("--eval-init", a.eval_init,
                 "evaluate the test set before the first step too (metrics.jsonl: an eval line at step 0, epoch 0; "
                 "result.json: init_eval)");
    app.add_option("--log-every", a.log_every, "write a metrics line every N steps")->capture_default_str()
        ->check(apps::Positive);
    app.add_flag("!--no-nan-check", a.nan_check, "do not stop when the loss becomes NaN/inf");
    app.add_option("--fail-at-step", a.fail_at_step, "testing: treat the loss at this step as NaN (-1: never)")
        ->capture_default_str();
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    // Conflicts, before any work.
    auto refuse = [](const std::string& msg) {
        std::fprintf(stderr, "train_vit: %s\n", msg.c_str());
        return 2;
    };
    if (a.dataset == "folder" && a.data_dir.empty())
        return refuse("--dataset folder needs --data-dir DIR: a folder with train/ and test/ (or val/) class folders");
    if (a.init.find("impulse") != std::string::npos && a.pool == "cls")
        return refuse("--init " + a.init + " needs global average pooling (--pool avg): the impulse maps have no class token");
    if (a.fc_norm && a.pool != "avg") return refuse("--fc-norm is the LayerNorm after average pooling: it needs --pool avg");
    bool convmixer = a.model.rfind("convmixer", 0) == 0;
    if (convmixer && a.fc_norm) return refuse("--fc-norm is a ViT option; --model is " + a.model);
    if (convmixer && a.act != "gelu")
        return refuse("--act is a ViT option (ConvMixer's blocks use GELU); --model is " + a.model);
    if (!convmixer && (a.spatial != "train" || a.freeze_spatial || a.kernel != 3))
        return refuse("--spatial, --freeze-spatial and --kernel are ConvMixer options; --model is " + a.model);
    // The ViT's own options given to a ConvMixer (one command for both models): a note.
    if (convmixer)
        for (const char* flag : {"--heads", "--pool", "--pos", "--pe-scale", "--layerscale"})
            apps::note_unused_flag("train_vit", app, flag, "--model " + a.model);
    if (a.kernel < 1 || a.kernel % 2 == 0) return refuse("--kernel " + std::to_string(a.kernel) + ": an odd size >= 1 needed");
    if (std::string bad = parse_randaug(a.randaug, a.randaug_n, a.randaug_m); !bad.empty()) return refuse(bad);
    try {
        init::validate(a.init);
    } catch (const Error& e) {
        return refuse(std::string("--init: ") + e.what());
    }
    if (std::string conflict = apps::out_dir_conflict(a.out, a.resume, a.overwrite, a.auto_resume); !conflict.empty())
        return refuse(conflict);
    apps::DeviceChoice dc = apps::resolve_device(a.device, a.precision);
    // A dry run checks the flags, not this machine: a device that is not here is only a note.
    if (!dc.error.empty() && !a.dry_run) return refuse(dc.error);
    if (!dc.error.empty()) std::printf("train_vit: --dry-run: %s (the run itself would stop here)\n", dc.error.c_str());
    if (!dc.note.empty()) std::printf("train_vit: %s\n", dc.note.c_str());
    const bool warmup_cut = a.warmup_epochs >= a.epochs && a.warmup_epochs > 0;
    if (warmup_cut) {
        a.warmup_epochs = a.epochs / 10;
        std::printf("train_vit: --warmup-epochs is not below --epochs; using %d warmup epochs\n", a.warmup_epochs);
    }
    apps::json config =
        apps::run_config(app, "train_vit", a.threads > 0 ? a.threads : omp_get_max_threads(), dc.description);
    if (warmup_cut) config["--warmup-epochs"] = std::to_string(a.warmup_epochs);  // what the run uses
    if (int stop = apps::settle_run_start("train_vit", a.out, config, a.auto_resume, a.dry_run, a.resume, a.overwrite,
                                          [&] { return dry_run_model(a); });
        stop >= 0)
        return stop;
    try {
        apps::apply_precision(dc, a.precision);
        return run(a, config, dc.device);
    } catch (const Error& e) {
        std::fprintf(stderr, "train_vit: %s\n", e.what());
        return 1;
    }
}
