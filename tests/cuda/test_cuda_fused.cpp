// tests/cuda/test_cuda_fused.cpp: the fused bias_gelu, bias_silu, bias_silu_gate, masked_relu2,
// scale_shift_rope, add_layer_norm, gelu_linear and layer_norm_linear on the device against the
// CPU (check_parity), forward and backward: bias_gelu exact and tanh and bias_silu, widths that
// leave the last 32-column tile partial, one column, enough rows for sum_dim's chunked column sums
// (the dbias) and for the kernels' loop over the rows beyond one pass of the grid, a gradient for
// the bias or x only; bias_silu_gate with each input's gradient alone; masked_relu2 causal and not;
// scale_shift_rope with and without rotation; add_layer_norm with and without weight/bias, warp-
// and block-per-row lengths, both outputs used. On the device, add_layer_norm, layer_norm_linear
// and bias_silu_gate give the bits of the ops they fuse (the same device functions and GEMMs),
// bias_gelu the unfused ops' values within rounding, and dbias is bitwise repeatable.
//
// Tolerances: bias_gelu, bias_silu and masked_relu2 as the unary ops (atol 1e-6, rtol 1e-5: a
// GPU's erff/expf/tanhf against the CPU's vectorizable forms), their backward atol 1e-5, rtol 1e-4
// (dbias sums up to 5000 rows in another order; the 65,613 rows of the grid-loop test get atol
// 1e-4); add_layer_norm as layer_norm (forward atol 1e-5, rtol 1e-4; backward atol 1e-4, rtol
// 1e-3); the GEMM ops as linear.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <tuple>
#include "engine/autograd.h"
#include "engine/cuda/runtime.h"
#include "tests/cuda/parity.h"

using engine::Device;
using engine::Shape;
using engine::Tensor;
using test::check_parity;
using test::randn;

namespace {

const test::Tol kPointwise{1e-6f, 1e-5f}, kBiasBwd{1e-5f, 1e-4f};
const test::Tol kLnFwd{1e-5f, 1e-4f}, kLnBwd{1e-4f, 1e-3f};

std::vector<uint32_t> bits_of(const Tensor& t) {
    std::vector<float> v = t.to_vector();
    std::vector<uint32_t> b(v.size());
    std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
    return b;
}

Tensor scaled(const Shape& s, float scale, uint64_t seed, bool grad = true) {
    Tensor t = engine::mul(randn(s, false, seed), scale).detach();
    if (grad) t.requires_grad_(true);
    return t;
}

}  // namespace

TEST_CASE("cuda bias_gelu: exact and tanh, n = 1, 37, 96, 3-d input, dbias over many rows", "[cuda]") {
    for (bool approximate : {false, true})
        for (Shape s : {Shape{5, 1}, Shape{7, 37}, Shape{2, 9, 96}, Shape{5000, 40}}) {
            INFO("approximate " << approximate << " shape " << s.str());
            int64_t n = s[s.ndim - 1];
            Tensor x = scaled(s, 2.f, 3), b = randn({n}, true, 4);
            check_parity("bias_gelu", [approximate](auto& in) { return engine::bias_gelu(in[0], in[1], approximate); },
                         {x, b}, kPointwise, kBiasBwd);
        }
}

// bias_silu: the same kernels with the SiLU functor (float4 at 96, per element at 37).
TEST_CASE("cuda bias_silu: n = 1, 37, 96, dbias over many rows", "[cuda]") {
    for (Shape s : {Shape{5, 1}, Shape{7, 37}, Shape{2, 9, 96}, Shape{5000, 40}}) {
        INFO("shape " << s.str());
        int64_t n = s[s.ndim - 1];
        check_parity("bias_silu", [](auto& in) { return engine::bias_silu(in[0], in[1]); },
                     {scaled(s, 2.f, 7), randn({n}, true, 8)}, kPointwise, kBiasBwd);
    }
}

