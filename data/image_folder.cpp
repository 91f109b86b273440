// data/image_folder.cpp: the image-folder reader (see image_folder.h).
#include "data/image_folder.h"

#include <omp.h>
#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <tuple>
#include "data/image_codec.h"
#include "data/text.h"
#include "engine/error.h"

namespace fs = std::filesystem;
using engine::check;

namespace data {

bool is_image_file(const std::string& name) {
    std::string ext = fs::path(name).extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return (char)std::tolower(c); });
    return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

static std::vector<std::string> sorted_subdirs(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.is_directory() && e.path().filename().string()[0] != '.') out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<std::string> list_splits(const std::string& root) {
    check(fs::is_directory(root), "image folder: {} does not exist or is not a directory", root);
    std::vector<std::string> splits;
    try {
        for (const std::string& s : sorted_subdirs(root))
            if (!sorted_subdirs((fs::path(root) / s).string()).empty()) splits.push_back(s);
    } catch (const fs::filesystem_error& e) {
        engine::fail("image folder {}: {}", root, e.what());
    }
    return splits;
}

namespace {
struct Entry {
    std::string path;
    int32_t label;
};
}  // namespace

// Image files directly in `dir`, sorted; empty when there are none. Hidden files are skipped, as
// hidden class folders are: macOS leaves "._name.jpg" metadata beside every file it copies.
static std::vector<std::string> image_files(const fs::path& dir) {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(dir)) {
        const std::string name = e.path().filename().string();
        if (e.is_regular_file() && name[0] != '.' && is_image_file(name)) files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    return files;
}

// Tiny-ImageNet's validation split: split/images/*.JPEG with split/val_annotations.txt mapping
// each file to its class (file <tab> wnid <tab> box...). Classes: the sorted wnids, as in train.
static std::vector<Entry> list_annotated(const std::string& dir, const FolderOptions& opt,
                                         std::vector<std::string>& classes) {
    std::string ann = (fs::path(dir) / "val_annotations.txt").string();
    std::string text = read_file(ann);
    struct Row { std::string file, cls; int64_t line; };
    std::vector<Row> rows;
    size_t start = 0;
    int64_t lineno = 0;
    while (start < text.size()) {
        size_t end = std::min(text.find('\n', start), text.size());
        std::string line = text.substr(start, end - start);
        start = end + 1;
        lineno++;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty()) continue;
        size_t t1 = line.find('\t'), t2 = t1 == std::string::npos ? t1 : line.find('\t', t1 + 1);
        check(t1 != std::string::npos && t1 > 0 && t2 != t1 + 1, "{}: line {}: expected 'file<TAB>class...'", ann,
              lineno);
        rows.push_back({line.substr(0, t1), line.substr(t1 + 1, t2 == std::string::npos ? t2 : t2 - t1 - 1), lineno});
    }
    check(!rows.empty(), "{}: no annotations", ann);
    for (const auto& r : rows) classes.push_back(r.cls);
    std::sort(classes.begin(), classes.end());
    classes.erase(std::unique(classes.begin(), classes.end()), classes.end());
    std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return std::tie(a.file, a.line) < std::tie(b.file, b.line); });
    // A file listed twice would be trained or scored twice, perhaps under two labels.
    for (size_t i = 1; i < rows.size(); i++)
        check(rows[i].file != rows[i - 1].file, "{}: {} is listed twice (lines {} and {}, classes {} and {})", ann,
              rows[i].file, rows[i - 1].line, rows[i].line, rows[i - 1].cls, rows[i].cls);
    std::vector<Entry> entries;
    std::vector<int64_t> taken(classes.size(), 0);
    for (const auto& [file, cls, line] : rows) {
        int32_t label = (int32_t)(std::lower_bound(classes.begin(), classes.end(), cls) - classes.begin());
        if (opt.max_per_class > 0 && taken[label] >= opt.max_per_class) continue;
        taken[label]++;
        entries.push_back({(fs::path(dir) / "images" / file).string(), label});
    }
    return entries;
}

