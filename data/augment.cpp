// data/augment.cpp: augmentation ops, RandAugment, Cutout, random erasing, mixup/CutMix (see
// augment.h). Geometric ops map each output pixel back to its source (an inverse affine map
// in pixel-centre coordinates) and take the nearest pixel, black where it falls outside.
#include "data/augment.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include "engine/error.h"

using engine::check;
using engine::Generator;
using engine::Tensor;

namespace data {

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

Generator sample_generator(uint64_t seed, int64_t epoch, int64_t position) {
    uint64_t k = splitmix64(seed);
    k = splitmix64(k ^ (uint64_t)epoch);
    k = splitmix64(k ^ (uint64_t)position);
    return Generator(k);
}

static int randint(Generator& g, int low, int high) {  // [low, high)
    int32_t v;
    g.randint(&v, 1, low, high);
    return v;
}

static bool coin(Generator& g) { return g.uniform_double() < 0.5; }

// Round to nearest (halves up) and saturate to 0..255, without a libm call per pixel.
static inline uint8_t clamp_round(float v) {
    v = v < 0.f ? 0.f : v > 255.f ? 255.f : v;
    return (uint8_t)(int)(v + 0.5f);
}

// ---------------------------------------------------------------------------------------------
// Geometry

void hflip(uint8_t* img, int h, int w) {
    for (int y = 0; y < h; y++) {
        uint8_t* row = img + (size_t)y * w * 3;
        for (int a = 0, b = w - 1; a < b; a++, b--)
            for (int c = 0; c < 3; c++) std::swap(row[a * 3 + c], row[b * 3 + c]);
    }
}

void shift(uint8_t* img, int h, int w, int dy, int dx, uint8_t* scratch) {
    std::memset(scratch, 0, (size_t)h * w * 3);
    int y0 = std::max(0, -dy), y1 = std::min(h, h - dy);
    int x0 = std::max(0, -dx), x1 = std::min(w, w - dx);
    for (int y = y0; y < y1; y++)
        if (x1 > x0) std::memcpy(scratch + ((size_t)y * w + x0) * 3, img + ((size_t)(y + dy) * w + x0 + dx) * 3,
                                 (size_t)(x1 - x0) * 3);
    std::memcpy(img, scratch, (size_t)h * w * 3);
}

void random_crop(uint8_t* img, int h, int w, int pad, Generator& g, uint8_t* scratch) {
    int dy = randint(g, -pad, pad + 1), dx = randint(g, -pad, pad + 1);
    shift(img, h, w, dy, dx, scratch);
}

// Inverse affine map in pixel-centre coordinates (X = x + 0.5): source (a*X + b*Y + c,
// d*X + e*Y + f), nearest pixel, black outside.
static void warp(uint8_t* img, int h, int w, const float m[6], uint8_t* scratch) {
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            float X = x + 0.5f, Y = y + 0.5f;
            int sx = (int)std::floor(m[0] * X + m[1] * Y + m[2]);
            int sy = (int)std::floor(m[3] * X + m[4] * Y + m[5]);
            uint8_t* dst = scratch + ((size_t)y * w + x) * 3;
            if (sx >= 0 && sx < w && sy >= 0 && sy < h) std::memcpy(dst, img + ((size_t)sy * w + sx) * 3, 3);
            else dst[0] = dst[1] = dst[2] = 0;
        }
    std::memcpy(img, scratch, (size_t)h * w * 3);
}

static void rotate(uint8_t* img, int h, int w, float degrees, uint8_t* scratch) {
    // Counter-clockwise on screen (y down): dst = R(src - c) + c with R = [cos sin; -sin cos],
    // so src = R^T (dst - c) + c.
    double t = degrees * M_PI / 180.0, cs = std::cos(t), sn = std::sin(t);
    double cx = w / 2.0, cy = h / 2.0;
    float m[6] = {(float)cs, (float)-sn, (float)(cx - cs * cx + sn * cy),
                  (float)sn, (float)cs, (float)(cy - sn * cx - cs * cy)};
    warp(img, h, w, m, scratch);
}

// ---------------------------------------------------------------------------------------------
// Colour

