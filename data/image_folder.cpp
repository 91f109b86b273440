// data/image_folder.cpp: the image-folder reader (see image_folder.h).
#include "data/image_folder.h"

#include <omp.h>
#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
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

static std::vector<Entry> list_images(const std::string& dir, const FolderOptions& opt,
                                      std::vector<std::string>& classes) {
    check(fs::is_directory(dir), "image folder: {} does not exist or is not a directory (expected {}/<class>/*.jpg)",
          dir, dir);
    classes = sorted_subdirs(dir);
    check(!classes.empty(), "image folder: {} has no class sub-folders (expected {}/<class>/*.jpg|png)", dir, dir);
    std::vector<Entry> entries;
    for (size_t c = 0; c < classes.size(); c++) {
        fs::path cdir = fs::path(dir) / classes[c];
        std::vector<std::string> files;
        for (const auto& e : fs::directory_iterator(cdir))
            if (e.is_regular_file() && is_image_file(e.path().filename().string())) files.push_back(e.path().string());
        check(!files.empty(), "image folder: class folder {} has no .jpg, .jpeg or .png files", cdir.string());
        std::sort(files.begin(), files.end());
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