static std::vector<Entry> list_images(const std::string& dir, const FolderOptions& opt,
                                      std::vector<std::string>& classes) {
    check(fs::is_directory(dir), "image folder: {} does not exist or is not a directory (expected {}/<class>/*.jpg)",
          dir, dir);
    if (fs::exists(fs::path(dir) / "val_annotations.txt") && fs::is_directory(fs::path(dir) / "images"))
        return list_annotated(dir, opt, classes);
    classes = sorted_subdirs(dir);
    check(!classes.empty(), "image folder: {} has no class sub-folders (expected {}/<class>/*.jpg|png)", dir, dir);
    std::vector<Entry> entries;
    for (size_t c = 0; c < classes.size(); c++) {
        fs::path cdir = fs::path(dir) / classes[c];
        std::vector<std::string> files = image_files(cdir);
        // Tiny-ImageNet's train split keeps a class's images in <class>/images/.
        if (files.empty() && fs::is_directory(cdir / "images")) files = image_files(cdir / "images");
        check(!files.empty(), "image folder: class folder {} has no .jpg, .jpeg or .png files", cdir.string());
        if (opt.max_per_class > 0 && (int64_t)files.size() > opt.max_per_class) files.resize(opt.max_per_class);
        for (std::string& f : files) entries.push_back({std::move(f), (int32_t)c});
    }
    return entries;
}

// Decode one file into its slot, resizing if asked. Returns "" or the error message.
static std::string decode_into(const Entry& e, int h, int w, bool resize, uint8_t* slot) {
    try {
        int ih = 0, iw = 0;
        std::vector<uint8_t> rgb = read_image(e.path, ih, iw);
        if (resize && (ih != h || iw != w)) rgb = resize_image(rgb.data(), ih, iw, h, w);
        else
            check(ih == h && iw == w, "{}: image is {}x{} but the first image is {}x{}; pass a resize size", e.path, ih,
                  iw, h, w);
        std::memcpy(slot, rgb.data(), rgb.size());
        return "";
    } catch (const std::exception& ex) {
        return ex.what();
    }
}

FolderIndex index_image_folder(const std::string& split_dir, int64_t max_per_class) {
    FolderOptions opt;
    opt.max_per_class = max_per_class;
    FolderIndex index;
    std::vector<Entry> entries;
    try {
        entries = list_images(split_dir, opt, index.classes);
    } catch (const fs::filesystem_error& e) {
        engine::fail("image folder {}: {}", split_dir, e.what());
    }
    for (Entry& e : entries) {
        index.files.push_back(std::move(e.path));
        index.labels.push_back(e.label);
    }
    return index;
}

ImageSet load_image_folder(const std::string& split_dir, const FolderOptions& opt) {
    check((opt.height > 0) == (opt.width > 0), "image folder: resize needs both height and width (got {}x{})",
          opt.height, opt.width);
    ImageSet set;
    set.source = split_dir;
    std::vector<Entry> entries;
    try {
        entries = list_images(split_dir, opt, set.classes);
    } catch (const fs::filesystem_error& e) {
        engine::fail("image folder {}: {}", split_dir, e.what());
    }
    const bool resize = opt.height > 0;
    int h = opt.height, w = opt.width;
    std::vector<uint8_t> first;
    if (!resize) first = read_image(entries[0].path, h, w);  // the size every other image must have
    set.n = (int64_t)entries.size();
    set.h = h;
    set.w = w;
    set.pixels.resize(set.n * set.image_bytes());
    set.labels.resize(set.n);
    for (int64_t i = 0; i < set.n; i++) set.labels[i] = entries[i].label;

    // Keep the error of the lowest index, so the message does not depend on thread timing.
    int64_t bad_index = set.n;
    std::string bad_message;
    int threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();
    #pragma omp parallel for schedule(dynamic, 64) num_threads(threads)
    for (int64_t i = 0; i < set.n; i++) {
        std::string err;
        if (i == 0 && !resize) std::memcpy(set.image(0), first.data(), first.size());
        else err = decode_into(entries[i], h, w, resize, set.image(i));
        if (!err.empty()) {
            #pragma omp critical(image_folder_error)
            if (i < bad_index) { bad_index = i; bad_message = err; }
        }
    }
    check(bad_message.empty(), "image folder {}: {}", split_dir, bad_message);
    set.check_consistent();
    return set;
}

}  // namespace data
