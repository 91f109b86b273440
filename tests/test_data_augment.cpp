// tests/test_data_augment.cpp: each augmentation against a direct formula or a hand-computed
// case, RandAugment's magnitude table, determinism under a seed, and the batch hooks.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include "data/augment.h"
#include "tests/test_data_helpers.h"

using data::RandOp;
using engine::Generator;
using engine::Tensor;

using Image = std::vector<uint8_t>;

static Image random_image(int h, int w, uint64_t seed) {
    Generator g(seed);
    std::vector<int32_t> v((size_t)h * w * 3);
    g.randint(v.data(), (int64_t)v.size(), 0, 256);
    return Image(v.begin(), v.end());
}

static uint8_t px(const Image& img, int w, int y, int x, int c) { return img[((size_t)y * w + x) * 3 + c]; }

static Image apply(RandOp op, float v, Image img, int h, int w) {
    Image scratch(img.size());
    data::apply_rand_op(op, v, img.data(), h, w, scratch.data());
    return img;
}

TEST_CASE("augment: flip and shift/crop move pixels where the formula says", "[data]") {
    const int h = 5, w = 7;
    Image in = random_image(h, w, 1), img = in, scratch(in.size());
    data::hflip(img.data(), h, w);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) REQUIRE(px(img, w, y, x, c) == px(in, w, y, w - 1 - x, c));
    data::hflip(img.data(), h, w);
    CHECK(img == in);

    for (auto [dy, dx] : std::vector<std::pair<int, int>>{{0, 0}, {2, -3}, {-4, 1}, {5, 0}, {-1, -7}}) {
        Image s = in;
        data::shift(s.data(), h, w, dy, dx, scratch.data());
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                for (int c = 0; c < 3; c++) {
                    bool inside = y + dy >= 0 && y + dy < h && x + dx >= 0 && x + dx < w;
                    REQUIRE(px(s, w, y, x, c) == (inside ? px(in, w, y + dy, x + dx, c) : 0));
                }
    }

    // A random crop is one of the (2p+1)^2 shifts, and over many draws all of them occur.
    std::set<std::pair<int, int>> seen;
    for (int k = 0; k < 400; k++) {
        Image s = in;
        Generator g(k);
        data::random_crop(s.data(), h, w, 2, g, scratch.data());
        bool found = false;
        for (int dy = -2; dy <= 2 && !found; dy++)
            for (int dx = -2; dx <= 2 && !found; dx++) {
                Image t = in;
                data::shift(t.data(), h, w, dy, dx, scratch.data());
                if (t == s) { found = true; seen.insert({dy, dx}); }
            }
        REQUIRE(found);
    }
    CHECK(seen.size() == 25);
}

TEST_CASE("rand ops: zero strength is the identity", "[data]") {
    const int h = 8, w = 8;
    Image in = random_image(h, w, 2);
    for (RandOp op : {RandOp::Identity, RandOp::ShearX, RandOp::ShearY, RandOp::TranslateX, RandOp::TranslateY,
                      RandOp::Rotate, RandOp::Brightness, RandOp::Color, RandOp::Contrast, RandOp::Sharpness}) {
        INFO(data::rand_op_name(op));
        CHECK(apply(op, 0.f, in, h, w) == in);
    }
    CHECK(apply(RandOp::Posterize, 8.f, in, h, w) == in);
    CHECK(apply(RandOp::Solarize, 256.f, in, h, w) == in);
}

