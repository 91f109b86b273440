// tests/test_conv.cpp: conv2d, depthwise_conv2d and batch_norm against direct loops in double,
// their gradients (finite differences, and direct loops for a batch big enough to split conv2d's
// weight gradient into groups), running statistics, and the error messages.
#include <catch2/catch.hpp>

#include <omp.h>
#include <cmath>
#include <vector>
#include "engine/error.h"
#include "engine/ops.h"
#include "tests/helpers.h"

using namespace engine;
using test::gradcheck;
using test::param;

namespace {

// Output of a direct convolution, and the gradients of Σ y·G for a given G, all in double.
struct ConvReference {
    std::vector<double> y, dx, dw, db;
};

// The 7 nested loops of a convolution (n, co, oh, ow, ci, a, b); the backward reuses them.
ConvReference direct_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, int s, int p, const Tensor& G) {
    int64_t N = x.size(0), Cin = x.size(1), H = x.size(2), W = x.size(3);
    int64_t Cout = w.size(0), kh = w.size(2), kw = w.size(3);
    int64_t OH = (H + 2 * p - kh) / s + 1, OW = (W + 2 * p - kw) / s + 1;
    const float *px = x.data_f32(), *pw = w.data_f32();
    const float* pg = G.defined() ? G.data_f32() : nullptr;
    ConvReference r{std::vector<double>(N * Cout * OH * OW), std::vector<double>(x.numel()),
                    std::vector<double>(w.numel()), std::vector<double>(Cout)};
    for (int64_t n = 0; n < N; n++)
        for (int64_t co = 0; co < Cout; co++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t o = ((n * Cout + co) * OH + oh) * OW + ow;
                    double acc = b.defined() ? b.data_f32()[co] : 0.0, g = pg ? pg[o] : 0.0;
                    r.db[co] += g;
                    for (int64_t ci = 0; ci < Cin; ci++)
                        for (int64_t a = 0; a < kh; a++)
                            for (int64_t bb = 0; bb < kw; bb++) {
                                int64_t ih = oh * s + a - p, iw = ow * s + bb - p;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                int64_t xi = ((n * Cin + ci) * H + ih) * W + iw;
                                int64_t wi = ((co * Cin + ci) * kh + a) * kw + bb;
                                acc += (double)px[xi] * pw[wi];
                                r.dx[xi] += g * pw[wi];
                                r.dw[wi] += g * px[xi];
                            }
                    r.y[o] = acc;
                }
    return r;
}

void check_close(const char* what, const std::vector<float>& got, const std::vector<double>& want, double tol) {
    REQUIRE(got.size() == want.size());
    double worst = 0;
    size_t worst_at = 0;
    for (size_t i = 0; i < got.size(); i++) {
        double e = std::fabs(got[i] - want[i]) / (1.0 + std::fabs(want[i]));
        if (std::isnan(e)) e = INFINITY;  // a NaN fails (a comparison would skip it)
        if (e > worst) { worst = e; worst_at = i; }
    }
    INFO(what << ": worst element " << worst_at << " of " << got.size() << ": " << got[worst_at] << " vs "
              << want[worst_at]);
    CHECK(worst < tol);
}

Tensor constant(const Shape& shape, uint64_t seed, float lo = -1.f, float hi = 1.f) {
    Tensor t = param(shape, seed, lo, hi);
    t.requires_grad_(false);
    return t;
}

}  // namespace