// masked_relu2 (GAU's scores): causal and not, T = S and T != S, and a size over several blocks
// that is not a multiple of the block (1,260 elements: 5 blocks of 256). The grid-stride loop's
// second pass needs over 134M elements (blocks_for's cap), too many for the emulator.
TEST_CASE("cuda masked_relu2: causal and not, square and not", "[cuda]") {
    for (bool causal : {true, false})
        for (Shape s : {Shape{2, 9, 9}, Shape{3, 5, 9}, Shape{2, 9, 5}, Shape{3, 20, 21}}) {
            INFO("causal " << causal << " shape " << s.str());
            check_parity("masked_relu2",
                         [causal](auto& in) { return engine::masked_relu2(in[0], 0.25f, causal); },
                         {scaled(s, 1.f, 60)}, kPointwise, kPointwise);
        }
}

// bias_silu_gate (GAU's U ⊙ A·V): the bias_act kernels with a gate, float4 (96, 40) and per
// element (1, 37), dbias over many rows, a gradient for each input alone. On the device it gives
// the bits of mul after bias_silu, whose kernels make the same products (dbias too: the same
// partial sums of the same dx).
TEST_CASE("cuda bias_silu_gate: float4 and not, dbias over many rows, the unfused ops' bits", "[cuda]") {
    for (Shape s : {Shape{5, 1}, Shape{7, 37}, Shape{2, 9, 96}, Shape{5000, 40}}) {
        INFO("shape " << s.str());
        const int64_t n = s[s.ndim - 1];
        auto f = [](auto& in) { return engine::bias_silu_gate(in[0], in[1], in[2]); };
        check_parity("bias_silu_gate", f, {scaled(s, 2.f, 80), randn({n}, true, 81), scaled(s, 1.f, 82)}, kPointwise,
                     kBiasBwd);
        for (int only = 0; only < 3; only++)
            check_parity("bias_silu_gate one gradient", f,
                         {scaled(s, 2.f, 80, only == 0), randn({n}, only == 1, 81), scaled(s, 1.f, 82, only == 2)},
                         kPointwise, kBiasBwd);
    }
    std::vector<Tensor> fused{test::to_cuda(scaled({300, 64}, 2.f, 83)), test::to_cuda(randn({64}, true, 84)),
                              test::to_cuda(scaled({300, 64}, 1.f, 85))};
    std::vector<Tensor> plain;
    for (const Tensor& t : fused) plain.push_back(t.detach().clone().requires_grad_(true));
    Tensor g = test::to_cuda(randn({300, 64}, false, 86));
    Tensor y = engine::bias_silu_gate(fused[0], fused[1], fused[2]);
    Tensor want = engine::mul(engine::bias_silu(plain[0], plain[1]), plain[2]);
    CHECK(bits_of(y) == bits_of(want));
    y.backward(g);
    want.backward(g);
    for (int i = 0; i < 3; i++) {
        INFO("gradient of input " << i);
        CHECK(bits_of(fused[i].grad()) == bits_of(plain[i].grad()));
    }
}

// scale_shift_rope (GAU's Q and K): with and without the rotation, pairs that leave the last
// 32-unit tile partial, GAU's s = 128, an odd width without rotation, rows enough for several
// chunks of the parameters' sums; Q and K from one intermediate z, so the second adds into z's
// gradient; and a gradient for the parameters only.
TEST_CASE("cuda scale_shift_rope: rotation or none, chunked sums, Q and K sharing z", "[cuda]") {
    for (auto [s, base] : {std::pair{Shape{2, 9, 8}, 10000.f}, std::pair{Shape{3, 70, 128}, 10000.f},
                           std::pair{Shape{5000, 6}, 100.f}, std::pair{Shape{40, 37}, 0.f},
                           std::pair{Shape{2, 300, 96}, 0.f}}) {
        INFO("shape " << s.str() << " base " << base);
        const int64_t D = s[s.ndim - 1];
        auto qk = [base](auto& in) {
            Tensor z = engine::mul(in[0], 1.f);  // an intermediate, as GAU's z: K's gradient adds into Q's
            return engine::concat({engine::scale_shift_rope(z, in[1], in[2], base),
                                   engine::scale_shift_rope(z, in[3], in[4], base)}, 0);
        };
        check_parity("scale_shift_rope", qk,
                     {scaled(s, 2.f, 70), scaled({D}, 1.f, 71), randn({D}, true, 72), scaled({D}, 1.f, 73),
                      randn({D}, true, 74)},
                     kPointwise, kLnBwd);
    }
    auto one = [](auto& in) { return engine::scale_shift_rope(in[0], in[1], in[2]); };
    check_parity("scale_shift_rope parameters only", one,
                 {scaled({4, 33, 16}, 2.f, 75, false), randn({16}, true, 76), randn({16}, true, 77)}, kPointwise,
                 kLnBwd);
}

