// tests/cuda/test_cuda_bf16.cpp: --precision bf16 on the device (engine::cuda::GemmPrecision::bf16):
// every cuBLAS GEMM rounds its two inputs to bf16 and accumulates in fp32; nothing else changes.
//
//   - GEMM level: a bf16 GEMM equals the fp32 GEMM of the inputs rounded to bf16 (by a reference
//     rounding written here, independent of the kernel's) up to summation order, and differs from
//     the fp32 GEMM of the original inputs by no more than bf16 rounding allows, and not by zero;
//     exact cases pin round-to-nearest-even (ties to even, above-tie up, both operands).
//   - Models: one training step of each family (ViT, transformer LM, GAU LM, LSTM LM, ConvMixer) in
//     bf16 against the same step in fp32 on the same batch: loss and SGD parameter update within
//     bounds derived below.
// Under the emulated build the bf16 GEMM is the emulator's cublasGemmEx, which reads the bf16 bits.
#include <catch2/catch.hpp>

#include <array>
#include <cfenv>
#include <cmath>
#include "engine/cpu/matmul.h"
#include "engine/cuda/flash_attention.h"
#include "engine/cuda/matmul.h"
#include "engine/error.h"
#include "nn/convmixer.h"
#include "nn/gau.h"
#include "nn/lstm.h"
#include "nn/optim.h"
#include "nn/transformer.h"
#include "tests/cuda/parity.h"
#include "tests/helpers.h"

using engine::Device;
using engine::Tensor;
using engine::cuda::GemmPrecision;

namespace {

// bf16 keeps 8 significant bits. Reference rounding by arithmetic, not by bits: x = m·2^e with
// 0.5 <= |m| < 1, and m·2^8 rounded to the nearest integer, ties to even (nearbyint in the default
// rounding mode). Enough for the normal, finite values these tests use.
float bf16_round(float x) {
    if (x == 0.f || !std::isfinite(x)) return x;
    int e;
    double m = std::frexp((double)x, &e);
    return (float)std::ldexp(std::nearbyint(std::ldexp(m, 8)), e - 8);
}

Tensor rounded(const Tensor& t) {
    Tensor r = t.clone();
    float* p = r.data_f32();
    for (int64_t i = 0; i < r.numel(); i++) p[i] = bf16_round(p[i]);
    return r;
}

Tensor absolute(const Tensor& t) {
    Tensor r = t.clone();
    float* p = r.data_f32();
    for (int64_t i = 0; i < r.numel(); i++) p[i] = std::fabs(p[i]);
    return r;
}

Tensor stored(bool trans, int64_t rows, int64_t cols, uint64_t seed) {  // op(X) is [rows, cols]
    return test::randn(trans ? engine::Shape{cols, rows} : engine::Shape{rows, cols}, false, seed);
}

// C = op(A)·op(B) on the device at the given precision.
Tensor device_gemm(GemmPrecision p, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const Tensor& a, const Tensor& b) {
    engine::cuda::set_gemm_precision(p);
    Tensor da = a.to(Device::CUDA), db = b.to(Device::CUDA), c = Tensor::empty({M, N}, engine::DType::F32, Device::CUDA);
    engine::cuda::gemm(ta, tb, M, N, K, 1.f, da.raw_f32(), db.raw_f32(), 0.f, c.raw_f32());
    return c.to(Device::CPU);
}

Tensor cpu_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const Tensor& a, const Tensor& b) {
    Tensor c = Tensor::empty({M, N});
    engine::cpu::gemm(ta, tb, M, N, K, 1.f, a.data_f32(), b.data_f32(), 0.f, c.data_f32());
    return c;
}

}  // namespace

TEST_CASE("bf16: the reference rounding is round-to-nearest-even on 8 significant bits", "[cuda]") {
    REQUIRE(std::fegetround() == FE_TONEAREST);
    const float u = std::ldexp(1.f, -8);  // half an ulp of bf16 at 1 (its ulp there is 2^-7)
    CHECK(bf16_round(1.f + u) == 1.f);                                        // tie, 1 is even
    CHECK(bf16_round(1.f + 3 * u) == 1.f + 4 * u);                            // tie, 1 + 2^-6 is even
    CHECK(bf16_round(1.f + u + std::ldexp(1.f, -20)) == 1.f + 2 * u);        // above the tie: up
    CHECK(bf16_round(-(1.f + u + std::ldexp(1.f, -20))) == -(1.f + 2 * u));  // symmetric
    CHECK(bf16_round(3.f) == 3.f);
}