TEST_CASE("rand ops: geometry", "[data]") {
    const int n = 6;
    Image in = random_image(n, n, 3);
    // Rotating 90 degrees counter-clockwise: out[y][x] = in[x][n-1-y].
    Image r = apply(RandOp::Rotate, 90.f, in, n, n);
    for (int y = 0; y < n; y++)
        for (int x = 0; x < n; x++) REQUIRE(px(r, n, y, x, 1) == px(in, n, x, n - 1 - y, 1));
    Image r4 = in;
    for (int k = 0; k < 4; k++) r4 = apply(RandOp::Rotate, 90.f, r4, n, n);
    CHECK(r4 == in);

    Image t = apply(RandOp::TranslateX, 2.f, in, n, n);  // content moves right by 2
    for (int y = 0; y < n; y++)
        for (int x = 0; x < n; x++) REQUIRE(px(t, n, y, x, 0) == (x >= 2 ? px(in, n, y, x - 2, 0) : 0));
    Image ty = apply(RandOp::TranslateY, -1.9f, in, n, n);  // truncated to 1 pixel, upwards
    for (int y = 0; y < n; y++) REQUIRE(px(ty, n, y, 3, 2) == (y < n - 1 ? px(in, n, y + 1, 3, 2) : 0));

    // Shear x by 0.5 about the origin: source column floor(x + 0.5 + 0.5 (y + 0.5)).
    Image s = apply(RandOp::ShearX, 0.5f, in, n, n);
    for (int y = 0; y < n; y++)
        for (int x = 0; x < n; x++) {
            int sx = (int)std::floor(x + 0.5 + 0.5 * (y + 0.5));
            REQUIRE(px(s, n, y, x, 0) == (sx < n ? px(in, n, y, sx, 0) : 0));
        }
}

TEST_CASE("rand ops: colour against their formulas", "[data]") {
    const int h = 6, w = 5;
    Image in = random_image(h, w, 4);
    Image b = apply(RandOp::Brightness, 0.4f, in, h, w);
    for (size_t i = 0; i < in.size(); i++) REQUIRE(b[i] == std::min(255l, std::lround(in[i] * 1.4)));

    Image grey = apply(RandOp::Color, -1.f, in, h, w);  // factor 0: fully desaturated
    for (int p = 0; p < h * w; p++) {
        long want = std::lround(0.299 * in[p * 3] + 0.587 * in[p * 3 + 1] + 0.114 * in[p * 3 + 2]);
        for (int c = 0; c < 3; c++) REQUIRE(std::abs(grey[p * 3 + c] - want) <= 1);
    }

    double mean = 0;
    for (int p = 0; p < h * w; p++) mean += 0.299 * in[p * 3] + 0.587 * in[p * 3 + 1] + 0.114 * in[p * 3 + 2];
    mean /= h * w;
    Image flat = apply(RandOp::Contrast, -1.f, in, h, w);
    for (uint8_t v : flat) REQUIRE(std::abs(v - mean) <= 0.5 + 1e-4);

    Image post = apply(RandOp::Posterize, 4.f, in, h, w);
    for (size_t i = 0; i < in.size(); i++) REQUIRE(post[i] == (in[i] & 0xF0));
    Image sol = apply(RandOp::Solarize, 128.f, in, h, w);
    for (size_t i = 0; i < in.size(); i++) REQUIRE(sol[i] == (in[i] >= 128 ? 255 - in[i] : in[i]));

    // Sharpness at factor 0 is the 3x3 [1 1 1; 1 5 1; 1 1 1]/13 smoothing; the border is kept.
    Image dot((size_t)5 * 5 * 3, 0);
    dot[(2 * 5 + 2) * 3] = 255;
    Image sm = apply(RandOp::Sharpness, -1.f, dot, 5, 5);
    CHECK(px(sm, 5, 2, 2, 0) == 98);   // 255 * 5/13 = 98.08
    CHECK(px(sm, 5, 1, 1, 0) == 20);   // 255 / 13 = 19.6
    CHECK(px(sm, 5, 2, 3, 0) == 20);
    CHECK(px(sm, 5, 0, 0, 0) == 0);
    CHECK(px(sm, 5, 2, 2, 1) == 0);
}