static float gray(const uint8_t* p) { return 0.299f * p[0] + 0.587f * p[1] + 0.114f * p[2]; }

// img = degenerate + factor * (img - degenerate), with degenerate given per element or constant.
static void blend(uint8_t* img, const float* degenerate, float constant, size_t n, float factor) {
    for (size_t i = 0; i < n; i++) {
        float d = degenerate ? degenerate[i] : constant;
        img[i] = clamp_round(d + factor * (img[i] - d));
    }
}

static void adjust_color(uint8_t* img, int h, int w, float factor) {
    // Blend towards the grey version of each pixel (saturation).
    size_t pixels = (size_t)h * w;
    for (size_t p = 0; p < pixels; p++) {
        uint8_t* q = img + p * 3;
        float g = gray(q);
        for (int c = 0; c < 3; c++) q[c] = clamp_round(g + factor * (q[c] - g));
    }
}

static void adjust_contrast(uint8_t* img, int h, int w, float factor) {
    size_t pixels = (size_t)h * w;
    double sum = 0;
    for (size_t p = 0; p < pixels; p++) sum += gray(img + p * 3);
    blend(img, nullptr, (float)(sum / pixels), pixels * 3, factor);
}

static void adjust_sharpness(uint8_t* img, int h, int w, float factor, uint8_t* scratch) {
    // Degenerate image: the 3x3 smoothing [1 1 1; 1 5 1; 1 1 1]/13 inside, the image itself on
    // the border (as PIL and torchvision do). Blended only where it differs, i.e. inside.
    if (h < 3 || w < 3) return;
    std::memcpy(scratch, img, (size_t)h * w * 3);
    for (int y = 1; y < h - 1; y++)
        for (int x = 1; x < w - 1; x++)
            for (int c = 0; c < 3; c++) {
                int s = 0;
                for (int ky = -1; ky <= 1; ky++)
                    for (int kx = -1; kx <= 1; kx++) s += scratch[((size_t)(y + ky) * w + x + kx) * 3 + c];
                float smooth = std::round((s + 4 * scratch[((size_t)y * w + x) * 3 + c]) / 13.f);
                uint8_t& v = img[((size_t)y * w + x) * 3 + c];
                v = clamp_round(smooth + factor * (v - smooth));
            }
}

static void autocontrast(uint8_t* img, int h, int w) {
    size_t pixels = (size_t)h * w;
    for (int c = 0; c < 3; c++) {
        int lo = 255, hi = 0;
        for (size_t p = 0; p < pixels; p++) {
            lo = std::min<int>(lo, img[p * 3 + c]);
            hi = std::max<int>(hi, img[p * 3 + c]);
        }
        if (hi <= lo) continue;
        float scale = 255.f / (hi - lo);
        for (size_t p = 0; p < pixels; p++) img[p * 3 + c] = clamp_round((img[p * 3 + c] - lo) * scale);
    }
}

static void equalize(uint8_t* img, int h, int w) {
    // Per channel: spread the histogram so the cumulative count grows evenly. The step is the
    // number of pixels per output level, not counting the pixels of the brightest used value.
    size_t pixels = (size_t)h * w;
    for (int c = 0; c < 3; c++) {
        int64_t hist[256] = {0};
        for (size_t p = 0; p < pixels; p++) hist[img[p * 3 + c]]++;
        int last = 255;
        while (last > 0 && hist[last] == 0) last--;
        int64_t step = ((int64_t)pixels - hist[last]) / 255;
        if (step == 0) continue;
        uint8_t lut[256];
        int64_t cum = 0;
        for (int v = 0; v < 256; v++) {
            lut[v] = (uint8_t)std::min<int64_t>(255, (cum + step / 2) / step);
            cum += hist[v];
        }
        for (size_t p = 0; p < pixels; p++) img[p * 3 + c] = lut[img[p * 3 + c]];
    }
}

// ---------------------------------------------------------------------------------------------
// RandAugment

const char* rand_op_name(RandOp op) {
    static const char* names[kRandOps] = {"identity",   "shear_x",  "shear_y",   "translate_x", "translate_y",
                                          "rotate",     "brightness", "color",   "contrast",    "sharpness",
                                          "posterize",  "solarize", "autocontrast", "equalize"};
    return names[(int)op];
}