// Exact cases: op(A) = [v_i] (M×1) times op(B) = [1] gives [round(v_i)] with nothing to add, so the
// device result must be the rounded values bit for bit; swapping the roles checks B's rounding.
TEST_CASE("cuda bf16 gemm: both inputs are rounded to nearest even, bit for bit", "[cuda]") {
    test::PrecisionScope precision;  // restores both when the test ends
    const bool fast = GENERATE(false, true);  // our rounding into scratch, then cuBLAS's own (FAST_16BF)
    test::Bf16FastGemmScope fast_scope(fast);
    INFO("bf16 fast GEMM " << fast);
    test::FusedAttentionScope fused_switch;
    const float u = std::ldexp(1.f, -8);
    const std::array<float, 5> v = {1.f + u, 1.f + 3 * u, 1.f + u + std::ldexp(1.f, -20),
                                    -(1.f + u + std::ldexp(1.f, -20)), 0.3f};
    const std::array<float, 5> want = {1.f, 1.f + 4 * u, 1.f + 2 * u, -(1.f + 2 * u), bf16_round(0.3f)};
    Tensor col = Tensor::from_vector(std::vector<float>(v.begin(), v.end()), {5, 1});
    Tensor one = Tensor::full({1, 1}, 1.f);
    std::vector<float> a_side = device_gemm(GemmPrecision::bf16, false, false, 5, 1, 1, col, one).to_vector();
    std::vector<float> b_side = device_gemm(GemmPrecision::bf16, false, false, 1, 5, 1, one, col.reshape({1, 5})).to_vector();
    for (size_t i = 0; i < v.size(); i++) {
        INFO("value " << i << ": " << v[i]);
        CHECK(a_side[i] == want[i]);
        CHECK(b_side[i] == want[i]);
    }
    // Batched GEMMs round too, and fp32 is exact again afterwards.
    engine::cuda::set_gemm_precision(GemmPrecision::bf16);
    Tensor dc = col.to(Device::CUDA), d1 = one.to(Device::CUDA), out = Tensor::empty({5, 1}, engine::DType::F32, Device::CUDA);
    engine::cuda::gemm_batched(false, false, 5, 1, 1, 1, dc.raw_f32(), 1, d1.raw_f32(), 0, out.raw_f32(), 1);
    std::vector<float> batched = out.to_vector();
    for (size_t i = 0; i < v.size(); i++) CHECK(batched[i] == want[i]);
    std::vector<float> fp32 = device_gemm(GemmPrecision::fp32, false, false, 5, 1, 1, col, one).to_vector();
    for (size_t i = 0; i < v.size(); i++) CHECK(fp32[i] == v[i]);
}

// Random GEMMs, every transpose pair, K up to 1025.
//  1. Against the fp32 GEMM of the bf16-rounded inputs: the same exact products (a product of two
//     bf16 values fits fp32's 24-bit significand), added in fp32 in another order: the fp32
//     parity tolerance, atol 1e-4, rtol 1e-4 (|C| ≲ 100 here). A bf16 *accumulator* would be off
//     by ~|C|·2^-9 and fail this at K = 1025.
//  2. Against the fp32 GEMM of the original inputs: each input is off by at most 2^-8 relative
//     (half an ulp of an 8-bit significand), so each product by at most (2·2^-8 + 2^-16), and the
//     sum by at most that times Σ|a||b| (computed with the same GEMM on |A|, |B|), plus the fp32
//     summation slack of case 1. (A truncating conversion can err by twice as much but need not
//     exceed this bound; the next test catches it by its bias.)
//  3. Not zero: bf16 really happened (random inputs have bits below bf16's).
TEST_CASE("cuda bf16 gemm: equals fp32 on rounded inputs; within bf16 rounding of fp32", "[cuda]") {
    test::PrecisionScope precision;  // restores both when the test ends
    const bool fast = GENERATE(false, true);  // our rounding into scratch, then cuBLAS's own (FAST_16BF)
    test::Bf16FastGemmScope fast_scope(fast);
    INFO("bf16 fast GEMM " << fast);
    test::FusedAttentionScope fused_switch;
    const double unit = std::ldexp(1.0, -8), per_product = 2 * unit + unit * unit;
    for (bool ta : {false, true})
        for (bool tb : {false, true})
            for (auto [M, N, K] : {std::array<int64_t, 3>{1, 1, 1}, {7, 33, 5}, {33, 1, 7}, {5, 3, 1025}, {16, 24, 64}}) {
                INFO("ta " << ta << " tb " << tb << " M " << M << " N " << N << " K " << K);
                Tensor a = stored(ta, M, K, 31), b = stored(tb, K, N, 32);
                Tensor got = device_gemm(GemmPrecision::bf16, ta, tb, M, N, K, a, b);
                test::require_close("bf16 gemm vs fp32 gemm of rounded inputs", cpu_gemm(ta, tb, M, N, K, rounded(a), rounded(b)),
                                    got, {1e-4f, 1e-4f});
                std::vector<float> exact = cpu_gemm(ta, tb, M, N, K, a, b).to_vector(), g = got.to_vector();
                std::vector<float> mag = cpu_gemm(ta, tb, M, N, K, absolute(a), absolute(b)).to_vector();
                double worst = 0, differ = 0;
                for (size_t i = 0; i < g.size(); i++) {
                    double err = std::fabs((double)g[i] - exact[i]), allowed = per_product * mag[i] + 1e-4 + 1e-4 * std::fabs(exact[i]);
                    worst = test::max_err(worst, err / allowed);
                    if (g[i] != exact[i]) differ++;
                }
                CHECK(worst <= 1.0);
                CHECK(differ > 0);
            }
}