TEST_CASE("cuda bias_gelu: a gradient for the bias only, and for x only", "[cuda]") {
    auto f = [](auto& in) { return engine::bias_gelu(in[0], in[1]); };
    check_parity("bias_gelu bias only", f, {scaled({33, 70}, 2.f, 5, false), randn({70}, true, 6)}, kPointwise,
                 kBiasBwd);
    check_parity("bias_gelu x only", f, {scaled({33, 70}, 2.f, 5), randn({70}, false, 6)}, kPointwise, kBiasBwd);
}

TEST_CASE("cuda bias_gelu: the unfused ops on the device; dbias bitwise repeatable", "[cuda]") {
    Tensor x = test::to_cuda(scaled({300, 64}, 2.f, 7)), b = test::to_cuda(randn({64}, true, 8));
    Tensor x2 = test::to_cuda(scaled({300, 64}, 2.f, 7)), b2 = test::to_cuda(randn({64}, true, 8));
    Tensor g = test::to_cuda(randn({300, 64}, false, 9));
    Tensor y = engine::bias_gelu(x, b), want = engine::gelu(engine::add(x2, b2));
    // The same functors on the same x + b (a compiler may still contract them differently in the
    // two kernels: within rounding, not necessarily the same bits).
    test::require_close("forward", want, y, kPointwise);
    y.backward(g);
    want.backward(g);
    test::require_close("dx", x2.grad(), x.grad(), kPointwise);
    test::require_close("dbias", b2.grad(), b.grad(), kBiasBwd);
    std::vector<uint32_t> first = bits_of(b.grad());
    b.zero_grad();
    engine::bias_gelu(x, b).backward(g);
    CHECK(bits_of(b.grad()) == first);
}

TEST_CASE("cuda add_layer_norm: with and without weight/bias, n = 1, 33, 1025, both outputs", "[cuda]") {
    auto both = [](auto& in) {
        engine::AddLayerNorm o = engine::add_layer_norm(in[0], in[1], in[2], in[3]);
        return engine::concat({o.sum, o.norm}, 0);
    };
    for (Shape s : {Shape{5, 1}, Shape{2, 3, 33}, Shape{130, 33}, Shape{3, 1025}}) {
        int64_t n = s[s.ndim - 1];
        for (int variant = 0; variant < 4; variant++) {
            bool with_w = variant & 1, with_b = variant & 2;
            INFO("shape " << s.str() << " weight " << with_w << " bias " << with_b);
            Tensor x = scaled(s, 2.f, 10), r = scaled(s, 1.f, 11);
            Tensor w = with_w ? test::rand_uniform({n}, 0.5f, 1.5f) : Tensor();
            Tensor b = with_b ? randn({n}, true, 12) : Tensor();
            check_parity("add_layer_norm", both, {x, r, w, b}, kLnFwd, kLnBwd);
        }
    }
}