TEST_CASE("rand ops: autocontrast and equalize", "[data]") {
    const int h = 32, w = 32;
    Image img((size_t)h * w * 3);
    for (int p = 0; p < h * w; p++) {
        img[p * 3] = (uint8_t)(50 + p % 101);  // 50..150
        img[p * 3 + 1] = 77;                   // constant: left alone
        img[p * 3 + 2] = p < 512 ? 10 : p < 768 ? 20 : 30;
    }
    Image ac = apply(RandOp::AutoContrast, 0.f, img, h, w);
    int lo = 255, hi = 0;
    for (int p = 0; p < h * w; p++) { lo = std::min<int>(lo, ac[p * 3]); hi = std::max<int>(hi, ac[p * 3]); }
    CHECK(lo == 0);
    CHECK(hi == 255);
    CHECK(px(ac, w, 0, 0, 1) == 77);
    CHECK(px(ac, w, 0, 0, 2) == 0);
    CHECK(px(ac, w, 31, 31, 2) == 255);

    // Channel 2: 512 x 10, 256 x 20, 256 x 30. Step = (1024 - 256) / 255 = 3, so
    // 10 -> (0 + 1)/3 = 0, 20 -> (512 + 1)/3 = 171, 30 -> (768 + 1)/3 = 256 -> 255 (as PIL).
    Image eq = apply(RandOp::Equalize, 0.f, img, h, w);
    CHECK(px(eq, w, 0, 0, 2) == 0);
    CHECK(px(eq, w, 17, 0, 2) == 171);
    CHECK(px(eq, w, 31, 0, 2) == 255);
    CHECK(px(eq, w, 5, 5, 1) == 77);  // one value only: step 0, unchanged

    // A uniform histogram (every value 4 times) is already equalized.
    Image uni((size_t)h * w * 3);
    for (int p = 0; p < h * w; p++) for (int c = 0; c < 3; c++) uni[p * 3 + c] = (uint8_t)(p / 4);
    Image ue = apply(RandOp::Equalize, 0.f, uni, h, w);
    for (size_t i = 0; i < uni.size(); i++) REQUIRE(std::abs(ue[i] - uni[i]) <= 1);
}

TEST_CASE("randaugment: torchvision's magnitude table, deterministic under a seed", "[data]") {
    CHECK(data::rand_op_strength(RandOp::ShearX, 9, 31, 32, 32) == Approx(0.09));
    CHECK(data::rand_op_strength(RandOp::Rotate, 9, 31, 32, 32) == Approx(9.0));
    CHECK(data::rand_op_strength(RandOp::TranslateX, 30, 31, 32, 40) == Approx(150.0 / 331 * 40));
    CHECK(data::rand_op_strength(RandOp::TranslateY, 30, 31, 32, 40) == Approx(150.0 / 331 * 32));
    CHECK(data::rand_op_strength(RandOp::Brightness, 15, 31, 32, 32) == Approx(0.45));
    CHECK(data::rand_op_strength(RandOp::Posterize, 0, 31, 32, 32) == 8);
    CHECK(data::rand_op_strength(RandOp::Posterize, 9, 31, 32, 32) == 7);
    CHECK(data::rand_op_strength(RandOp::Posterize, 30, 31, 32, 32) == 4);
    CHECK(data::rand_op_strength(RandOp::Solarize, 9, 31, 32, 32) == Approx(178.5));
    CHECK(data::rand_op_strength(RandOp::Equalize, 9, 31, 32, 32) == 0);
    CHECK(data::rand_op_signed(RandOp::Rotate));
    CHECK_FALSE(data::rand_op_signed(RandOp::Solarize));

    const int h = 32, w = 32;
    Image in = random_image(h, w, 5), scratch(in.size());
    data::RandAugment ra;
    auto run = [&](uint64_t key) {
        Image img = in;
        Generator g = data::sample_generator(key, 0, 0);
        data::rand_augment(img.data(), h, w, ra, g, scratch.data());
        return img;
    };
    CHECK(run(7) == run(7));
    int changed = 0;
    for (uint64_t k = 0; k < 20; k++) changed += run(k) != run(k + 100);
    CHECK(changed >= 15);
    ra.n = 0;
    CHECK(run(3) == in);

    // The generators of different (seed, epoch, position) differ.
    auto first = [](Generator g) { return g.uniform_double(); };
    CHECK(first(data::sample_generator(1, 2, 3)) == first(data::sample_generator(1, 2, 3)));
    CHECK(first(data::sample_generator(1, 2, 3)) != first(data::sample_generator(1, 2, 4)));
    CHECK(first(data::sample_generator(1, 2, 3)) != first(data::sample_generator(1, 3, 3)));
    CHECK(first(data::sample_generator(1, 2, 3)) != first(data::sample_generator(2, 2, 3)));
}