// Truncation instead of rounding: its error is one-sided, so over many elements the signed mean of
// (bf16 GEMM − fp32 GEMM) drifts; rounding's stays near zero. With positive inputs every term
// drifts the same way: truncation drops on average half a bf16 ulp (~2^-8/1.4 relative) of each
// input, a mean relative error near −5e-3 for the product; rounding's mean is ~0 (a few 1e-5 of
// sampling noise over 1024 outputs of 256 terms).
TEST_CASE("cuda bf16 gemm: the rounding is unbiased (a truncating conversion would not be)", "[cuda]") {
    test::PrecisionScope precision;  // restores both when the test ends
    const bool fast = GENERATE(false, true);  // our rounding into scratch, then cuBLAS's own (FAST_16BF)
    test::Bf16FastGemmScope fast_scope(fast);
    INFO("bf16 fast GEMM " << fast);
    test::FusedAttentionScope fused_switch;
    const int64_t M = 32, N = 32, K = 256;
    Tensor a = absolute(test::randn({M, K}, false, 41)), b = absolute(test::randn({K, N}, false, 42));
    std::vector<float> g = device_gemm(GemmPrecision::bf16, false, false, M, N, K, a, b).to_vector();
    std::vector<float> exact = cpu_gemm(false, false, M, N, K, a, b).to_vector();
    double mean_rel = 0;
    for (size_t i = 0; i < g.size(); i++) mean_rel += ((double)g[i] - exact[i]) / exact[i];
    mean_rel /= (double)g.size();
    INFO("mean relative error " << mean_rel);
    CHECK(std::fabs(mean_rel) < 2e-4);
}

TEST_CASE("cuda bf16 gemm_batched: strided and shared operands against fp32 on rounded inputs", "[cuda]") {
    test::PrecisionScope precision;  // restores both when the test ends
    const bool fast = GENERATE(false, true);  // our rounding into scratch, then cuBLAS's own (FAST_16BF)
    test::Bf16FastGemmScope fast_scope(fast);
    INFO("bf16 fast GEMM " << fast);
    test::FusedAttentionScope fused_switch;
    const int64_t batch = 3, M = 7, N = 5, K = 33;
    for (bool ta : {false, true})
        for (bool tb : {false, true})
            for (int shared : {0, 1, 2}) {  // 0: none, 1: A shared, 2: B shared
                INFO("ta " << ta << " tb " << tb << " shared " << shared);
                int64_t sa = shared == 1 ? 0 : M * K, sb = shared == 2 ? 0 : K * N;
                Tensor a = test::randn({shared == 1 ? 1 : batch, M * K}, false, 43);
                Tensor b = test::randn({shared == 2 ? 1 : batch, K * N}, false, 44);
                Tensor ra = rounded(a), rb = rounded(b), want = Tensor::empty({batch, M, N});
                engine::cpu::gemm_batched(ta, tb, batch, M, N, K, ra.data_f32(), sa, rb.data_f32(), sb, want.data_f32(), M * N);
                engine::cuda::set_gemm_precision(GemmPrecision::bf16);
                Tensor da = a.to(Device::CUDA), db = b.to(Device::CUDA);
                Tensor got = Tensor::empty({batch, M, N}, engine::DType::F32, Device::CUDA);
                engine::cuda::gemm_batched(ta, tb, batch, M, N, K, da.raw_f32(), sa, db.raw_f32(), sb, got.raw_f32(), M * N);
                test::require_close("bf16 gemm_batched", want, got, {1e-4f, 1e-4f});
            }
}