TEST_CASE("conv2d matches a direct 7-loop convolution", "[conv]") {
    struct Case {
        const char* name;
        Shape x, w;
        int stride, padding;
        bool bias;
    };
    std::vector<Case> cases = {
        {"3x3 same", {2, 3, 7, 6}, {4, 3, 3, 3}, 1, 1, true},
        {"3x2 stride 2, no bias", {2, 2, 9, 8}, {3, 2, 3, 2}, 2, 0, false},
        {"5x5 stride 2 padding 2", {1, 2, 9, 11}, {2, 2, 5, 5}, 2, 2, true},
        {"stride 3 with a ragged edge", {3, 1, 10, 7}, {2, 1, 2, 3}, 3, 1, true},
        {"1x1 (pointwise, no im2col)", {3, 5, 4, 3}, {6, 5, 1, 1}, 1, 0, true},
        {"1x1 stride 2 (im2col)", {2, 3, 5, 5}, {4, 3, 1, 1}, 2, 0, false},
        {"1x1 padding 1 (im2col)", {2, 3, 3, 3}, {2, 3, 1, 1}, 1, 1, true},
        {"patch embedding k = stride = 4", {2, 3, 8, 12}, {5, 3, 4, 4}, 4, 0, true},
        {"kernel covers the padded input", {2, 2, 3, 3}, {3, 2, 5, 5}, 1, 1, true},
    };
    uint64_t seed = 100;
    for (const Case& c : cases) {
        INFO(c.name);
        Tensor x = constant(c.x, seed++), w = constant(c.w, seed++);
        Tensor b = c.bias ? constant({c.w[0]}, seed++) : Tensor();
        Tensor y = conv2d(x, w, b, c.stride, c.padding);
        auto ref = direct_conv2d(x, w, b, c.stride, c.padding, Tensor());
        int64_t OH = (c.x[2] + 2 * c.padding - c.w[2]) / c.stride + 1;
        int64_t OW = (c.x[3] + 2 * c.padding - c.w[3]) / c.stride + 1;
        CHECK(y.shape() == Shape({c.x[0], c.w[0], OH, OW}));
        check_close("y", y.to_vector(), ref.y, 1e-5);
    }
}

// 20 images: more than conv2d_backward's 16 weight-gradient groups, so groups hold 1 or 2 images.
TEST_CASE("conv2d backward matches direct loops on a batch split into groups", "[conv]") {
    for (bool pointwise : {false, true}) {
        INFO((pointwise ? "1x1" : "3x3 stride 2 padding 1"));
        Shape ws = pointwise ? Shape({4, 3, 1, 1}) : Shape({4, 3, 3, 3});
        int stride = pointwise ? 1 : 2, padding = pointwise ? 0 : 1;
        Tensor x = param({20, 3, 5, 6}, 1), w = param(ws, 2), b = param({4}, 3);
        Tensor y = conv2d(x, w, b, stride, padding);
        Tensor G = constant(y.shape(), 4);
        y.backward(G);
        auto ref = direct_conv2d(x, w, b, stride, padding, G);
        check_close("y", y.to_vector(), ref.y, 1e-5);
        check_close("dx", x.grad().to_vector(), ref.dx, 1e-5);
        check_close("dw", w.grad().to_vector(), ref.dw, 1e-5);
        check_close("db", b.grad().to_vector(), ref.db, 1e-5);
    }
}

// The kernels fix their summation order (weight-gradient groups, one channel per thread), so the
// gradients are bitwise the same on one thread and on several.
TEST_CASE("conv gradients do not depend on the thread count", "[conv]") {
    auto grads = [](int threads) {
        int before = omp_get_max_threads();
        omp_set_num_threads(threads);
        Tensor x = param({24, 8, 12, 12}, 5), w = param({16, 8, 3, 3}, 6), b = param({16}, 7);
        Tensor wd = param({16, 1, 3, 3}, 8), bn_w = param({16}, 9), bn_b = param({16}, 10);
        Tensor rm = Tensor::zeros({16}), rv = Tensor::ones({16});
        Tensor y = batch_norm(depthwise_conv2d(conv2d(x, w, b, 1, 1), wd, b), bn_w, bn_b, rm, rv, true);
        y.backward(constant(y.shape(), 11));
        omp_set_num_threads(before);
        std::vector<std::vector<float>> out;
        for (const Tensor& t : {x, w, b, wd, bn_w, bn_b}) out.push_back(t.grad().to_vector());
        return out;
    };
    auto one = grads(1), several = grads(4);
    for (size_t i = 0; i < one.size(); i++) {
        INFO("gradient " << i);
        CHECK(one[i] == several[i]);
    }
}