bool rand_op_signed(RandOp op) {
    switch (op) {
        case RandOp::ShearX: case RandOp::ShearY: case RandOp::TranslateX: case RandOp::TranslateY:
        case RandOp::Rotate: case RandOp::Brightness: case RandOp::Color: case RandOp::Contrast:
        case RandOp::Sharpness: return true;
        default: return false;
    }
}

float rand_op_strength(RandOp op, float m, int bins, int h, int w) {
    check(bins >= 2, "rand_augment: need at least 2 magnitude bins, got {}", bins);
    float t = std::clamp(m, 0.f, (float)(bins - 1)) / (bins - 1);  // 0..1 along the table
    switch (op) {
        case RandOp::ShearX: case RandOp::ShearY: return 0.3f * t;
        case RandOp::TranslateX: return 150.f / 331.f * w * t;
        case RandOp::TranslateY: return 150.f / 331.f * h * t;
        case RandOp::Rotate: return 30.f * t;
        case RandOp::Brightness: case RandOp::Color: case RandOp::Contrast: case RandOp::Sharpness: return 0.9f * t;
        case RandOp::Posterize: return 8.f - std::round(4.f * t);
        case RandOp::Solarize: return 255.f * (1.f - t);
        default: return 0.f;
    }
}

void apply_rand_op(RandOp op, float v, uint8_t* img, int h, int w, uint8_t* scratch) {
    switch (op) {
        case RandOp::Identity: return;
        case RandOp::ShearX: { float m[6] = {1, v, 0, 0, 1, 0}; warp(img, h, w, m, scratch); return; }
        case RandOp::ShearY: { float m[6] = {1, 0, 0, v, 1, 0}; warp(img, h, w, m, scratch); return; }
        case RandOp::TranslateX: shift(img, h, w, 0, -(int)v, scratch); return;
        case RandOp::TranslateY: shift(img, h, w, -(int)v, 0, scratch); return;
        case RandOp::Rotate: rotate(img, h, w, v, scratch); return;
        case RandOp::Brightness: blend(img, nullptr, 0.f, (size_t)h * w * 3, 1.f + v); return;
        case RandOp::Color: adjust_color(img, h, w, 1.f + v); return;
        case RandOp::Contrast: adjust_contrast(img, h, w, 1.f + v); return;
        case RandOp::Sharpness: adjust_sharpness(img, h, w, 1.f + v, scratch); return;
        case RandOp::Posterize: {
            int bits = std::clamp((int)v, 0, 8);
            uint8_t mask = (uint8_t)(0xFF << (8 - bits));
            for (size_t i = 0; i < (size_t)h * w * 3; i++) img[i] &= mask;
            return;
        }
        case RandOp::Solarize:
            for (size_t i = 0; i < (size_t)h * w * 3; i++)
                if (img[i] >= v) img[i] = 255 - img[i];
            return;
        case RandOp::AutoContrast: autocontrast(img, h, w); return;
        case RandOp::Equalize: equalize(img, h, w); return;
    }
}

void rand_augment(uint8_t* img, int h, int w, const RandAugment& ra, Generator& g, uint8_t* scratch) {
    for (int k = 0; k < ra.n; k++) {
        RandOp op = (RandOp)randint(g, 0, kRandOps);
        float m = ra.m;
        if (ra.m_std > 0) {
            float noise;
            g.normal(&noise, 1, 0.f, ra.m_std);
            m += noise;
        }
        float v = rand_op_strength(op, m, ra.bins, h, w);
        if (rand_op_signed(op) && coin(g)) v = -v;
        apply_rand_op(op, v, img, h, w, scratch);
    }
}

// ---------------------------------------------------------------------------------------------
// Float ops

static void fill_rect(float* chw, int h, int w, int y0, int y1, int x0, int x1, bool noise, Generator& g) {
    for (int c = 0; c < 3; c++)
        for (int y = y0; y < y1; y++) {
            float* row = chw + ((size_t)c * h + y) * w;
            if (noise) g.normal(row + x0, x1 - x0, 0.f, 1.f);
            else std::fill(row + x0, row + x1, 0.f);
        }
}

