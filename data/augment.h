// data/augment.h: training-time augmentation, deterministic under a seed.
//
// Image ops work in place on one HWC RGB uint8 image (h x w x 3); `scratch` is caller-owned
// memory of at least h*w*3 bytes, so no op allocates. Cutout and random erasing work on the
// normalized float CHW image, where a zero is the data set mean.
//
// Randomness: every sample gets its own engine::Generator keyed by (seed, epoch, position in
// the epoch), see sample_generator(). Results therefore depend on neither the number of
// loader threads nor their timing, and a run is reproduced exactly from its --seed.
//
// RandAugment (Cubuk et al. 2020) follows torchvision's definition: 14 ops (identity, shear
// x/y, translate x/y, rotate, brightness, color, contrast, sharpness, posterize, solarize,
// autocontrast, equalize), N ops drawn uniformly per image, magnitude M of 31 bins, signed
// ops negated with probability 1/2, nearest-neighbour sampling with black fill. Optionally the
// magnitude is jittered per op by N(0, m_std) as timm's "mstd" does.
#pragma once
#include <cstdint>
#include <string>
#include "engine/rng.h"
#include "engine/tensor.h"

namespace data {

// The generator of sample `position` of epoch `epoch` (a hash of the three numbers as its key).
engine::Generator sample_generator(uint64_t seed, int64_t epoch, int64_t position);

// ---------------------------------------------------------------------------------------------
// Geometric and colour ops on uint8 HWC images.

void hflip(uint8_t* img, int h, int w);
// out[y][x] = in[y+dy][x+dx], black outside: a crop of the zero-padded image at offset (dy, dx).
void shift(uint8_t* img, int h, int w, int dy, int dx, uint8_t* scratch);
// Zero-pad by `pad` on every side and crop h x w at a uniformly random offset.
void random_crop(uint8_t* img, int h, int w, int pad, engine::Generator& g, uint8_t* scratch);

enum class RandOp {
    Identity, ShearX, ShearY, TranslateX, TranslateY, Rotate, Brightness, Color, Contrast, Sharpness,
    Posterize, Solarize, AutoContrast, Equalize,
};
constexpr int kRandOps = 14;
const char* rand_op_name(RandOp op);
bool rand_op_signed(RandOp op);

// torchvision's strength of `op` at magnitude m (0 .. bins-1, fractional allowed) for an h x w
// image: shear 0..0.3, translate 0..150/331 of the size in pixels, rotate 0..30 degrees,
// enhance factors 1 ± 0..0.9, posterize 8..4 bits, solarize threshold 255..0.
float rand_op_strength(RandOp op, float m, int bins, int h, int w);

// Apply `op` with strength `v` (as returned above, sign included):
//   shear x: src = (x + v*y, y); rotate: v degrees counter-clockwise about the centre;
//   brightness/color/contrast/sharpness: blend with black/grey/mean grey/smoothed by 1+v;
//   posterize: keep the top v bits; solarize: invert values >= v.
void apply_rand_op(RandOp op, float v, uint8_t* img, int h, int w, uint8_t* scratch);

struct RandAugment {
    int n = 2;          // ops per image
    float m = 9;        // magnitude, 0 .. bins-1
    int bins = 31;
    float m_std = 0;    // per-op magnitude noise (0: fixed magnitude)
};
void rand_augment(uint8_t* img, int h, int w, const RandAugment& ra, engine::Generator& g, uint8_t* scratch);

// ---------------------------------------------------------------------------------------------
// Ops on the normalized float CHW image.

// Cutout (DeVries & Taylor 2017): zero a size x size square centred on a random pixel,
// clipped at the border.
void cutout(float* chw, int h, int w, int size, engine::Generator& g);

// Random erasing (Zhong et al. 2020): with probability p, a rectangle of area in
// [area_min, area_max] of the image and aspect ratio log-uniform in [ratio_min, ratio_max] is
// set to 0 (or to N(0,1) noise with random_fill). Up to 10 tries to fit the rectangle.
struct RandomErasing {
    float p = 0.25f;
    float area_min = 0.02f, area_max = 1.f / 3.f;
    float ratio_min = 0.3f, ratio_max = 3.3f;
    bool random_fill = false;
};
void random_erase(float* chw, int h, int w, const RandomErasing& re, engine::Generator& g);

// ---------------------------------------------------------------------------------------------
// The per-sample pipeline: RandAugment -> random crop -> flip (uint8), then after
// normalization Cutout -> random erasing (float).

struct AugmentOptions {
    int crop_padding = 0;    // random crop after zero padding by this many pixels (0: off)
    bool flip = false;       // horizontal flip with probability 1/2
    RandAugment randaug;     // randaug.n = 0: off
    int cutout = 0;          // Cutout square side in pixels (0: off)
    RandomErasing erasing{0.f};  // erasing.p = 0: off

    AugmentOptions() { randaug.n = 0; }
    bool any_uint8() const { return crop_padding > 0 || flip || randaug.n > 0; }
    bool any_float() const { return cutout > 0 || erasing.p > 0; }
    std::string describe() const;  // "crop4+flip+randaug(n=2,m=9)+cutout16", or "none"
};

// The standard CIFAR training augmentation: crop with padding 4 and flip; with RandAugment
// when n > 0.
AugmentOptions cifar_augment(int randaug_n = 0, float randaug_m = 9);

void augment_uint8(uint8_t* img, int h, int w, const AugmentOptions& opt, engine::Generator& g, uint8_t* scratch);
void augment_float(float* chw, int h, int w, const AugmentOptions& opt, engine::Generator& g);

// ---------------------------------------------------------------------------------------------
// Batch-level hooks: label smoothing, mixup and CutMix on a float batch [B,3,H,W].

// One-hot targets [B, K] with label smoothing: 1 - s + s/K on the label, s/K elsewhere.
engine::Tensor smooth_targets(const engine::Tensor& labels, int num_classes, float smoothing);

struct MixOptions {
    float mixup_alpha = 0;   // mixup with lambda ~ Beta(a, a) (0: off)
    float cutmix_alpha = 0;  // CutMix with lambda ~ Beta(a, a) (0: off); both on: one of them at random
    float smoothing = 0;
};

// Mixes each sample with the one at the mirrored position of the batch (i with B-1-i), in
// place, and returns the mixed soft targets [B, K]: lam*t(y_i) + (1-lam)*t(y_{B-1-i}). For
// CutMix, lam is the area actually kept after clipping the box. Returns lam through *lam_out.
engine::Tensor mix_batch(engine::Tensor& images, const engine::Tensor& labels, int num_classes, const MixOptions& opt,
                         engine::Generator& g, float* lam_out = nullptr);

// A Beta(a, b) draw (Marsaglia-Tsang gamma variates), for the mixing weights.
double beta_sample(double a, double b, engine::Generator& g);

}  // namespace data
