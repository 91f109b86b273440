// data/image_folder.h: image folders in the ImageNet layout, split/class/*.{jpg,jpeg,png}
// (e.g. ../shared/data/cifar10-jpeg/train/airplane/0000.jpg), decoded once into an ImageSet.
//
// Classes are the sub-folders in sorted order; files are taken in sorted order, so label ids
// and image order depend on the names alone. Tiny-ImageNet's layout also reads: train/<wnid>/
// images/*.JPEG, and val/images/*.JPEG labelled by val/val_annotations.txt. Decoding runs on OpenMP threads. Without a
// resize every image must have the size of the first; with one, each is resampled.
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "data/image.h"

namespace data {

struct FolderOptions {
    int height = 0, width = 0;      // resize every image to this (0, 0: keep the files' size)
    int64_t max_per_class = 0;      // read only the first N files of each class (0: all)
    int threads = 0;                // decoding threads (0: OpenMP's default)
};

ImageSet load_image_folder(const std::string& split_dir, const FolderOptions& opt = {});

// The files load_image_folder would read, with their labels, without decoding anything.
struct FolderIndex {
    std::vector<std::string> classes;
    std::vector<std::string> files;
    std::vector<int32_t> labels;
};
FolderIndex index_image_folder(const std::string& split_dir, int64_t max_per_class = 0);

// The splits under a data set root: sub-folders that hold class folders (train, val, test...).
std::vector<std::string> list_splits(const std::string& root);

// Whether a file name has an image extension we read (.jpg .jpeg .png, any case).
bool is_image_file(const std::string& name);

}  // namespace data