TEST_CASE("cuda add_layer_norm: the bits of add then layer_norm on the device", "[cuda]") {
    for (Shape s : {Shape{40, 96}, Shape{4, 600}, Shape{3, 1030}}) {  // the row in registers, a warp, a block
        INFO("shape " << s.str());
        int64_t n = s[s.ndim - 1];
        Tensor x = test::to_cuda(scaled(s, 2.f, 13)), r = test::to_cuda(scaled(s, 1.f, 14));
        Tensor w = test::to_cuda(test::rand_uniform({n}, 0.5f, 1.5f)), b = test::to_cuda(randn({n}, true, 15));
        engine::AddLayerNorm got = engine::add_layer_norm(x, r, w, b);
        Tensor sum = engine::add(x, r);
        CHECK(bits_of(got.sum) == bits_of(sum));
        CHECK(bits_of(got.norm) == bits_of(engine::layer_norm(sum, w, b)));
    }
}

TEST_CASE("cuda fused ops: mixed devices are refused", "[cuda]") {
    Tensor x = test::to_cuda(randn({2, 3}, false)), cpu = randn({3}, false);
    CHECK_THROWS_WITH(engine::bias_gelu(x, cpu), Catch::Contains("bias_gelu"));
    CHECK_THROWS_WITH(engine::add_layer_norm(x, randn({2, 3}, false), Tensor(), Tensor()),
                      Catch::Contains("add_layer_norm"));
}

TEST_CASE("cuda bias_gelu: more rows than one pass of the grid covers (4096 x 8)", "[cuda]") {
    // The grid's y dim is capped at 4096 blocks of 8 rows; the rows beyond are the loop's (fresh
    // device memory is NaN in the emulator, so a row the loop missed shows).
    Tensor x = scaled({4096 * 8 * 2 + 77, 2}, 2.f, 16), b = randn({2}, true, 17);
    check_parity("bias_gelu many rows", [](auto& in) { return engine::bias_gelu(in[0], in[1]); }, {x, b}, kPointwise,
                 {1e-4f, 1e-4f});
}

// gelu_linear (engine/ops/matmul.h): linear(bias_gelu(h, b1), w, b), keeping h and recomputing the
// GELU's output in the backward, where the kernel that computes dh writes it over dA (the float4
// kernel at width 96, the per-element one at 37). Tolerances as linear's (tests/cuda/test_cuda_matmul.cpp).
TEST_CASE("cuda gelu_linear: against the CPU, exact and tanh, widths 96 and 37, gradients of some inputs, a residual",
          "[cuda]") {
    const test::Tol kGemm{1e-4f, 1e-4f};
    for (bool approximate : {false, true})
        for (int64_t hidden : {96, 37}) {
            INFO("approximate " << approximate << " hidden " << hidden);
            Tensor h = scaled({3, 11, hidden}, 2.f, 20), b1 = randn({hidden}, true, 21),
                   w = randn({10, hidden}, true, 22), b = randn({10}, true, 23);
            check_parity("gelu_linear",
                         [approximate](auto& in) { return engine::gelu_linear(in[0], in[1], in[2], in[3], approximate); },
                         {h, b1, w, b}, kGemm, kGemm);
        }
    auto f = [](auto& in) { return engine::gelu_linear(in[0], in[1], in[2], in[3]); };
    // Only the weight: the GELU's output recomputed by the forward kernel, no dA.
    check_parity("gelu_linear weight only", f,
                 {scaled({9, 40}, 2.f, 24, false), randn({40}, false, 25), randn({6, 40}, true, 26), randn({6}, false, 27)},
                 kGemm, kGemm);
    // h and b1 only: dh and db1 without the recomputed output.
    check_parity("gelu_linear h and b1 only", f,
                 {scaled({9, 40}, 2.f, 28), randn({40}, true, 29), randn({6, 40}, false, 30), Tensor()}, kGemm, kGemm);
    // With a residual added by the GEMM (a Pre-LN block's second add), 12 (float4 rows) and 5 columns.
    for (int64_t out : {12, 5})
        check_parity("gelu_linear residual",
                     [](auto& in) { return engine::gelu_linear(in[0], in[1], in[2], in[3], false, in[4]); },
                     {scaled({2, 9, 40}, 2.f, 31), randn({40}, true, 32), randn({out, 40}, true, 33),
                      randn({out}, true, 34), randn({2, 9, out}, true, 35)},
                     kGemm, kGemm);
}

