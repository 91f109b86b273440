// data/cifar.cpp: the CIFAR-10/100 binary readers (see cifar.h).
#include "data/cifar.h"

#include <cstdio>
#include <filesystem>
#include <vector>
#include "data/text.h"
#include "engine/error.h"

namespace fs = std::filesystem;
using engine::check;
using engine::fail;

namespace data {

static const char* kind_name(CifarKind k) { return k == CifarKind::Cifar10 ? "CIFAR-10" : "CIFAR-100"; }

void parse_cifar(const uint8_t* bytes, size_t nbytes, CifarKind kind, const std::string& file, ImageSet& out) {
    const int64_t rec = cifar_record_bytes(kind);
    check(nbytes > 0, "{}: file is empty", file);
    if (nbytes % rec != 0) {
        int64_t other = cifar_record_bytes(kind == CifarKind::Cifar10 ? CifarKind::Cifar100 : CifarKind::Cifar10);
        fail("{}: size {} bytes is not a whole number of {} records of {} bytes ({} records and {} bytes over): "
             "truncated{}", file, nbytes, kind_name(kind), rec, nbytes / rec, nbytes % rec,
             nbytes % other == 0 ? fmt::format(", or a file of {}-byte records (the other CIFAR)?", other)
                                 : std::string(" or not a CIFAR file"));
    }
    if (out.n == 0) { out.h = 32; out.w = 32; }
    check(out.h == 32 && out.w == 32, "{}: cannot append 32x32 records to a set of {}x{} images", file, out.h, out.w);
    const int64_t count = (int64_t)nbytes / rec;
    const int num_fine = kind == CifarKind::Cifar10 ? 10 : 100;
    const int label_at = kind == CifarKind::Cifar10 ? 0 : 1;
    // Each CIFAR-100 fine class lies in one coarse class (100 into 20, five each): a record that
    // pairs a fine label with another coarse label than the set so far did is corrupt or shifted.
    // -1: not seen yet; the set's earlier records first, then this file's.
    std::vector<int> coarse_of(100, -1);
    std::vector<int64_t> first_in_file(100, -1);
    if (out.coarse_labels.size() == out.labels.size())
        for (size_t i = 0; i < out.labels.size(); i++)
            if (out.labels[i] >= 0 && out.labels[i] < 100) coarse_of[out.labels[i]] = out.coarse_labels[i];
    // Check every record before touching `out`, so a bad file leaves it as it was.
    for (int64_t r = 0; r < count; r++) {
        const uint8_t* p = bytes + r * rec;
        if (kind == CifarKind::Cifar100)
            check(p[0] < 20, "{}: record {} (byte offset {}): coarse label {} outside [0, 20)", file, r, r * rec, p[0]);
        check(p[label_at] < num_fine, "{}: record {} (byte offset {}): label {} outside [0, {})", file, r, r * rec,
              p[label_at], num_fine);
        if (kind != CifarKind::Cifar100) continue;
        const int fine = p[1], coarse = p[0];
        if (coarse_of[fine] < 0) coarse_of[fine] = coarse, first_in_file[fine] = r;
        check(coarse_of[fine] == coarse,
              "{}: record {} (byte offset {}): fine label {} with coarse label {}, where {} has it in coarse class {} "
              "(a fine class lies in one coarse class: a corrupt file?)",
              file, r, r * rec, fine, coarse,
              first_in_file[fine] >= 0 ? fmt::format("record {}", first_in_file[fine]) : std::string("the files before"),
              coarse_of[fine]);
    }
    out.pixels.resize((out.n + count) * kCifarPixels);
    for (int64_t r = 0; r < count; r++) {
        const uint8_t* p = bytes + r * rec;
        if (kind == CifarKind::Cifar100) out.coarse_labels.push_back(p[0]);
        out.labels.push_back(p[label_at]);
        p += label_at + 1;
        // Planar (R plane, G plane, B plane) to interleaved RGB.
        uint8_t* dst = out.image(out.n + r);
        for (int i = 0; i < 1024; i++)
            for (int c = 0; c < 3; c++) dst[i * 3 + c] = p[c * 1024 + i];
    }
    out.n += count;
}

static std::string cifar_dir(CifarKind kind, const std::string& dir) {
    const char* sub = kind == CifarKind::Cifar10 ? "cifar-10-batches-bin" : "cifar-100-binary";
    if (fs::is_directory(fs::path(dir) / sub)) return (fs::path(dir) / sub).string();
    return dir;
}

std::vector<std::string> cifar_files(CifarKind kind, const std::string& dir, const std::string& split) {
    check(split == "train" || split == "test", "{}: unknown split '{}' (train or test)", kind_name(kind), split);
    fs::path d = cifar_dir(kind, dir);
    std::vector<std::string> files;
    if (kind == CifarKind::Cifar10) {
        if (split == "train")
            for (int i = 1; i <= 5; i++) files.push_back((d / fmt::format("data_batch_{}.bin", i)).string());
        else
            files.push_back((d / "test_batch.bin").string());
    } else {
        files.push_back((d / (split + ".bin")).string());
    }
    return files;
}

// Class names, one a line, blank lines ignored; empty when the file is absent.
static std::vector<std::string> read_names(const fs::path& path, size_t expected) {
    if (!fs::exists(path)) return {};
    std::string text = read_file(path.string());
    std::vector<std::string> names;
    size_t start = 0;
    while (start <= text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        std::string line = text.substr(start, end - start);
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
        if (!line.empty()) names.push_back(line);
        start = end + 1;
    }
    check(names.size() == expected, "{}: {} class names, expected {}", path.string(), names.size(), expected);
    return names;
}

static std::vector<std::string> numbered(int n) {
    std::vector<std::string> v;
    for (int i = 0; i < n; i++) v.push_back(fmt::format("class_{}", i));
    return v;
}

ImageSet load_cifar(CifarKind kind, const std::string& dir, const std::string& split) {
    const char* name = kind == CifarKind::Cifar10 ? "cifar10" : "cifar100";
    check(fs::is_directory(dir), "{}: data directory {} does not exist; get it with: data/download.sh {} DIR", name,
          dir, name);
    std::vector<std::string> files = cifar_files(kind, dir, split);
    for (const std::string& f : files)
        check(fs::exists(f), "{}: missing file {} (looked in {} and {}/{}); get it with: data/download.sh {} DIR",
              name, f, dir, dir, kind == CifarKind::Cifar10 ? "cifar-10-batches-bin" : "cifar-100-binary", name);
    ImageSet set;
    set.source = cifar_dir(kind, dir) + " (" + split + ")";
    // The release's files hold 10,000 images each (CIFAR-100's train file 50,000). A copy cut at a
    // record boundary parses fine, so say it: the tests' tiny files are such copies on purpose.
    const int64_t release = kind == CifarKind::Cifar100 && split == "train" ? 50000 : 10000;
    for (const std::string& f : files) {
        std::string bytes = read_file(f);
        const int64_t before = set.n;
        parse_cifar(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), kind, f, set);
        if (set.n - before != release)
            std::fprintf(stderr, "%s: note: %s holds %lld images, the release's %lld (a partial copy?)\n", name,
                         f.c_str(), (long long)(set.n - before), (long long)release);
    }
    fs::path d = cifar_dir(kind, dir);
    if (kind == CifarKind::Cifar10) {
        set.classes = read_names(d / "batches.meta.txt", 10);
        if (set.classes.empty())
            set.classes = {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
    } else {
        set.classes = read_names(d / "fine_label_names.txt", 100);
        if (set.classes.empty()) set.classes = numbered(100);
        set.coarse_classes = read_names(d / "coarse_label_names.txt", 20);
        if (set.coarse_classes.empty()) set.coarse_classes = numbered(20);
    }
    set.check_consistent();
    return set;
}

}  // namespace data