TEST_CASE("conv2d", "[conv][gradcheck]") {
    SECTION("with bias") {
        gradcheck("conv2d bias", [](auto& in) { return conv2d(in[0], in[1], in[2]); },
                  {param({2, 2, 4, 5}, 11), param({3, 2, 3, 3}, 12), param({3}, 13)});
    }
    SECTION("without bias") {
        gradcheck("conv2d no bias", [](auto& in) { return conv2d(in[0], in[1]); },
                  {param({2, 2, 4, 4}, 14), param({3, 2, 2, 2}, 15)});
    }
    SECTION("stride 2") {
        gradcheck("conv2d stride 2", [](auto& in) { return conv2d(in[0], in[1], in[2], 2); },
                  {param({2, 2, 5, 6}, 16), param({2, 2, 3, 3}, 17), param({2}, 18)});
    }
    SECTION("padding 1") {
        gradcheck("conv2d padding 1", [](auto& in) { return conv2d(in[0], in[1], in[2], 1, 1); },
                  {param({1, 2, 4, 4}, 19), param({3, 2, 3, 3}, 20), param({3}, 21)});
    }
    SECTION("stride 2, padding 1") {
        gradcheck("conv2d stride 2 padding 1", [](auto& in) { return conv2d(in[0], in[1], in[2], 2, 1); },
                  {param({2, 2, 5, 5}, 22), param({2, 2, 3, 3}, 23), param({2}, 24)});
    }
    SECTION("1x1") {
        gradcheck("conv2d 1x1", [](auto& in) { return conv2d(in[0], in[1], in[2]); },
                  {param({2, 3, 3, 2}, 25), param({4, 3, 1, 1}, 26), param({4}, 27)});
    }
}

// ---------------------------------------------------------------------------------------------

// The loops of a depthwise conv (n, c, i, j, a, b) in double; with G, the backward too.
static ConvReference direct_depthwise(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& G = Tensor()) {
    int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), k = w.size(2), p = k / 2;
    const float *px = x.data_f32(), *pw = w.data_f32(), *pg = G.defined() ? G.data_f32() : nullptr;
    ConvReference r{std::vector<double>(x.numel()), std::vector<double>(x.numel()), std::vector<double>(w.numel()),
                    std::vector<double>(C)};
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < H; i++)
                for (int64_t j = 0; j < W; j++) {
                    const int64_t o = ((n * C + c) * H + i) * W + j;
                    double acc = b.defined() ? b.data_f32()[c] : 0.0, g = pg ? pg[o] : 0.0;
                    r.db[c] += g;
                    for (int64_t a = 0; a < k; a++)
                        for (int64_t bb = 0; bb < k; bb++) {
                            int64_t ih = i + a - p, iw = j + bb - p;
                            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                            const int64_t xi = ((n * C + c) * H + ih) * W + iw, wi = (c * k + a) * k + bb;
                            acc += (double)px[xi] * pw[wi];
                            r.dx[xi] += g * pw[wi];
                            r.dw[wi] += g * px[xi];
                        }
                    r.y[o] = acc;
                }
    return r;
}

TEST_CASE("depthwise_conv2d matches direct loops", "[conv]") {
    for (int k : {1, 3, 5, 7}) {
        for (bool bias : {true, false}) {
            INFO("k = " << k << (bias ? " with bias" : " without bias"));
            Tensor x = constant({2, 3, 6, 5}, 30 + k), w = constant({3, 1, k, k}, 40 + k);
            Tensor b = bias ? constant({3}, 50 + k) : Tensor();
            Tensor y = depthwise_conv2d(x, w, b);
            CHECK(y.shape() == x.shape());
            check_close("y", y.to_vector(), direct_depthwise(x, w, b).y, 1e-5);
        }
    }
    // A single 1-tap at the center copies the input: the impulse filter.
    Tensor x = constant({1, 2, 4, 4}, 60);
    Tensor w = Tensor::zeros({2, 1, 3, 3});
    w.set({0, 0, 1, 1}, 1.f);
    w.set({1, 0, 1, 1}, 1.f);
    CHECK(test::max_abs_diff(depthwise_conv2d(x, w), x) == 0.f);
}