// gemm_batched_ld (rows padded, as attention pads P's): the padding of A and B holds NaN and must
// never be read; C's holds a sentinel and must never be written. fp32 and bf16 (bf16 rounds the
// operands it copies by their row strides).
TEST_CASE("cuda gemm_batched_ld: padded rows of A, B and C, in fp32 and bf16", "[cuda]") {
    test::PrecisionScope precision;
    const bool fast = GENERATE(false, true);  // our rounding into scratch, then cuBLAS's own (FAST_16BF)
    test::Bf16FastGemmScope fast_scope(fast);
    INFO("bf16 fast GEMM " << fast);
    const int64_t batch = 2, M = 5, N = 7, K = 9, pad = 3;
    for (GemmPrecision p : {GemmPrecision::fp32, GemmPrecision::bf16})
        for (bool ta : {false, true})
            for (bool tb : {false, true}) {
                INFO("precision " << engine::cuda::gemm_precision_name(p) << " ta " << ta << " tb " << tb);
                const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
                const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = N + pad;
                Tensor a = test::randn({batch, a_rows, a_cols}, false, 61), b = test::randn({batch, b_rows, b_cols}, false, 62);
                if (p == GemmPrecision::bf16) a = rounded(a), b = rounded(b);
                Tensor want = Tensor::empty({batch, M, N});
                engine::cpu::gemm_batched(ta, tb, batch, M, N, K, a.data_f32(), a_rows * a_cols, b.data_f32(),
                                          b_rows * b_cols, want.data_f32(), M * N);
                // The padded copies: NaN in A's and B's padding, 7 in C's.
                auto padded = [&](const Tensor& t, int64_t rows, int64_t cols, int64_t ld, float fill) {
                    std::vector<float> v((size_t)(batch * rows * ld), fill);
                    for (int64_t i = 0; i < batch * rows; i++)
                        for (int64_t j = 0; j < cols; j++) v[(size_t)(i * ld + j)] = t.data_f32()[i * cols + j];
                    return Tensor::from_vector(v, {batch * rows * ld}).to(Device::CUDA);
                };
                Tensor da = padded(a, a_rows, a_cols, lda, NAN), db = padded(b, b_rows, b_cols, ldb, NAN);
                Tensor dc = padded(Tensor::zeros({batch, M, N}), M, N, ldc, 7.f);
                engine::cuda::set_gemm_precision(p);
                engine::cuda::gemm_batched_ld(ta, tb, batch, M, N, K, da.raw_f32(), a_rows * lda, lda, db.raw_f32(),
                                              b_rows * ldb, ldb, dc.raw_f32(), M * ldc, ldc);
                engine::cuda::set_gemm_precision(GemmPrecision::fp32);
                std::vector<float> c = dc.to_vector(), got;
                for (int64_t i = 0; i < batch * M; i++)
                    for (int64_t j = 0; j < ldc; j++) {
                        if (j < N) got.push_back(c[(size_t)(i * ldc + j)]);
                        else REQUIRE(c[(size_t)(i * ldc + j)] == 7.f);  // padding untouched
                    }
                test::require_close("gemm_batched_ld", want, Tensor::from_vector(got, {batch, M, N}), {1e-4f, 1e-4f});
            }
}

// Attention's per-head GEMMs read one head's columns of a [B, T, 3·H·D] projection: A's lines are
// D of every 3·H·D floats. The bf16 GEMM must round only those (before session 12 it rounded the
// whole span from the first to the last element read, the other heads' columns too, once per
// head). D = 4 takes the float4 conversion kernel, D = 3 the scalar one; B shared (stride 0) is
// rounded once, not once per batch entry.
TEST_CASE("cuda bf16 gemm_batched_ld: a per-head operand rounds only the elements the GEMM reads", "[cuda]") {
    test::PrecisionScope precision;
    const bool fast = GENERATE(false, true);  // our rounding into scratch, then cuBLAS's own (FAST_16BF)
    test::Bf16FastGemmScope fast_scope(fast);
    INFO("bf16 fast GEMM " << fast);
    const int64_t batch = 3, T = 5, H = 2;
    for (int64_t D : {4, 3})
        for (int h : {0, 1})
            for (bool shared_b : {false, true}) {
                INFO("D " << D << " head " << h << " shared B " << shared_b);
                const int64_t row = 3 * H * D;  // one token's q, k and v of every head
                Tensor qkv = test::randn({batch, T, row}, false, 71);
                // The CPU reference on packed, rounded copies of the head's q and k columns.
                Tensor q = Tensor::empty({batch, T, D}), k = Tensor::empty({shared_b ? 1 : batch, T, D});
                for (int64_t b = 0; b < batch; b++)
                    for (int64_t t = 0; t < T; t++)
                        for (int64_t d = 0; d < D; d++) {
                            const float* src = qkv.data_f32() + (b * T + t) * row;
                            q.data_f32()[(b * T + t) * D + d] = bf16_round(src[h * D + d]);
                            if (b < k.size(0)) k.data_f32()[(b * T + t) * D + d] = bf16_round(src[H * D + h * D + d]);
                        }
                Tensor want = Tensor::empty({batch, T, T});
                engine::cpu::gemm_batched(false, true, batch, T, T, D, q.data_f32(), T * D, k.data_f32(),
                                          shared_b ? 0 : T * D, want.data_f32(), T * T);
                Tensor dqkv = qkv.to(Device::CUDA), got = Tensor::empty({batch, T, T}, engine::DType::F32, Device::CUDA);
                engine::cuda::set_gemm_precision(GemmPrecision::bf16);
                const uint64_t before = engine::cuda::bf16_rounded_elements();
                engine::cuda::gemm_batched_ld(false, true, batch, T, T, D, dqkv.raw_f32() + h * D, T * row, row,
                                              dqkv.raw_f32() + H * D + h * D, shared_b ? 0 : T * row, row,
                                              got.raw_f32(), T * T, 0);
                const uint64_t rounded_now = engine::cuda::bf16_rounded_elements() - before;
                engine::cuda::set_gemm_precision(GemmPrecision::fp32);
                CHECK(rounded_now == (fast ? 0 : (uint64_t)((batch + (shared_b ? 1 : batch)) * T * D)));
                test::require_close("per-head bf16 gemm_batched_ld", want, got, {1e-4f, 1e-4f});
            }
}