TEST_CASE("cuda gelu_linear: bias_gelu then linear on the device, one [rows, hidden] tensor less kept", "[cuda]") {
    const int64_t rows = 64, hidden = 256, out = 16;
    Tensor x = test::to_cuda(randn({rows, 32}, true, 31)), w1 = test::to_cuda(randn({hidden, 32}, true, 32)),
           b1 = test::to_cuda(randn({hidden}, true, 33)), w2 = test::to_cuda(randn({out, hidden}, true, 34)),
           b2 = test::to_cuda(randn({out}, true, 35));
    Tensor g = test::to_cuda(randn({rows, out}, false, 36));
    std::vector<Tensor> leaves{x, w1, b1, w2, b2};
    struct Run {
        Tensor y;
        std::vector<Tensor> grads;
        size_t held;
    };
    auto run = [&](bool fused) {
        for (Tensor& t : leaves) t.zero_grad();
        size_t before = engine::cuda::memory_in_use();
        Tensor h = engine::linear(x, w1);
        Tensor y = fused ? engine::gelu_linear(h, b1, w2, b2) : engine::linear(engine::bias_gelu(h, b1), w2, b2);
        h = Tensor();  // held by the graph only
        Run r{y.detach(), {}, engine::cuda::memory_in_use() - before};
        y.backward(g);
        for (Tensor& t : leaves) r.grads.push_back(t.grad().detach().to(Device::CPU));
        return r;
    };
    Run fused = run(true), plain = run(false);
    CHECK(plain.held - fused.held == (size_t)rows * hidden * sizeof(float));
    // The same GEMMs and the same GELU functor, here in two kernels each (nvcc may contract the
    // functor differently in the backward kernel that recomputes it): within rounding.
    test::require_close("forward", plain.y, fused.y, kPointwise);
    for (size_t i = 0; i < leaves.size(); i++) {
        INFO("input " << i);
        test::require_close("gradient", plain.grads[i], fused.grads[i], kPointwise);
    }
}


// layer_norm_linear (engine/ops/matmul.h): linear(layer_norm(x), w, b), keeping x and rebuilding
// the norm's output in the backward with the forward kernel. Widths for the warp-per-row (96, 33)
// and block-per-row (1025) LayerNorm kernels; tolerances as linear's.
TEST_CASE("cuda layer_norm_linear: against the CPU, n = 33, 96, 1025, with and without norm parameters", "[cuda]") {
    const test::Tol kGemm{1e-4f, 1e-4f};
    auto f = [](auto& in) { return engine::layer_norm_linear(in[0], in[1], in[2], 1e-5f, in[3], in[4]); };
    for (int64_t n : {33, 96, 1025})
        for (bool affine : {true, false}) {
            INFO("n " << n << " affine " << affine);
            check_parity("layer_norm_linear", f,
                         {scaled({3, 11, n}, 2.f, 40), affine ? randn({n}, true, 41) : Tensor(),
                          affine ? randn({n}, true, 42) : Tensor(), randn({10, n}, true, 43), randn({10}, true, 44)},
                         kGemm, kGemm);
        }
    // Only the weight: the norm's output rebuilt, no dY. x and the norm only: dY without the rebuild.
    check_parity("layer_norm_linear weight only", f,
                 {scaled({9, 40}, 2.f, 45, false), randn({40}, false, 46), randn({40}, false, 47),
                  randn({6, 40}, true, 48), randn({6}, false, 49)},
                 kGemm, kGemm);
    check_parity("layer_norm_linear x and norm only", f,
                 {scaled({9, 40}, 2.f, 50), randn({40}, true, 51), randn({40}, true, 52), randn({6, 40}, false, 53),
                  Tensor()},
                 kGemm, kGemm);
}

