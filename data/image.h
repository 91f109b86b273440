// data/image.h: an in-memory image data set (decoded once, kept as uint8), per-channel
// normalization, and the conversion of images to a float batch [B,3,H,W].
//
// Pixels are stored HWC (interleaved RGB, the layout of stb_image and PIL) because the
// augmentations work per pixel; the batch conversion transposes to CHW and normalizes:
//   out[b,c,y,x] = (pixel[y,x,c] / 255 - mean[c]) / std[c].
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "engine/tensor.h"

namespace data {

struct ImageSet {
    std::string source;  // where it came from, for messages
    int64_t n = 0;       // number of images
    int h = 0, w = 0;    // every image is h x w x 3
    std::vector<uint8_t> pixels;         // n * h * w * 3, HWC, image i at i * image_bytes()
    std::vector<int32_t> labels;         // n, in [0, classes.size())
    std::vector<int32_t> coarse_labels;  // CIFAR-100's 20 superclasses; empty elsewhere
    std::vector<std::string> classes, coarse_classes;

    int64_t image_bytes() const { return (int64_t)h * w * 3; }
    const uint8_t* image(int64_t i) const { return pixels.data() + i * image_bytes(); }
    uint8_t* image(int64_t i) { return pixels.data() + i * image_bytes(); }
    int num_classes() const { return (int)classes.size(); }
    std::vector<int64_t> class_counts() const;  // images per class
    void check_consistent() const;              // sizes agree, labels in range; throws otherwise
};

// Per-channel mean and std of pixel/255.
struct Normalize {
    float mean[3] = {0.f, 0.f, 0.f};
    float std[3] = {1.f, 1.f, 1.f};
};
Normalize cifar10_normalize();   // (0.4914, 0.4822, 0.4465) / (0.2471, 0.2435, 0.2616)
Normalize cifar100_normalize();  // (0.5071, 0.4865, 0.4409) / (0.2673, 0.2564, 0.2762)
Normalize imagenet_normalize();  // (0.485, 0.456, 0.406) / (0.229, 0.224, 0.225)
Normalize no_normalize();        // pixel / 255
Normalize normalize_by_name(const std::string& name);  // cifar10 | cifar100 | imagenet | none
Normalize measure_normalize(const ImageSet& set);      // the set's own per-channel mean/std

// (v/255 - mean[c]) / std[c] for every byte value v, built once per loader.
struct NormalizeTable {
    float value[3][256];
    explicit NormalizeTable(const Normalize& norm);
};

// One HWC uint8 image into a CHW float slot, normalized.
void image_to_chw(const uint8_t* hwc, int h, int w, const NormalizeTable& table, float* chw);
void image_to_chw(const uint8_t* hwc, int h, int w, const Normalize& norm, float* chw);

// Images `indices` of the set as float [B,3,H,W] and their labels as int32 [B] (no augmentation).
engine::Tensor images_tensor(const ImageSet& set, const std::vector<int64_t>& indices, const Normalize& norm);
engine::Tensor labels_tensor(const ImageSet& set, const std::vector<int64_t>& indices, bool coarse = false);

}  // namespace data