// gemm_batched_layout: attention's two kinds of product over every head of a batch, as the
// unfused attention calls them. Scores: q and k as the column blocks of a [B, T, 3·H·D]
// projection (groups of H heads D apart), C head-major with padded rows, beta = 1 onto what C
// holds. Values: A one stride (head-major P), B and C grouped (v in the projection, out in a
// [B, T, H·D] tensor). fp32 and bf16 (packed and FAST_16BF), a call per head or one call from
// address arrays; against the CPU head by head; C's padding untouched.
TEST_CASE("cuda gemm_batched_layout: every head in a call per head or in one call from address arrays",
          "[cuda]") {
    test::PrecisionScope precision;
    const bool pointers = GENERATE(false, true);
    const bool fast = GENERATE(false, true);
    test::PointerBatchScope pointer_scope(pointers);
    test::Bf16FastGemmScope fast_scope(fast);
    const int64_t B = 3, T = 5, H = 2, pad = 3, ldp = T + pad;
    for (int64_t D : {4, 3})
        for (GemmPrecision p : {GemmPrecision::fp32, GemmPrecision::bf16}) {
            if (p == GemmPrecision::fp32 && fast) continue;  // (fast is a bf16 setting)
            INFO("D " << D << " precision " << engine::cuda::gemm_precision_name(p) << " pointers " << pointers
                      << " fast " << fast);
            const int64_t row = 3 * H * D;
            Tensor qkv = test::randn({B, T, row}, false, 91), c0 = test::randn({B * H, T, T}, false, 92);
            Tensor x = p == GemmPrecision::bf16 ? rounded(qkv) : qkv;
            // The CPU reference, head by head: scores = q·kᵀ + c0, out = scores·v.
            Tensor want_s = c0.clone(), want_o = Tensor::empty({B, T, H * D});
            for (int64_t b = 0; b < B; b++)
                for (int64_t h = 0; h < H; h++) {
                    const float* xb = x.data_f32() + b * T * row;
                    float* s = want_s.data_f32() + (b * H + h) * T * T;
                    engine::cpu::gemm_ld(false, true, T, T, D, 1.f, xb + h * D, row, xb + H * D + h * D, row, 1.f, s,
                                         T);
                }
            Tensor s_in = p == GemmPrecision::bf16 ? rounded(want_s) : want_s;  // (the values GEMM's A)
            for (int64_t b = 0; b < B; b++)
                for (int64_t h = 0; h < H; h++)
                    engine::cpu::gemm_ld(false, false, T, D, T, 1.f, s_in.data_f32() + (b * H + h) * T * T, T,
                                         x.data_f32() + b * T * row + 2 * H * D + h * D, row, 0.f,
                                         want_o.data_f32() + b * T * H * D + h * D, H * D);
            // The device: scores into rows padded with a sentinel.
            std::vector<float> padded((size_t)(B * H * T * ldp), 7.f);
            for (int64_t r = 0; r < B * H * T; r++)
                for (int64_t j = 0; j < T; j++) padded[(size_t)(r * ldp + j)] = c0.data_f32()[r * T + j];
            Tensor dqkv = qkv.to(Device::CUDA), ds = Tensor::from_vector(padded, {B * H * T * ldp}).to(Device::CUDA);
            Tensor dout = Tensor::empty({B, T, H * D}, engine::DType::F32, Device::CUDA);
            const engine::cuda::BatchLayout heads{row, D, H, T * row}, p_at{ldp, T * ldp},
                out_at{H * D, D, H, T * H * D};
            engine::cuda::set_gemm_precision(p);
            const uint64_t calls = engine::cuda::pointer_batch_calls();
            const uint64_t rounded_before = engine::cuda::bf16_rounded_elements();
            const float* q = dqkv.raw_f32();
            engine::cuda::gemm_batched_layout(false, true, B * H, T, T, D, q, heads, q + H * D, heads, ds.raw_f32(),
                                              p_at, 1.f);
            engine::cuda::gemm_batched_layout(false, false, B * H, T, D, T, ds.raw_f32(), p_at, q + 2 * H * D, heads,
                                              dout.raw_f32(), out_at);
            engine::cuda::set_gemm_precision(GemmPrecision::fp32);
            CHECK(engine::cuda::pointer_batch_calls() - calls == (pointers ? 2u : 0u));
            if (p == GemmPrecision::bf16 && !fast)  // q, k; P, v: only the elements read
                CHECK(engine::cuda::bf16_rounded_elements() - rounded_before == (uint64_t)(B * H * T * (3 * D + T)));
            std::vector<float> got_s = ds.to_vector(), scores;
            for (int64_t r = 0; r < B * H * T; r++)
                for (int64_t j = 0; j < ldp; j++) {
                    if (j < T) scores.push_back(got_s[(size_t)(r * ldp + j)]);
                    else REQUIRE(got_s[(size_t)(r * ldp + j)] == 7.f);
                }
            test::require_close("scores", want_s, Tensor::from_vector(scores, {B * H, T, T}), {1e-4f, 1e-4f});
            test::require_close("values", want_o, dout, {1e-3f, 1e-3f});
        }
}