// The CPU kernels take rows in blocks of 4 and columns in vectors of 8 (two at a time), the rest
// one by one, and the weight gradient's taps in registers for k = 1, 3, 5, 7, 9 (other sizes in a
// plain loop): these shapes reach every path, forward and backward.
TEST_CASE("depthwise_conv2d forward and backward match direct loops at every vector path", "[conv]") {
    const std::pair<int64_t, int64_t> planes[] = {{6, 5}, {9, 8}, {5, 19}, {7, 33}, {4, 16}};
    for (auto [H, W] : planes)
        for (int k : {1, 3, 5, 9, 11}) {
            INFO("H " << H << ", W " << W << ", k " << k);
            const uint64_t seed = (uint64_t)(H * 100 + W * 10 + k);
            Tensor x = constant({2, 3, H, W}, seed).requires_grad_(), w = constant({3, 1, k, k}, seed + 1).requires_grad_();
            Tensor b = constant({3}, seed + 2).requires_grad_(), G = constant({2, 3, H, W}, seed + 3);
            Tensor y = depthwise_conv2d(x, w, b);
            sum(mul(y, G)).backward();
            ConvReference ref = direct_depthwise(x, w, b, G);
            check_close("y", y.to_vector(), ref.y, 1e-5);
            check_close("dx", x.grad().to_vector(), ref.dx, 1e-5);
            check_close("dw", w.grad().to_vector(), ref.dw, 1e-4);
            check_close("db", b.grad().to_vector(), ref.db, 1e-5);
        }
}

TEST_CASE("depthwise_conv2d", "[conv][gradcheck]") {
    SECTION("k = 3 with bias") {
        gradcheck("depthwise_conv2d k3", [](auto& in) { return depthwise_conv2d(in[0], in[1], in[2]); },
                  {param({2, 3, 4, 5}, 70), param({3, 1, 3, 3}, 71), param({3}, 72)});
    }
    SECTION("k = 5 without bias, kernel wider than the image") {
        gradcheck("depthwise_conv2d k5", [](auto& in) { return depthwise_conv2d(in[0], in[1]); },
                  {param({2, 2, 3, 4}, 73), param({2, 1, 5, 5}, 74)});
    }
}

// Frozen filters (ConvMixer's frozen spatial layer): only dw reads x, so x is not kept for the
// backward; dx and db are those of trainable filters.
TEST_CASE("depthwise_conv2d with frozen filters keeps no input", "[conv]") {
    const int64_t N = 4, C = 8, H = 32, W = 32;  // 128 KiB
    Tensor x0 = param({N, C, H, W}, 75), b = param({C}, 76);
    auto run = [&](bool frozen, size_t& held) {
        Tensor w = param({C, 1, 3, 3}, 77).requires_grad_(!frozen);
        x0.zero_grad();
        b.zero_grad();
        size_t before = host_memory_in_use();
        Tensor loss;
        {
            Tensor x = mul(x0, 1.f);  // an intermediate, as the previous block's output
            loss = sum(mul(depthwise_conv2d(x, w, b), 2.f));
        }
        held = host_memory_in_use() - before;
        loss.backward();
        return std::vector<std::vector<float>>{x0.grad().to_vector(), b.grad().to_vector()};
    };
    size_t held_frozen, held_trained;
    auto frozen = run(true, held_frozen), trained = run(false, held_trained);
    CHECK(held_trained - held_frozen == (size_t)(N * C * H * W) * sizeof(float));
    CHECK(frozen == trained);
}

// ---------------------------------------------------------------------------------------------

// y of batch norm with the given per-channel mean and variance, in double; x viewed as [N, C, S].
static std::vector<double> direct_batch_norm(const Tensor& x, const std::vector<double>& mean,
                                             const std::vector<double>& var, const Tensor& w, const Tensor& b,
                                             double eps) {
    int64_t N = x.size(0), C = x.size(1), S = x.numel() / (N * C);
    std::vector<double> y(x.numel());
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t s = 0; s < S; s++) {
                int64_t i = (n * C + c) * S + s;
                double xhat = (x.data_f32()[i] - mean[c]) / std::sqrt(var[c] + eps);
                y[i] = xhat * (w.defined() ? w.data_f32()[c] : 1.0) + (b.defined() ? b.data_f32()[c] : 0.0);
            }
    return y;
}