void cutout(float* chw, int h, int w, int size, Generator& g) {
    int cy = randint(g, 0, h), cx = randint(g, 0, w);
    int y0 = std::clamp(cy - size / 2, 0, h), y1 = std::clamp(cy - size / 2 + size, 0, h);
    int x0 = std::clamp(cx - size / 2, 0, w), x1 = std::clamp(cx - size / 2 + size, 0, w);
    fill_rect(chw, h, w, y0, y1, x0, x1, false, g);
}

void random_erase(float* chw, int h, int w, const RandomErasing& re, Generator& g) {
    if (g.uniform_double() >= re.p) return;
    double area = (double)h * w;
    double lr0 = std::log(re.ratio_min), lr1 = std::log(re.ratio_max);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * (re.area_min + (re.area_max - re.area_min) * g.uniform_double());
        double ratio = std::exp(lr0 + (lr1 - lr0) * g.uniform_double());
        int eh = (int)std::lround(std::sqrt(target * ratio)), ew = (int)std::lround(std::sqrt(target / ratio));
        if (eh < 1 || ew < 1 || eh >= h || ew >= w) continue;
        int y0 = randint(g, 0, h - eh + 1), x0 = randint(g, 0, w - ew + 1);
        fill_rect(chw, h, w, y0, y0 + eh, x0, x0 + ew, re.random_fill, g);
        return;
    }
}

// ---------------------------------------------------------------------------------------------
// Pipeline

std::string AugmentOptions::describe() const {
    std::string s;
    auto add = [&](const std::string& part) { s += (s.empty() ? "" : "+") + part; };
    if (randaug.n > 0)
        add(fmt::format("randaug(n={},m={}{})", randaug.n, randaug.m,
                        randaug.m_std > 0 ? fmt::format(",mstd={}", randaug.m_std) : std::string()));
    if (crop_padding > 0) add(fmt::format("crop{}", crop_padding));
    if (flip) add("flip");
    if (cutout > 0) add(fmt::format("cutout{}", cutout));
    if (erasing.p > 0) add(fmt::format("erase(p={})", erasing.p));
    return s.empty() ? "none" : s;
}

AugmentOptions cifar_augment(int randaug_n, float randaug_m) {
    AugmentOptions a;
    a.crop_padding = 4;
    a.flip = true;
    a.randaug.n = randaug_n;
    a.randaug.m = randaug_m;
    return a;
}

void augment_uint8(uint8_t* img, int h, int w, const AugmentOptions& opt, Generator& g, uint8_t* scratch) {
    if (opt.randaug.n > 0) rand_augment(img, h, w, opt.randaug, g, scratch);
    if (opt.crop_padding > 0) random_crop(img, h, w, opt.crop_padding, g, scratch);
    if (opt.flip && coin(g)) hflip(img, h, w);
}

void augment_float(float* chw, int h, int w, const AugmentOptions& opt, Generator& g) {
    if (opt.cutout > 0) cutout(chw, h, w, opt.cutout, g);
    if (opt.erasing.p > 0) random_erase(chw, h, w, opt.erasing, g);
}

// ---------------------------------------------------------------------------------------------
// Batch hooks

Tensor smooth_targets(const Tensor& labels, int num_classes, float smoothing) {
    check(labels.defined() && labels.dtype() == engine::DType::I32 && labels.ndim() == 1,
          "smooth_targets: labels must be int32 [B], got {}", labels.defined() ? labels.shape().str() : "undefined");
    check(num_classes > 0 && smoothing >= 0 && smoothing < 1, "smooth_targets: need num_classes > 0 and smoothing in "
          "[0, 1), got {} and {}", num_classes, smoothing);
    int64_t b = labels.size(0);
    float off = smoothing / num_classes, on = 1.f - smoothing + off;
    Tensor t = Tensor::full({b, num_classes}, off);
    for (int64_t i = 0; i < b; i++) {
        int32_t l = labels.data_i32()[i];
        check(l >= 0 && l < num_classes, "smooth_targets: label {} of sample {} outside [0, {})", l, i, num_classes);
        t.data_f32()[i * num_classes + l] = on;
    }
    return t;
}