TEST_CASE("cuda gemm_batched_layout: operands grouped differently are refused", "[cuda]") {
    using Catch::Contains;
    Tensor x = Tensor::zeros({64}).to(Device::CUDA), c = Tensor::zeros({64}).to(Device::CUDA);
    const engine::cuda::BatchLayout two{4, 1, 2, 8}, three{4, 1, 3, 8};
    REQUIRE_THROWS_WITH(engine::cuda::gemm_batched_layout(false, false, 6, 1, 1, 1, x.raw_f32(), two, x.raw_f32(),
                                                          three, c.raw_f32(), {1, 1}),
                        Contains("gemm_batched") && Contains("groups differ (2, 3, 0)"));
}

TEST_CASE("cuda bf16 gemm: alpha, beta, K = 0, empty outputs, and errors naming cublasGemmEx", "[cuda]") {
    using Catch::Contains;
    test::PrecisionScope precision;  // restores both when the test ends
    const bool fast = GENERATE(false, true);  // our rounding into scratch, then cuBLAS's own (FAST_16BF)
    test::Bf16FastGemmScope fast_scope(fast);
    INFO("bf16 fast GEMM " << fast);
    test::FusedAttentionScope fused_switch;
    engine::cuda::set_gemm_precision(GemmPrecision::bf16);
    // alpha and beta stay fp32 (only A and B are rounded): C = 0.5·A·B − 2·C.
    Tensor a = test::randn({4, 9}, false, 51), b = test::randn({9, 6}, false, 52), c = test::randn({4, 6}, false, 53);
    Tensor want = c.clone();
    Tensor ra = rounded(a), rb = rounded(b);
    engine::cpu::gemm(false, false, 4, 6, 9, 0.5f, ra.data_f32(), rb.data_f32(), -2.f, want.data_f32());
    Tensor da = a.to(Device::CUDA), db = b.to(Device::CUDA), got = c.to(Device::CUDA);
    engine::cuda::gemm(false, false, 4, 6, 9, 0.5f, da.raw_f32(), db.raw_f32(), -2.f, got.raw_f32());
    test::require_close("alpha, beta", want, got, {1e-4f, 1e-4f});
    // K = 0: C = beta·C, nothing converted.
    Tensor z = Tensor::zeros({3, 0}, engine::DType::F32, Device::CUDA), zb = Tensor::zeros({0, 4}, engine::DType::F32, Device::CUDA);
    Tensor c2 = test::randn({3, 4}, false, 54), got2 = c2.to(Device::CUDA);
    engine::cuda::gemm(false, false, 3, 4, 0, 1.f, z.raw_f32(), zb.raw_f32(), 2.f, got2.raw_f32());
    std::vector<float> w2 = c2.to_vector(), g2 = got2.to_vector();
    for (size_t i = 0; i < w2.size(); i++) CHECK(g2[i] == 2.f * w2[i]);
    engine::cuda::gemm(false, false, 0, 4, 3, 1.f, nullptr, nullptr, 0.f, nullptr);
    engine::cuda::gemm_batched(false, false, 0, 3, 4, 5, nullptr, 0, nullptr, 0, nullptr, 0);
    // A negative size converts nothing and reaches cuBLAS, which refuses it.
    Tensor buf = Tensor::zeros({16}, engine::DType::F32, Device::CUDA);
    float* p = buf.raw_f32();
    REQUIRE_THROWS_WITH(engine::cuda::gemm(false, true, -1, 4, 4, 1.f, p, p, 0.f, p),
                        Contains("cublasGemmEx") && Contains("M=-1") && Contains("CUBLAS_STATUS_INVALID_VALUE"));
    REQUIRE_THROWS_WITH(engine::cuda::gemm_batched(true, false, 2, 4, 4, -3, p, 0, p, 0, p, 0),
                        Contains("cublasGemmStridedBatchedEx") && Contains("K=-3") && Contains("CUBLAS_STATUS_INVALID_VALUE"));
}