// Per-channel mean and biased variance of x viewed as [N, C, S], in double.
static void direct_moments(const Tensor& x, std::vector<double>& mean, std::vector<double>& var) {
    int64_t N = x.size(0), C = x.size(1), S = x.numel() / (N * C);
    mean.assign(C, 0.0);
    var.assign(C, 0.0);
    for (int64_t c = 0; c < C; c++) {
        for (int64_t n = 0; n < N; n++)
            for (int64_t s = 0; s < S; s++) mean[c] += x.data_f32()[(n * C + c) * S + s];
        mean[c] /= N * S;
        for (int64_t n = 0; n < N; n++)
            for (int64_t s = 0; s < S; s++) var[c] += std::pow(x.data_f32()[(n * C + c) * S + s] - mean[c], 2);
        var[c] /= N * S;
    }
}

TEST_CASE("batch_norm matches the per-channel formulas", "[conv]") {
    for (Shape xs : {Shape({4, 3, 5, 2}), Shape({6, 4}), Shape({3, 2, 7})}) {
        INFO("input " << xs.str());
        int64_t C = xs[1], count = xs.numel() / C;
        // An offset mean and a non-unit scale, so normalizing is visible.
        Tensor x = constant(xs, 80, 1.f, 4.f);
        Tensor w = constant({C}, 81), b = constant({C}, 82);
        Tensor rm = constant({C}, 83), rv = constant({C}, 84, 0.5f, 2.f);
        std::vector<float> rm0 = rm.to_vector(), rv0 = rv.to_vector();

        std::vector<double> mean, var;
        direct_moments(x, mean, var);
        Tensor y = batch_norm(x, w, b, rm, rv, true, 0.2f, 1e-3f);
        check_close("train y", y.to_vector(), direct_batch_norm(x, mean, var, w, b, 1e-3), 1e-5);
        for (int64_t c = 0; c < C; c++) {
            CHECK(rm.data_f32()[c] == Approx(0.8 * rm0[c] + 0.2 * mean[c]).epsilon(1e-5));
            CHECK(rv.data_f32()[c] == Approx(0.8 * rv0[c] + 0.2 * var[c] * count / (count - 1)).epsilon(1e-5));
        }

        // Eval: the running statistics, whatever the batch's own.
        std::vector<double> rmd(rm.data_f32(), rm.data_f32() + C), rvd(rv.data_f32(), rv.data_f32() + C);
        std::vector<float> rm1 = rm.to_vector(), rv1 = rv.to_vector();
        Tensor ye = batch_norm(x, w, b, rm, rv, false, 0.2f, 1e-3f);
        check_close("eval y", ye.to_vector(), direct_batch_norm(x, rmd, rvd, w, b, 1e-3), 1e-5);
        CHECK(rm.to_vector() == rm1);  // eval leaves them alone
        CHECK(rv.to_vector() == rv1);
        // No weight and bias: plain normalization.
        Tensor yn = batch_norm(x, Tensor(), Tensor(), rm, rv, false, 0.2f, 1e-3f);
        check_close("eval y, no affine", yn.to_vector(), direct_batch_norm(x, rmd, rvd, Tensor(), Tensor(), 1e-3),
                    1e-5);
        CHECK(rm.to_vector() == rm1);
        CHECK(rv.to_vector() == rv1);
    }
}