// Gamma(k, 1) by Marsaglia & Tsang (2000); k < 1 through Gamma(k+1) * U^(1/k).
static double gamma_sample(double k, Generator& g) {
    if (k < 1) return gamma_sample(k + 1, g) * std::pow(std::max(g.uniform_double(), 1e-300), 1.0 / k);
    double d = k - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
        float z;
        g.normal(&z, 1, 0.f, 1.f);
        double v = 1 + c * z;
        if (v <= 0) continue;
        v = v * v * v;
        double u = std::max(g.uniform_double(), 1e-300);
        if (std::log(u) < 0.5 * z * z + d - d * v + d * std::log(v)) return d * v;
    }
}

double beta_sample(double a, double b, Generator& g) {
    check(a > 0 && b > 0, "beta_sample: parameters must be positive, got {} and {}", a, b);
    double x = gamma_sample(a, g), y = gamma_sample(b, g);
    return x / (x + y);
}

Tensor mix_batch(Tensor& images, const Tensor& labels, int num_classes, const MixOptions& opt, Generator& g,
                 float* lam_out) {
    check(images.defined() && images.dtype() == engine::DType::F32 && images.ndim() == 4,
          "mix_batch: images must be float32 [B,C,H,W], got {}", images.defined() ? images.shape().str() : "undefined");
    check(labels.defined() && labels.ndim() == 1 && labels.size(0) == images.size(0),
          "mix_batch: labels {} do not match images {}", labels.defined() ? labels.shape().str() : "undefined",
          images.shape().str());
    Tensor targets = smooth_targets(labels, num_classes, opt.smoothing);
    bool use_mixup = opt.mixup_alpha > 0, use_cutmix = opt.cutmix_alpha > 0;
    if (use_mixup && use_cutmix) (coin(g) ? use_mixup : use_cutmix) = false;
    if (!use_mixup && !use_cutmix) {
        if (lam_out) *lam_out = 1.f;
        return targets;
    }
    const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
    float lam = (float)beta_sample(use_mixup ? opt.mixup_alpha : opt.cutmix_alpha,
                                   use_mixup ? opt.mixup_alpha : opt.cutmix_alpha, g);
    Tensor orig = images.clone();
    const float* src = orig.data_f32();
    float* dst = images.data_f32();
    const int64_t per = C * H * W;
    if (use_mixup) {
        for (int64_t i = 0; i < B; i++)
            for (int64_t k = 0; k < per; k++)
                dst[i * per + k] = lam * src[i * per + k] + (1 - lam) * src[(B - 1 - i) * per + k];
    } else {
        // A box of area (1 - lam) of the image at a random centre, clipped; lam = the area kept.
        double cut = std::sqrt(1.0 - lam);
        int64_t ch = (int64_t)(H * cut), cw = (int64_t)(W * cut);
        int64_t cy = randint(g, 0, (int)H), cx = randint(g, 0, (int)W);
        int64_t y0 = std::clamp(cy - ch / 2, (int64_t)0, H), y1 = std::clamp(cy + ch / 2, (int64_t)0, H);
        int64_t x0 = std::clamp(cx - cw / 2, (int64_t)0, W), x1 = std::clamp(cx + cw / 2, (int64_t)0, W);
        for (int64_t i = 0; i < B; i++)
            for (int64_t c = 0; c < C; c++)
                for (int64_t y = y0; y < y1; y++)
                    for (int64_t x = x0; x < x1; x++)
                        dst[i * per + (c * H + y) * W + x] = src[(B - 1 - i) * per + (c * H + y) * W + x];
        lam = 1.f - (float)((y1 - y0) * (x1 - x0)) / (float)(H * W);
    }
    Tensor mixed = Tensor::empty({B, num_classes});
    const float* t = targets.data_f32();
    float* m = mixed.data_f32();
    const int64_t K = num_classes;
    for (int64_t i = 0; i < B; i++)
        for (int64_t k = 0; k < K; k++) m[i * K + k] = lam * t[i * K + k] + (1 - lam) * t[(B - 1 - i) * K + k];
    if (lam_out) *lam_out = lam;
    return mixed;
}

}  // namespace data
