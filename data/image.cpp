// data/image.cpp: ImageSet checks, normalization constants and the float conversion of one image.
// (The Tensor-building functions are in image_tensor.cpp, so the readers link without the engine.)
#include "data/image.h"

#include <algorithm>
#include <cmath>
#include "engine/error.h"

using engine::check;

namespace data {

std::vector<int64_t> ImageSet::class_counts() const {
    std::vector<int64_t> counts(classes.size(), 0);
    for (int32_t l : labels)
        if (l >= 0 && l < (int32_t)counts.size()) counts[l]++;
    return counts;
}

void ImageSet::check_consistent() const {
    check(h > 0 && w > 0, "{}: image size {}x{} is not positive", source, h, w);
    check((int64_t)pixels.size() == n * image_bytes(), "{}: {} pixel bytes for {} images of {}x{}x3", source,
          pixels.size(), n, h, w);
    check((int64_t)labels.size() == n, "{}: {} labels for {} images", source, labels.size(), n);
    for (int64_t i = 0; i < n; i++)
        check(labels[i] >= 0 && labels[i] < num_classes(), "{}: image {} has label {} outside [0, {})", source, i,
              labels[i], num_classes());
    if (!coarse_labels.empty()) {
        check((int64_t)coarse_labels.size() == n, "{}: {} coarse labels for {} images", source, coarse_labels.size(),
              n);
        for (int64_t i = 0; i < n; i++)
            check(coarse_labels[i] >= 0 && coarse_labels[i] < (int32_t)coarse_classes.size(),
                  "{}: image {} has coarse label {} outside [0, {})", source, i, coarse_labels[i],
                  coarse_classes.size());
    }
}

static Normalize make_normalize(float m0, float m1, float m2, float s0, float s1, float s2) {
    Normalize n;
    n.mean[0] = m0; n.mean[1] = m1; n.mean[2] = m2;
    n.std[0] = s0; n.std[1] = s1; n.std[2] = s2;
    return n;
}

Normalize cifar10_normalize() { return make_normalize(0.4914f, 0.4822f, 0.4465f, 0.2471f, 0.2435f, 0.2616f); }
Normalize cifar100_normalize() { return make_normalize(0.5071f, 0.4865f, 0.4409f, 0.2673f, 0.2564f, 0.2762f); }
Normalize imagenet_normalize() { return make_normalize(0.485f, 0.456f, 0.406f, 0.229f, 0.224f, 0.225f); }
Normalize no_normalize() { return Normalize{}; }

Normalize normalize_by_name(const std::string& name) {
    if (name == "cifar10") return cifar10_normalize();
    if (name == "cifar100") return cifar100_normalize();
    if (name == "imagenet") return imagenet_normalize();
    if (name == "none") return no_normalize();
    engine::fail("normalization '{}': expected cifar10, cifar100, imagenet or none", name);
}

Normalize measure_normalize(const ImageSet& set) {
    check(set.n > 0, "{}: no images to measure mean/std on", set.source);
    double sum[3] = {0, 0, 0}, sq[3] = {0, 0, 0};
    int64_t pixels = set.n * set.h * set.w;
    for (int64_t p = 0; p < pixels; p++)
        for (int c = 0; c < 3; c++) {
            double v = set.pixels[p * 3 + c] / 255.0;
            sum[c] += v;
            sq[c] += v * v;
        }
    Normalize n;
    for (int c = 0; c < 3; c++) {
        double mean = sum[c] / pixels;
        n.mean[c] = (float)mean;
        n.std[c] = (float)std::sqrt(std::max(sq[c] / pixels - mean * mean, 1e-12));
    }
    return n;
}

NormalizeTable::NormalizeTable(const Normalize& norm) {
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++) value[c][v] = (v / 255.f - norm.mean[c]) / norm.std[c];
}

void image_to_chw(const uint8_t* hwc, int h, int w, const NormalizeTable& table, float* chw) {
    // One table lookup per value instead of a subtract and a divide.
    int64_t plane = (int64_t)h * w;
    for (int c = 0; c < 3; c++) {
        const float* t = table.value[c];
        float* out = chw + c * plane;
        for (int64_t p = 0; p < plane; p++) out[p] = t[hwc[p * 3 + c]];
    }
}

void image_to_chw(const uint8_t* hwc, int h, int w, const Normalize& norm, float* chw) {
    image_to_chw(hwc, h, w, NormalizeTable(norm), chw);
}

}  // namespace data