// Values from PyTorch 1.13: F.batch_norm(x, rm, rv, None, None, True, 0.1, 1e-5) twice on [N, 2]
// inputs, starting from rm = 0, rv = 1.
TEST_CASE("batch_norm running statistics after two steps match PyTorch", "[conv]") {
    Tensor rm = Tensor::zeros({2}), rv = Tensor::ones({2});
    Tensor x1 = Tensor::from_vector(std::vector<float>{1, 2, 3, 5, 6, 11}, {3, 2});
    Tensor x2 = Tensor::from_vector(std::vector<float>{0, -1, 4, 1, 2, 3, 1, 1}, {4, 2});
    Tensor y1 = batch_norm(x1, Tensor(), Tensor(), rm, rv, true);
    std::vector<float> want_y1 = {-1.13554847f, -1.06904459f, -0.16222116f, -0.26726115f, 1.29776978f, 1.33630574f};
    for (int i = 0; i < 6; i++) CHECK(y1.data_f32()[i] == Approx(want_y1[i]).epsilon(1e-5));
    batch_norm(x2, Tensor(), Tensor(), rm, rv, true);
    CHECK(rm.at({0}) == Approx(0.475f).epsilon(1e-6));
    CHECK(rm.at({1}) == Approx(0.64f).epsilon(1e-6));
    CHECK(rv.at({0}) == Approx(1.6716665f).epsilon(1e-6));
    CHECK(rv.at({1}) == Approx(2.9666665f).epsilon(1e-6));
    // Without running statistics, training still normalizes with the batch's.
    Tensor none_m, none_v;
    CHECK(test::max_abs_diff(batch_norm(x1, Tensor(), Tensor(), none_m, none_v, true), y1) < 1e-6f);
}

TEST_CASE("batch_norm", "[conv][gradcheck]") {
    SECTION("training, [N, C, H, W]") {
        Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
        gradcheck("batch_norm train", [&](auto& in) { return batch_norm(in[0], in[1], in[2], rm, rv, true); },
                  {param({4, 3, 2, 3}, 90), param({3}, 91, 0.5f, 1.5f), param({3}, 92)});
    }
    SECTION("training, [N, C], no affine") {
        Tensor rm = Tensor::zeros({5}), rv = Tensor::ones({5});
        gradcheck("batch_norm train [N,C]",
                  [&](auto& in) { return batch_norm(in[0], Tensor(), Tensor(), rm, rv, true); }, {param({6, 5}, 93)});
    }
    SECTION("eval") {
        Tensor rm = constant({3}, 94), rv = constant({3}, 95, 0.5f, 2.f);
        gradcheck("batch_norm eval", [&](auto& in) { return batch_norm(in[0], in[1], in[2], rm, rv, false); },
                  {param({2, 3, 2, 2}, 96), param({3}, 97), param({3}, 98)});
    }
    SECTION("training, [N, C, L]") {
        Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
        gradcheck("batch_norm train [N,C,L]", [&](auto& in) { return batch_norm(in[0], in[1], in[2], rm, rv, true); },
                  {param({3, 3, 4}, 99), param({3}, 100, 0.5f, 1.5f), param({3}, 101)});
    }
    SECTION("training without running statistics") {
        Tensor none_m, none_v;
        gradcheck("batch_norm train, untracked",
                  [&](auto& in) { return batch_norm(in[0], in[1], in[2], none_m, none_v, true); },
                  {param({4, 2, 3}, 102), param({2}, 103, 0.5f, 1.5f), param({2}, 104)});
    }
    SECTION("training, weight only and bias only") {
        Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
        gradcheck("batch_norm train, weight only",
                  [&](auto& in) { return batch_norm(in[0], in[1], Tensor(), rm, rv, true); },
                  {param({3, 3, 2, 2}, 105), param({3}, 106, 0.5f, 1.5f)});
        gradcheck("batch_norm train, bias only",
                  [&](auto& in) { return batch_norm(in[0], Tensor(), in[1], rm, rv, true); },
                  {param({3, 3, 2, 2}, 107), param({3}, 108)});
    }
    SECTION("eval, no affine, weight only, bias only") {
        Tensor rm = constant({3}, 109), rv = constant({3}, 110, 0.5f, 2.f);
        gradcheck("batch_norm eval, no affine",
                  [&](auto& in) { return batch_norm(in[0], Tensor(), Tensor(), rm, rv, false); },
                  {param({2, 3, 4}, 111)});
        gradcheck("batch_norm eval, weight only",
                  [&](auto& in) { return batch_norm(in[0], in[1], Tensor(), rm, rv, false); },
                  {param({2, 3, 4}, 112), param({3}, 113)});
        gradcheck("batch_norm eval, bias only",
                  [&](auto& in) { return batch_norm(in[0], Tensor(), in[1], rm, rv, false); },
                  {param({2, 3, 4}, 114), param({3}, 115)});
    }
}