// ---------------------------------------------------------------------------------------------
// One training step per model family, bf16 against fp32, on the device, same weights, same batch.
//
// Bounds. bf16 rounds each GEMM input by up to 2^-8 ≈ 4e-3 relative (half an ulp of 8 significant
// bits; rms over a binade ≈ 1.6e-3). A GEMM output's relative error is about that rms times √2
// (two rounded inputs, independent errors averaging over K), ~2e-3, and errors from successive
// GEMMs add up roughly in quadrature along the forward pass (these models chain 2-6 GEMMs) and
// again in the backward pass. So:
//   - the loss moves by ~1e-3 relative or less: bound 1e-2 relative;
//   - the SGD update is −lr·gradient, and a gradient passes through the forward GEMMs and the
//     backward ones (twice as many), so its relative error (‖Δ_bf16 − Δ_fp32‖ / ‖Δ_fp32‖ over
//     all parameters) is ~1e-2 or less: bound 5e-2. Per tensor the same bound applies to tensors
//     whose update is at least 1 % of the whole update's norm (below that a tensor's gradient is a
//     small difference of larger terms, the attention key bias's is pure rounding noise; their
//     absolute error is still covered by the whole-model bound).
// Measured in the emulator: loss within 3e-4 relative, update within 6e-3, for every family.
// Both paths of attention are run for the attention models: the fused kernel (fp32 inside, so only
// the projections are bf16) and the unfused one (the two batched GEMMs of attention in bf16 too).
namespace {

struct Family {
    std::string name;
    std::function<std::shared_ptr<nn::Module>()> build;
    std::function<Tensor(nn::Module&, const Tensor& x, const Tensor& y)> loss;
    Tensor x, y;  // CPU inputs and targets
    bool attention = false;
};

std::vector<Family> families() {
    std::vector<Family> out;
    engine::Generator g(6);
    auto ids = [&](engine::Shape s, int32_t vocab) {
        Tensor t = Tensor::empty(s, engine::DType::I32);
        g.randint(t.data_i32(), t.numel(), 0, vocab);
        return t;
    };
    out.push_back({"ViT",
                   [] {
                       nn::ViTConfig c;
                       c.image_size = 8;
                       c.patch = 2;
                       c.dim = 32;
                       c.depth = 2;
                       c.heads = 1;  // head dim 32: the fused kernel has one
                       return std::make_shared<nn::ViT>(c);
                   },
                   [](nn::Module& m, const Tensor& x, const Tensor& y) {
                       return engine::cross_entropy(static_cast<nn::ViT&>(m).forward(x), y);
                   },
                   test::randn({4, 3, 8, 8}, false, 61), ids({4}, 10), true});
    out.push_back({"TransformerLM",
                   [] {
                       nn::LMConfig c;
                       c.vocab = 23;
                       c.dim = 32;
                       c.depth = 2;
                       c.heads = 1;  // head dim 32: the fused kernel has one
                       c.max_len = 16;
                       return std::make_shared<nn::TransformerLM>(c);
                   },
                   [](nn::Module& m, const Tensor& x, const Tensor& y) {
                       return engine::cross_entropy(static_cast<nn::TransformerLM&>(m).forward(x), y);
                   },
                   ids({3, 12}, 23), ids({3, 12}, 23), true});
    out.push_back({"GAU LM",
                   [] {
                       nn::GAUConfig c;
                       c.vocab = 23;
                       c.dim = 32;
                       c.depth = 2;
                       c.expansion = 64;
                       c.s = 16;
                       return std::make_shared<nn::GAULM>(c);
                   },
                   [](nn::Module& m, const Tensor& x, const Tensor& y) {
                       return engine::cross_entropy(static_cast<nn::GAULM&>(m).forward(x), y);
                   },
                   ids({3, 12}, 23), ids({3, 12}, 23)});
    out.push_back({"LSTM LM", [] { return std::make_shared<nn::LSTMLM>(nn::LSTMConfig{23, 32, 2, 0.f, false}); },
                   [](nn::Module& m, const Tensor& x, const Tensor& y) {
                       std::vector<nn::LSTMState> state;
                       return engine::cross_entropy(static_cast<nn::LSTMLM&>(m).forward(x, state), y);
                   },
                   ids({3, 8}, 23), ids({3, 8}, 23)});
    out.push_back({"ConvMixer",
                   [] {
                       nn::ConvMixerConfig c;
                       c.dim = 16;
                       c.depth = 2;
                       c.kernel = 3;
                       c.patch = 2;
                       return std::make_shared<nn::ConvMixer>(c);
                   },
                   [](nn::Module& m, const Tensor& x, const Tensor& y) {
                       return engine::cross_entropy(static_cast<nn::ConvMixer&>(m).forward(x), y);
                   },
                   test::randn({4, 3, 8, 8}, false, 62), ids({4}, 10)});
    return out;
}

struct StepResult {
    float loss;
    std::vector<std::vector<float>> update;  // per parameter: after − before
    std::vector<std::string> names;
};

// A fresh model from seed 42 on the device, one forward/backward at precision p, one SGD step.
StepResult one_step(const Family& f, GemmPrecision p) {
    engine::manual_seed(42);
    auto m = f.build();
    m->to(Device::CUDA);
    engine::cuda::set_gemm_precision(p);
    StepResult r;
    std::vector<std::vector<float>> before;
    for (auto& np : m->named_parameters()) {
        before.push_back(np.tensor->to_vector());
        r.names.push_back(np.name);
    }
    nn::SGD opt(nn::param_groups(*m, 0.f), 0.1f);
    Tensor loss = f.loss(*m, f.x.to(Device::CUDA), f.y.to(Device::CUDA));
    r.loss = loss.item();
    loss.backward();
    opt.step();
    auto after = m->named_parameters();
    for (size_t i = 0; i < after.size(); i++) {
        std::vector<float> a = after[i].tensor->to_vector();
        for (size_t j = 0; j < a.size(); j++) a[j] -= before[i][j];
        r.update.push_back(std::move(a));
    }
    engine::cuda::set_gemm_precision(GemmPrecision::fp32);
    return r;
}

double norm2(const std::vector<float>& v) {
    double s = 0;
    for (float x : v) s += (double)x * x;
    return s;
}

}  // namespace