TEST_CASE("cuda layer_norm_linear: the bits of layer_norm then linear on the device, one [rows, in] tensor less kept",
          "[cuda]") {
    const int64_t rows = 64, in = 96, out = 16;
    Tensor x0 = test::to_cuda(randn({rows, in}, true, 54)), nw = test::to_cuda(randn({in}, true, 55)),
           nb = test::to_cuda(randn({in}, true, 56)), w = test::to_cuda(randn({out, in}, true, 57)),
           b = test::to_cuda(randn({out}, true, 58));
    Tensor g = test::to_cuda(randn({rows, out}, false, 59));
    std::vector<Tensor> leaves{x0, nw, nb, w, b};
    struct Run {
        std::vector<uint32_t> y;
        std::vector<std::vector<uint32_t>> grads;
        size_t held;
    };
    auto run = [&](bool fused) {
        for (Tensor& t : leaves) t.zero_grad();
        size_t before = engine::cuda::memory_in_use();
        Tensor x = engine::mul(x0, 1.f);  // an intermediate, as a residual sum is
        Tensor y = fused ? engine::layer_norm_linear(x, nw, nb, 1e-5f, w, b)
                         : engine::linear(engine::layer_norm(x, nw, nb), w, b);
        x = Tensor();  // held by the graph only
        Run r{bits_of(y), {}, engine::cuda::memory_in_use() - before};
        y.backward(g);
        for (Tensor& t : leaves) r.grads.push_back(bits_of(t.grad()));
        return r;
    };
    Run fused = run(true), plain = run(false);
    CHECK(plain.held - fused.held == (size_t)rows * in * sizeof(float));
    // The same kernels and GEMMs on the same inputs (the rebuilt output is the forward kernel's).
    CHECK(fused.y == plain.y);
    for (size_t i = 0; i < leaves.size(); i++) {
        INFO("input " << i);
        CHECK(fused.grads[i] == plain.grads[i]);
    }
}

// The output layer and the loss, chunk by chunk (V = 40,000: three chunks of up to 104 rows), with
// and without a bias, ignored targets and label smoothing; on the device against the CPU, and
// against cross_entropy of linear on the device.
TEST_CASE("cuda linear_cross_entropy: against the CPU and the unfused ops, over several chunks", "[cuda]") {
    for (auto [rows, V, bias, smoothing] : {std::tuple<int64_t, int64_t, bool, float>{300, 40000, true, 0.f},
                                             {300, 40000, false, 0.1f},
                                             {7, 33, true, 0.f}}) {
        INFO("rows " << rows << " V " << V << " bias " << bias << " smoothing " << smoothing);
        Tensor x = scaled({rows, 8}, 1.f, 60), w = scaled({V, 8}, 0.3f, 61);
        Tensor b = bias ? scaled({V}, 0.3f, 62) : Tensor();
        Tensor t = Tensor::empty({rows}, engine::DType::I32);
        for (int64_t i = 0; i < rows; i++) t.data_i32()[i] = i % 5 == 0 ? -100 : (int32_t)((i * 7919) % V);
        auto fused = [smoothing](const std::vector<Tensor>& in) {
            return engine::linear_cross_entropy(in[0], in[1], in[2], in[3], -100, smoothing);
        };
        const test::Tol tol{1e-5f, 1e-4f};
        check_parity("linear_cross_entropy", fused, {x, w, b, t}, tol, tol);
        // On the device, against cross_entropy(linear(...)): the loss and each gradient.
        auto run = [&](bool fused_op) {
            std::vector<Tensor> in{test::to_cuda(x), test::to_cuda(w), test::to_cuda(b), test::to_cuda(t)};
            Tensor loss = fused_op ? fused(in) : engine::cross_entropy(engine::linear(in[0], in[1], in[2]), in[3],
                                                                       -100, smoothing);
            engine::mul(loss, 1.5f).backward();
            return std::vector<Tensor>{loss, in[0].grad(), in[1].grad(), bias ? in[2].grad() : Tensor()};
        };
        std::vector<Tensor> f = run(true), u = run(false);
        for (size_t i = 0; i < f.size(); i++) {
            if (!u[i].defined()) continue;
            test::require_close("fused against unfused on the device, output " + std::to_string(i), u[i], f[i], tol);
        }
    }
}