// ---------------------------------------------------------------------------------------------

TEST_CASE("conv ops name the op and the shapes in their errors", "[conv]") {
    using Catch::Contains;
    Tensor x = constant({2, 3, 8, 8}, 1);
    CHECK_THROWS_WITH(conv2d(x, constant({4, 5, 3, 3}, 2)),
                      Contains("conv2d: input [2,3,8,8] has 3 channels but weight [4,5,3,3] expects 5"));
    CHECK_THROWS_WITH(conv2d(constant({1, 3, 4, 4}, 3), constant({2, 3, 5, 5}, 4)),
                      Contains("conv2d: input [1,3,4,4], weight [2,3,5,5], stride 1, padding 0: empty output"));
    CHECK_THROWS_WITH(conv2d(constant({1, 3, 4, 4}, 3), constant({2, 3, 7, 7}, 4), Tensor(), 1, 1),
                      Contains("conv2d: input [1,3,4,4], weight [2,3,7,7], stride 1, padding 1: empty output"));
    CHECK_THROWS_WITH(conv2d(x, constant({4, 3, 3, 3}, 5), constant({3}, 6)),
                      Contains("conv2d: bias [3] does not match the 4 channels of weight [4,3,3,3]"));
    CHECK_THROWS_WITH(conv2d(constant({3, 8, 8}, 7), constant({4, 3, 3, 3}, 5)),
                      Contains("conv2d: input must be [N, Cin, H, W], got [3,8,8]"));
    CHECK_THROWS_WITH(conv2d(x, constant({4, 3, 3, 3}, 5), Tensor(), 0),
                      Contains("conv2d: input [2,3,8,8], weight [4,3,3,3]: stride 0 must be >= 1"));

    CHECK_THROWS_WITH(depthwise_conv2d(x, constant({3, 1, 4, 4}, 8)),
                      Contains("depthwise_conv2d: weight [3,1,4,4]: kernel size 4 must be odd"));
    CHECK_THROWS_WITH(depthwise_conv2d(x, constant({4, 1, 3, 3}, 9)),
                      Contains("depthwise_conv2d: weight [4,1,3,3] must be [C, 1, k, k] with C = 3 (input [2,3,8,8])"));
    CHECK_THROWS_WITH(depthwise_conv2d(x, constant({3, 1, 3, 3}, 9), constant({2}, 10)),
                      Contains("depthwise_conv2d: bias [2] does not match the 3 channels of input [2,3,8,8]"));

    Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3}), bad = Tensor::zeros({4}), none;
    CHECK_THROWS_WITH(batch_norm(x, Tensor(), Tensor(), bad, rv, true),
                      Contains("batch_norm: running_mean [4] does not match the 3 channels of input [2,3,8,8]"));
    CHECK_THROWS_WITH(batch_norm(x, constant({2}, 11), Tensor(), rm, rv, true),
                      Contains("batch_norm: weight [2] does not match the 3 channels of input [2,3,8,8]"));
    CHECK_THROWS_WITH(batch_norm(x, Tensor(), Tensor(), none, none, false),
                      Contains("batch_norm: input [2,3,8,8]: eval mode needs running_mean and running_var"));
    CHECK_THROWS_WITH(batch_norm(constant({1, 3}, 12), Tensor(), Tensor(), rm, rv, true),
                      Contains("batch_norm: input [1,3]: training needs more than one value per channel"));
    CHECK_THROWS_WITH(batch_norm(constant({8}, 13), Tensor(), Tensor(), rm, rv, true),
                      Contains("batch_norm: input must be [N, C], [N, C, L] or [N, C, H, W], got [8]"));
}