TEST_CASE("cuda bf16: one training step of each model family within bf16 rounding of fp32", "[cuda]") {
    test::PrecisionScope precision;  // restores both when the test ends
    test::FusedAttentionScope fused_switch;
    const double kLossRel = 1e-2, kUpdateRel = 5e-2;
    for (const Family& f : families())
        for (bool fused : {true, false}) {
            if (!fused && !f.attention) continue;
            std::string name = f.name + (f.attention ? (fused ? " (fused attention)" : " (unfused attention)") : "");
            INFO("model " << name);
            engine::cuda::set_fused_attention(fused);
            StepResult ref = one_step(f, GemmPrecision::fp32), bf = one_step(f, GemmPrecision::bf16);
            double loss_rel = std::fabs((double)bf.loss - ref.loss) / std::fabs(ref.loss);
            double diff_all = 0, ref_all = 0;
            for (size_t i = 0; i < ref.update.size(); i++) {
                std::vector<float> d = bf.update[i];
                for (size_t j = 0; j < d.size(); j++) d[j] -= ref.update[i][j];
                diff_all += norm2(d);
                ref_all += norm2(ref.update[i]);
            }
            double update_rel = std::sqrt(diff_all / ref_all);
            INFO(name << ": loss fp32 " << ref.loss << ", bf16 " << bf.loss << " (relative " << loss_rel
                      << "); update relative error " << update_rel);
            CHECK(loss_rel < kLossRel);
            CHECK(bf.loss != ref.loss);  // bf16 really changed the arithmetic
            CHECK(update_rel < kUpdateRel);
            CHECK(update_rel > 0);
            for (size_t i = 0; i < ref.update.size(); i++) {
                double r = norm2(ref.update[i]);
                if (r < 1e-4 * ref_all) continue;  // under 1 % of the whole update's norm
                std::vector<float> d = bf.update[i];
                for (size_t j = 0; j < d.size(); j++) d[j] -= ref.update[i][j];
                INFO("parameter " << ref.names[i]);
                CHECK(std::sqrt(norm2(d) / r) < kUpdateRel);
            }
        }
}