TEST_CASE("cutout and random erasing zero one rectangle", "[data]") {
    const int h = 16, w = 12;
    // Finds the zeroed rectangle of an all-ones image; returns its (rows, cols), or (0, 0).
    auto rect = [&](const std::vector<float>& img) {
        int y0 = h, y1 = -1, x0 = w, x1 = -1, zeros = 0;
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++)
                    if (img[((size_t)c * h + y) * w + x] == 0.f) {
                        zeros++;
                        y0 = std::min(y0, y); y1 = std::max(y1, y); x0 = std::min(x0, x); x1 = std::max(x1, x);
                    }
        if (zeros == 0) return std::pair<int, int>{0, 0};
        REQUIRE(zeros == 3 * (y1 - y0 + 1) * (x1 - x0 + 1));  // a solid rectangle in every channel
        return std::pair<int, int>{y1 - y0 + 1, x1 - x0 + 1};
    };
    bool clipped = false, full = false;
    for (int k = 0; k < 100; k++) {
        std::vector<float> img((size_t)3 * h * w, 1.f);
        Generator g(k);
        data::cutout(img.data(), h, w, 6, g);
        auto [rh, rw] = rect(img);
        REQUIRE(rh >= 1);
        REQUIRE(rh <= 6);
        REQUIRE(rw <= 6);
        full |= rh == 6 && rw == 6;
        clipped |= rh < 6 || rw < 6;
    }
    CHECK(full);
    CHECK(clipped);

    data::RandomErasing re;
    re.p = 1.f;
    for (int k = 0; k < 100; k++) {
        std::vector<float> img((size_t)3 * h * w, 1.f);
        Generator g(k);
        data::random_erase(img.data(), h, w, re, g);
        auto [rh, rw] = rect(img);
        REQUIRE(rh >= 1);
        double area = (double)rh * rw / (h * w);
        CHECK(area >= 0.02 * 0.5);
        CHECK(area <= 1.0 / 3 * 1.5);
    }
    re.p = 0.f;
    std::vector<float> img((size_t)3 * h * w, 1.f);
    Generator g(1);
    data::random_erase(img.data(), h, w, re, g);
    CHECK(rect(img).first == 0);
}

TEST_CASE("batch hooks: label smoothing, mixup and cutmix", "[data]") {
    Tensor labels = Tensor::from_vector(std::vector<int32_t>{0, 2, 1}, {3});
    Tensor t = data::smooth_targets(labels, 4, 0.2f);
    CHECK(t.at({0, 0}) == Approx(0.85));
    CHECK(t.at({0, 1}) == Approx(0.05));
    CHECK(t.at({1, 2}) == Approx(0.85));
    CHECK_THROWS_AS(data::smooth_targets(labels, 2, 0.f), engine::Error);

    Tensor images = Tensor::empty({3, 3, 4, 4});
    for (int64_t i = 0; i < images.numel(); i++) images.data_f32()[i] = (float)(i / 48);  // image i is all i
    Generator g(3);
    data::MixOptions mix;
    mix.mixup_alpha = 1.f;
    Tensor mixed = images.clone();
    float lam = 0;
    Tensor soft = data::mix_batch(mixed, labels, 3, mix, g, &lam);
    CHECK(lam > 0);
    CHECK(lam < 1);
    for (int64_t i = 0; i < 3; i++) {
        CHECK(mixed.at({i, 1, 2, 3}) == Approx(lam * i + (1 - lam) * (2 - i)));
        float sum = 0;
        for (int k = 0; k < 3; k++) sum += soft.at({i, k});
        CHECK(sum == Approx(1.f));
    }
    CHECK(soft.at({0, 0}) == Approx(lam));      // label 0 mixed with label 1 (sample 2)
    CHECK(soft.at({0, 1}) == Approx(1 - lam));

    data::MixOptions cm;
    cm.cutmix_alpha = 1.f;
    Tensor cut = images.clone();
    Generator g2(5);
    soft = data::mix_batch(cut, labels, 3, cm, g2, &lam);
    int64_t pasted = 0;
    for (int64_t y = 0; y < 4; y++)
        for (int64_t x = 0; x < 4; x++) pasted += cut.at({0, 0, y, x}) == 2.f;
    CHECK(lam == Approx(1.0 - pasted / 16.0));
    CHECK(soft.at({0, 0}) == Approx(lam));

    double mean = 0;
    Generator gb(9);
    for (int k = 0; k < 4000; k++) mean += data::beta_sample(2.0, 6.0, gb);
    CHECK(mean / 4000 == Approx(0.25).margin(0.01));
}
