// tests/cuda/test_cuda_nn.cpp: the fused neural-network ops on the device against the CPU
// (check_parity), forward and backward: softmax/log_softmax (warp- and block-per-row lengths),
// layer_norm (with and without weight/bias, n = 1, several dweight chunks), dropout (the device
// draws the CPU's mask bit for bit from the same seed, and the generator's offset moves the same),
// cross_entropy (smoothing, ignore_index, all rows ignored, C = 1025, int32 targets on the device,
// their range check), mse, attention (causal or not, T != S, D 8 and 64, dropout, queries that see
// no key), rope (start_pos); mixed devices refused; reductions bitwise repeatable.
//
// Tolerances (the differences are summation orders, float trees on the device against the CPU's
// serial loops, and on a GPU expf/logf within 2 ulp and cuBLAS's GEMM order):
//   softmax, log_softmax, rope, mse, dropout-free pointwise forward: atol 1e-6..1e-5, rtol 1e-5;
//   backwards of the row ops: atol 1e-5, rtol 1e-4;
//   layer_norm: forward atol 1e-5 rtol 1e-4, backward atol 1e-4 rtol 1e-3 (rstd amplifies the
//     summation-order differences of the row means; dweight sums over rows);
//   cross_entropy: loss atol 1e-5 rtol 1e-5, dlogits atol 1e-6 rtol 1e-4;
//   attention: forward atol 1e-5 rtol 1e-4, backward atol 1e-4 rtol 1e-3 (three GEMMs deep);
//   dropout: exact (atol 0, rtol 0): the mask is the same bits and y = x·mask is one multiply.
#include <catch2/catch.hpp>

#include <cstring>
#include "engine/cuda/flash_attention.h"
#include "engine/cuda/nn.h"
#ifdef ENGINE_CUDA_EMU
#include <cublas_v2.h>  // the stand-in's census of GEMM operand alignment
#endif
#include "engine/cuda/philox.h"
#include "engine/cuda/runtime.h"
#include "tests/cuda/parity.h"
#include "tests/helpers.h"

using engine::Device;
using engine::DType;
using engine::Shape;
using engine::Tensor;
using test::check_parity;
using test::randn;

namespace {

const test::Tol kExact{0.f, 0.f};
const test::Tol kSoftmaxFwd{1e-6f, 1e-5f}, kLogSoftmaxFwd{1e-5f, 1e-5f}, kRowBwd{1e-5f, 1e-4f};
const test::Tol kLnFwd{1e-5f, 1e-4f}, kLnBwd{1e-4f, 1e-3f};
const test::Tol kCeFwd{1e-5f, 1e-5f}, kCeBwd{1e-6f, 1e-4f};
const test::Tol kMse{1e-6f, 1e-5f};
const test::Tol kAttnFwd{1e-5f, 1e-4f}, kAttnBwd{1e-4f, 1e-3f};
const test::Tol kRope{1e-6f, 1e-5f};

// randn times `scale`, as a leaf (logits with a wider range than N(0, 1)).
Tensor scaled_randn(const Shape& s, float scale, uint64_t seed = 7, bool grad = true) {
    Tensor t = engine::mul(randn(s, false, seed), scale).detach();
    if (grad) t.requires_grad_(true);
    return t;
}

Tensor ints(const std::vector<int32_t>& v, const Shape& s) { return Tensor::from_vector(v, s); }

// Targets [rows] in [0, C), with every `ignore_every`-th row (if > 0) set to ignore_index.
Tensor targets_for(int64_t rows, int64_t C, int ignore_every, int32_t ignore_index = -100) {
    std::vector<int32_t> t(rows);
    for (int64_t r = 0; r < rows; r++) {
        t[r] = (int32_t)((r * 7 + 3) % C);
        if (ignore_every > 0 && r % ignore_every == 1) t[r] = ignore_index;
    }
    return ints(t, {rows});
}

std::vector<uint32_t> bits_of(const Tensor& t) {
    std::vector<float> v = t.to_vector();
    std::vector<uint32_t> b(v.size());
    std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
    return b;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// softmax / log_softmax

TEST_CASE("cuda softmax and log_softmax: rows of 1, 7, 33, 1025 (warp and block per row)", "[cuda]") {
    for (Shape s : {Shape{5, 1}, Shape{3, 7}, Shape{4, 33}, Shape{3, 1025}, Shape{2, 3, 33}, Shape{1, 2049}}) {
        INFO("shape " << s.str());
        check_parity("softmax", [](auto& in) { return engine::softmax(in[0]); }, {scaled_randn(s, 4.f)}, kSoftmaxFwd,
                     kRowBwd);
        check_parity("log_softmax", [](auto& in) { return engine::log_softmax(in[0]); }, {scaled_randn(s, 4.f)},
                     kLogSoftmaxFwd, kRowBwd);
    }
}

TEST_CASE("cuda softmax: large logits do not overflow (row max subtracted)", "[cuda]") {
    Tensor x = engine::add(scaled_randn({3, 40}, 1.f, 3, false), 1000.f).detach().requires_grad_(true);
    check_parity("softmax large", [](auto& in) { return engine::softmax(in[0]); }, {x}, kSoftmaxFwd, kRowBwd);
    Tensor y = engine::add(scaled_randn({3, 40}, 1.f, 4, false), -1000.f).detach().requires_grad_(true);
    check_parity("log_softmax large", [](auto& in) { return engine::log_softmax(in[0]); }, {y}, {1e-4f, 1e-6f},
                 kRowBwd);
}

// ---------------------------------------------------------------------------------------------
// layer_norm

TEST_CASE("cuda layer_norm: with and without weight/bias, n = 1, 7, 33, 1025", "[cuda]") {
    // [3000, 12]: 47 dweight chunks, more than a warp's 32 lanes take in one pass. n <= 256 takes
    // the one-pass backward (dx with the dweight/dbias chunk sums): 192 (ViT-Tiny's width) at 700
    // rows, 11 chunks; 512 (the LM's) and 1025 the two-kernel one.
    for (Shape s : {Shape{5, 1}, Shape{4, 7}, Shape{3, 33}, Shape{3, 1025}, Shape{2, 3, 33}, Shape{130, 7}, Shape{3000, 12},
                    Shape{700, 192}, Shape{700, 512}, Shape{70, 100}, Shape{4, 600}}) {
        int64_t n = s[s.ndim - 1];
        for (int variant = 0; variant < 4; variant++) {
            bool with_w = variant & 1, with_b = variant & 2;
            INFO("shape " << s.str() << " weight " << with_w << " bias " << with_b);
            Tensor x = scaled_randn(s, 2.f, 5);
            Tensor w = with_w ? test::rand_uniform({n}, 0.5f, 1.5f) : Tensor();
            Tensor b = with_b ? randn({n}, true, 9) : Tensor();
            check_parity("layer_norm", [](auto& in) { return engine::layer_norm(in[0], in[1], in[2]); }, {x, w, b},
                         kLnFwd, kLnBwd);
        }
    }
}

TEST_CASE("cuda layer_norm: gradient for the parameters only, and for x only", "[cuda]") {
    Tensor x = scaled_randn({200, 33}, 1.f, 6, false);  // 200 rows: 4 chunks of the dweight sum
    Tensor w = test::rand_uniform({33}, 0.5f, 1.5f), b = randn({33}, true, 9);
    check_parity("layer_norm params only", [](auto& in) { return engine::layer_norm(in[0], in[1], in[2]); },
                 {x, w, b}, kLnFwd, kLnBwd);
    Tensor x2 = scaled_randn({6, 33}, 1.f, 6);
    Tensor w2 = test::rand_uniform({33}, 0.5f, 1.5f, false);
    check_parity("layer_norm x only", [](auto& in) { return engine::layer_norm(in[0], in[1], Tensor()); }, {x2, w2},
                 kLnFwd, kLnBwd);
}

// The one-pass backward (n <= 256 with parameter gradients: at 192 it loads the old dx with x and
// dy, at 250 after the sums), the dx kernel alone (no parameter gradients) and the two-kernel path
// (n = 512), each adding dx into the residual's gradient.
TEST_CASE("cuda layer_norm: dx added into the gradient a residual gave its input, as adding afterwards", "[cuda]") {
    for (int64_t n : {192, 250, 512})
        for (bool params : {true, false}) {
            INFO("n " << n << " parameter gradients " << params);
            Tensor x = test::to_cuda(scaled_randn({70, n}, 2.f, 20)), g = test::to_cuda(randn({70, n}, false, 21));
            Tensor w = test::to_cuda(test::rand_uniform({n}, 0.5f, 1.5f)), b = test::to_cuda(randn({n}, true, 22));
            if (!params) w = b = Tensor();
            CHECK(test::residual_layer_norm_grad_diff(x, w, b, g) < 1e-4f);  // dweight sums 70 rows
        }
}

TEST_CASE("cuda layer_norm: backward bitwise repeatable", "[cuda]") {
    Tensor x = test::to_cuda(scaled_randn({150, 40}, 1.f, 8));
    Tensor w = test::to_cuda(test::rand_uniform({40}, 0.5f, 1.5f));
    std::vector<uint32_t> first_dw, first_dx;
    for (int run = 0; run < 2; run++) {
        x.zero_grad();
        w.zero_grad();
        engine::sum(engine::mul(engine::layer_norm(x, w, Tensor()), engine::layer_norm(x, w, Tensor()))).backward();
        if (run == 0) {
            first_dw = bits_of(w.grad());
            first_dx = bits_of(x.grad());
        } else {
            REQUIRE(bits_of(w.grad()) == first_dw);
            REQUIRE(bits_of(x.grad()) == first_dx);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// dropout and the Philox stream

TEST_CASE("cuda philox: the header's Philox4x32-10 is engine/rng.cpp's", "[cuda]") {
    for (uint64_t seed : {uint64_t(0), uint64_t(1), uint64_t(123456789), uint64_t(0xDEADBEEFCAFEF00Dull)})
        for (uint64_t counter :
             {uint64_t(0), uint64_t(1), uint64_t(77), uint64_t(1) << 32, uint64_t(0xFFFFFFFFFFull)}) {
            uint32_t want[4], got[4];
            engine::Philox4x32::block(seed, counter, want);
            engine::cuda::philox4x32_10(seed, counter, got);
            for (int j = 0; j < 4; j++) REQUIRE(got[j] == want[j]);
        }
}

TEST_CASE("cuda uniform_fill: the bits of Generator::uniform at any offset and seed", "[cuda]") {
    for (uint64_t seed : {uint64_t(3), uint64_t(0x123456789ABCull)})
        for (int64_t n : {1, 3, 4, 7, 33, 1025}) {
            INFO("seed " << seed << " n " << n);
            engine::Generator cpu_gen(seed), cuda_gen(seed);
            cpu_gen.advance(5);
            cuda_gen.advance(5);
            Tensor want = Tensor::empty({n});
            cpu_gen.uniform(want.data_f32(), n, 0.f, 1.f);
            Tensor got = Tensor::empty({n}, DType::F32, Device::CUDA);
            uint64_t base = cuda_gen.advance((uint64_t)(n + 3) / 4);
            engine::cuda::uniform_fill(got.raw_f32(), n, cuda_gen.seed(), base);
            REQUIRE(cuda_gen.offset() == cpu_gen.offset());
            REQUIRE(bits_of(got) == bits_of(want));
        }
}

TEST_CASE("cuda dropout: same seed -> the CPU's mask and output, and the same generator offset", "[cuda]") {
    for (float p : {0.f, 0.3f, 1.f})
        for (Shape s : {Shape{1}, Shape{7}, Shape{3, 33}, Shape{1025}}) {
            INFO("p " << p << " shape " << s.str());
            Tensor x = randn(s);
            uint64_t offsets[2];
            int side = 0;
            // Two dropouts in a row: the second starts at a nonzero offset.
            check_parity("dropout", [p, &offsets, &side](auto& in) {
                engine::manual_seed(1234);
                Tensor y = engine::dropout(engine::dropout(in[0], p, true), p, true);
                offsets[side++] = engine::global_generator().offset();
                return y;
            }, {x}, kExact, kExact);
            REQUIRE(side == 2);
            REQUIRE(offsets[0] == offsets[1]);
            REQUIRE(offsets[0] == (p == 0.f ? 0u : 2 * (uint64_t)((s.numel() + 3) / 4)));
        }
}

TEST_CASE("cuda dropout: the kept fraction and scale, eval mode is the identity", "[cuda]") {
    engine::manual_seed(77);
    Tensor ones = Tensor::ones({4096}, DType::F32, Device::CUDA);
    std::vector<float> y = engine::dropout(ones, 0.3f, true).to_vector();
    int64_t kept = 0;
    for (float v : y) {
        REQUIRE((v == 0.f || v == 1.f / (1.f - 0.3f)));
        kept += v != 0.f;
    }
    REQUIRE(std::abs((double)kept / 4096 - 0.7) < 0.03);
    Tensor x = test::to_cuda(randn({3, 33}));
    Tensor e = engine::dropout(x, 0.5f, false);
    REQUIRE(e.same_storage(x));
    check_parity("dropout eval", [](auto& in) { return engine::mul(engine::dropout(in[0], 0.5f, false), 1.f); },
                 {randn({3, 33})}, kExact, kExact);
}

// ---------------------------------------------------------------------------------------------
// cross_entropy

// C a multiple of 4 (36; 2048, a block a row) takes the float4 kernels, the others one float at a time.
TEST_CASE("cuda cross_entropy: smoothing 0 and 0.1, ignored rows, C = 1, 7, 33, 36, 1025, 2048", "[cuda]") {
    for (int64_t C : {1, 7, 33, 36, 1025, 2048})
        for (float smoothing : {0.f, 0.1f})
            for (int ignore_every : {0, 3}) {
                int64_t rows = 7;
                INFO("C " << C << " smoothing " << smoothing << " ignore every " << ignore_every);
                Tensor logits = scaled_randn({rows, C}, 3.f, 12);
                Tensor targets = targets_for(rows, C, ignore_every);
                check_parity("cross_entropy", [smoothing](auto& in) {
                    return engine::cross_entropy(in[0], in[1], -100, smoothing);
                }, {logits, targets}, kCeFwd, kCeBwd);
            }
}

TEST_CASE("cuda cross_entropy: all rows ignored, [B, T, C] logits, a custom ignore_index", "[cuda]") {
    Tensor logits = scaled_randn({4, 9}, 2.f, 13);
    Tensor none = ints({-100, -100, -100, -100}, {4});
    check_parity("cross_entropy all ignored", [](auto& in) { return engine::cross_entropy(in[0], in[1], -100, 0.1f); },
                 {logits, none}, kExact, kExact);
    Tensor cuda_loss = engine::cross_entropy(test::to_cuda(logits), none.to(Device::CUDA));
    REQUIRE(cuda_loss.item() == 0.f);

    Tensor l3 = scaled_randn({2, 3, 33}, 2.f, 14);
    Tensor t3 = ints({0, 5, 32, 1, 7, 0}, {2, 3});
    check_parity("cross_entropy 3-d", [](auto& in) { return engine::cross_entropy(in[0], in[1], 7, 0.1f); }, {l3, t3},
                 kCeFwd, kCeBwd);
}

TEST_CASE("cuda cross_entropy: many rows (block-per-row sum of the loss), repeatable", "[cuda]") {
    Tensor logits = scaled_randn({300, 5}, 2.f, 15);
    Tensor targets = targets_for(300, 5, 4);
    check_parity("cross_entropy 300 rows", [](auto& in) { return engine::cross_entropy(in[0], in[1]); },
                 {logits, targets}, kCeFwd, kCeBwd);
    Tensor lc = test::to_cuda(logits), tc = targets.to(Device::CUDA);
    float a = engine::cross_entropy(lc, tc, -100, 0.1f).item(), b = engine::cross_entropy(lc, tc, -100, 0.1f).item();
    REQUIRE(std::memcmp(&a, &b, sizeof a) == 0);
}

// Logits only cross-entropy holds take their own gradient on the device too (the float4 kernel in
// place): one [rows, C] tensor less at the backward's peak, the same gradients, and a caller's
// logits left as they were.
TEST_CASE("cuda cross_entropy: dlogits over logits nothing else holds, never over the caller's", "[cuda]") {
    const int64_t rows = 64, C = 300;
    Tensor x = test::to_cuda(randn({rows, 16}, true, 16)), w = test::to_cuda(randn({C, 16}, true, 17));
    Tensor t = targets_for(rows, C, 18).to(Device::CUDA);
    auto run = [&](bool hold, std::vector<float>& held) {
        x.zero_grad();
        w.zero_grad();
        Tensor kept;
        size_t before = engine::cuda::memory_in_use();
        engine::cuda::reset_peak_memory();
        {
            Tensor logits = engine::linear(x, w);
            if (hold) kept = logits;
            Tensor loss = engine::cross_entropy(logits, t);
            logits = Tensor();
            loss.backward();
        }
        if (hold) held = kept.to_vector();
        size_t peak = engine::cuda::peak_memory() - before;
        return std::make_tuple(x.grad().to_vector(), w.grad().to_vector(), peak);
    };
    std::vector<float> held, unused;
    auto [dx_held, dw_held, peak_held] = run(true, held);
    auto [dx_free, dw_free, peak_free] = run(false, unused);
    CHECK(dx_held == dx_free);
    CHECK(dw_held == dw_free);
    CHECK(held == engine::linear(x, w).detach().to_vector());
    CHECK(peak_held - peak_free == (size_t)(rows * C) * sizeof(float));
}

TEST_CASE("cuda cross_entropy: device targets out of range give the CPU's error at the next wait", "[cuda]") {
    Tensor logits_cpu = randn({3, 5}, false), logits = logits_cpu.to(Device::CUDA);
    for (int32_t bad : {5, -1}) {
        Tensor targets = ints({0, bad, 1}, {3});
        std::string cpu;
        try {
            engine::cross_entropy(logits_cpu, targets);
        } catch (const std::exception& e) {
            cpu = e.what();
        }
        REQUIRE(cpu.find("cross_entropy: target " + std::to_string(bad) + " at position 1 is out of range [0, 5) "
                         "(ignore_index -100)") != std::string::npos);
        Tensor loss;
        REQUIRE_NOTHROW(loss = engine::cross_entropy(logits, targets.to(Device::CUDA)));  // no wait here
        std::string dev;
        try {
            loss.item();
        } catch (const std::exception& e) {
            dev = e.what();
        }
        INFO(dev);
        CHECK(dev.rfind(cpu + " (found on the device", 0) == 0);
    }
    // An ignored target is no error, and the record is clear after a report: the CPU's loss.
    Tensor targets = ints({0, -1, 1}, {3});
    CHECK(engine::cross_entropy(logits, targets.to(Device::CUDA), -1).item() ==
          Approx(engine::cross_entropy(logits_cpu, targets, -1).item()).epsilon(1e-6));
    // linear_cross_entropy checks them the same way.
    Tensor x = randn({3, 4}, false), w = randn({5, 4}, false, 9);
    Tensor lce = engine::linear_cross_entropy(x.to(Device::CUDA), w.to(Device::CUDA), Tensor(),
                                              ints({0, 1, 7}, {3}).to(Device::CUDA));
    CHECK_THROWS_WITH(lce.item(), Catch::Contains("cross_entropy: target 7 at position 2 is out of range [0, 5)"));
}

// ---------------------------------------------------------------------------------------------
// mse

TEST_CASE("cuda mse_loss: forward and both gradients, several chunks", "[cuda]") {
    for (Shape s : {Shape{1}, Shape{7, 33}, Shape{1025}, Shape{3, 9000}}) {
        INFO("shape " << s.str());
        check_parity("mse_loss", [](auto& in) { return engine::mse_loss(in[0], in[1]); },
                     {randn(s), randn(s, true, 21)}, kMse, kMse);
    }
    check_parity("mse_loss pred only", [](auto& in) { return engine::mse_loss(in[0], in[1]); },
                 {randn({7, 5}), randn({7, 5}, false, 21)}, kMse, kMse);
}

// ---------------------------------------------------------------------------------------------
// attention

// S not a multiple of 4 (P's rows are padded on the device: engine/cuda/nn.h) in most cases, 257
// as ViT-Tiny's patch-2 tokens. The softmax kernels: the row in registers up to 512 keys, a warp a
// row at 600, a block a row at 1025.
TEST_CASE("cuda attention: causal and not, T != S, D 8 and 64", "[cuda]") {
    test::PrecisionScope fp32(engine::cuda::GemmPrecision::fp32);  // the GEMMs in full fp32
    struct Case { int64_t B, H, T, S, D; };
    for (Case c : {Case{1, 2, 5, 7, 8}, Case{2, 1, 7, 5, 8}, Case{1, 2, 6, 6, 64}, Case{1, 2, 5, 9, 64},
                   Case{1, 1, 1, 1, 8}, Case{1, 1, 3, 600, 8}, Case{1, 1, 3, 1025, 8}, Case{1, 2, 257, 257, 64}})
        for (bool causal : {false, true}) {
            INFO("B " << c.B << " H " << c.H << " T " << c.T << " S " << c.S << " D " << c.D << " causal " << causal);
            Tensor q = randn({c.B, c.H, c.T, c.D}, true, 31), k = randn({c.B, c.H, c.S, c.D}, true, 32),
                   v = randn({c.B, c.H, c.S, c.D}, true, 33);
            check_parity("attention", [causal](auto& in) { return engine::attention(in[0], in[1], in[2], causal); },
                         {q, k, v}, kAttnFwd, kAttnBwd);
        }
}

// attention_tokens: the heads addressed in place in [B, T, H·D] (one batched GEMM per head on the
// device), against the CPU and against the permutes around attention on the device; 257 tokens
// (ViT-Tiny's, P's rows padded), T != S, dropout from one seed; with the fused path on it is the
// permutes around the flash kernels.
TEST_CASE("cuda attention_tokens: against the CPU and the permutes around attention", "[cuda]") {
    test::PrecisionScope fp32(engine::cuda::GemmPrecision::fp32);  // the GEMMs in full fp32
    struct Case { int64_t B, T, S, H, D; bool causal; float dropout; };
    for (Case c : {Case{2, 5, 7, 3, 8, false, 0.f}, Case{2, 7, 5, 2, 8, true, 0.f}, Case{1, 257, 257, 3, 64, false, 0.f},
                   Case{2, 6, 6, 2, 64, true, 0.f}, Case{2, 5, 9, 3, 8, true, 0.25f}}) {
        INFO("B " << c.B << " T " << c.T << " S " << c.S << " H " << c.H << " D " << c.D << " causal " << c.causal
                  << " dropout " << c.dropout);
        Tensor q = randn({c.B, c.T, c.H * c.D}, true, 61), k = randn({c.B, c.S, c.H * c.D}, true, 62),
               v = randn({c.B, c.S, c.H * c.D}, true, 63);
        auto tokens = [c](auto& in) {
            engine::manual_seed(7);
            return engine::attention_tokens(in[0], in[1], in[2], c.H, c.causal, c.dropout, true);
        };
        check_parity("attention_tokens", tokens, {q, k, v}, kAttnFwd, kAttnBwd);
        auto permutes = [c](auto& in) {
            engine::manual_seed(7);
            return test::attention_by_permutes(in[0], in[1], in[2], c.H, c.causal, c.dropout, true);
        };
        std::vector<Tensor> a{test::to_cuda(q), test::to_cuda(k), test::to_cuda(v)},
            b{test::to_cuda(q), test::to_cuda(k), test::to_cuda(v)};
        Tensor g = test::to_cuda(randn({c.B, c.T, c.H * c.D}, false, 64));
        Tensor got = tokens(a), want = permutes(b);
        test::require_close("forward", want, got, kAttnFwd);
        got.backward(g);
        want.backward(g);
        for (int i = 0; i < 3; i++) test::require_close("gradient " + std::to_string(i), b[i].grad(), a[i].grad(), kAttnBwd);
    }
}

TEST_CASE("cuda attention_tokens: with the fused path on, the flash kernels between permutes", "[cuda][flash]") {
    test::PrecisionScope fp32(engine::cuda::GemmPrecision::fp32);
    Tensor q = test::to_cuda(randn({2, 9, 128}, true, 65)), k = test::to_cuda(randn({2, 9, 128}, true, 66)),
           v = test::to_cuda(randn({2, 9, 128}, true, 67));
    // The flash forward's call count: the unfused run leaves it, each fused run adds one.
    auto flash_calls = [] { return engine::cuda::flash_attention_calls().forward; };
    const uint64_t before = flash_calls();
    Tensor unfused;
    {
        test::FusedAttentionScope off(false);
        unfused = engine::attention_tokens(q, k, v, 4, true);
    }
    REQUIRE(flash_calls() == before);
    test::FusedAttentionScope on(true);
    Tensor fused = engine::attention_tokens(q, k, v, 4, true);
    REQUIRE(flash_calls() == before + 1);
    test::require_close("fused against unfused", unfused, fused, kAttnFwd);
    CHECK(test::max_abs_diff(fused, test::attention_by_permutes(q, k, v, 4, true)) == 0.f);  // the same kernels
    REQUIRE(flash_calls() == before + 2);
}

// attention_qkv: q, k and v as column blocks of one [B, T, 3·H·D] projection (rows 3·H·D apart),
// against the CPU and against attention_tokens on the blocks split off, on the device.
TEST_CASE("cuda attention_qkv: against the CPU and attention_tokens on the column blocks", "[cuda]") {
    test::PrecisionScope fp32(engine::cuda::GemmPrecision::fp32);  // the GEMMs in full fp32
    struct Case { int64_t B, T, H, D; bool causal; float dropout; };
    for (Case c : {Case{2, 5, 3, 8, false, 0.f}, Case{1, 257, 3, 64, false, 0.f}, Case{2, 6, 2, 64, true, 0.f},
                   Case{2, 5, 3, 8, true, 0.25f}}) {
        INFO("B " << c.B << " T " << c.T << " H " << c.H << " D " << c.D << " causal " << c.causal << " dropout "
                  << c.dropout);
        Tensor qkv = randn({c.B, c.T, 3 * c.H * c.D}, true, 71);
        auto stacked = [c](auto& in) {
            engine::manual_seed(8);
            return engine::attention_qkv(in[0], c.H, c.causal, c.dropout, true);
        };
        check_parity("attention_qkv", stacked, {qkv}, kAttnFwd, kAttnBwd);
        std::vector<Tensor> a{test::to_cuda(qkv)}, b{test::to_cuda(qkv)};
        Tensor got = stacked(a);
        engine::manual_seed(8);
        std::vector<Tensor> parts = test::split_qkv(b[0]);
        Tensor want = engine::attention_tokens(parts[0], parts[1], parts[2], c.H, c.causal, c.dropout, true);
        test::require_close("forward", want, got, kAttnFwd);
        Tensor g = test::to_cuda(randn({c.B, c.T, c.H * c.D}, false, 72));
        got.backward(g);
        want.backward(g);
        test::require_close("gradient", b[0].grad(), a[0].grad(), kAttnBwd);
    }
}

TEST_CASE("cuda attention_qkv: with the fused path on, the flash kernels between permutes", "[cuda][flash]") {
    test::PrecisionScope fp32(engine::cuda::GemmPrecision::fp32);
    Tensor qkv = test::to_cuda(randn({2, 9, 3 * 128}, true, 73));
    auto flash_calls = [] { return engine::cuda::flash_attention_calls().forward; };
    const uint64_t before = flash_calls();
    Tensor unfused;
    {
        test::FusedAttentionScope off(false);
        unfused = engine::attention_qkv(qkv, 4, true);
    }
    REQUIRE(flash_calls() == before);  // the reference is not fused
    test::FusedAttentionScope on(true);
    test::require_close("fused against unfused", unfused, engine::attention_qkv(qkv, 4, true), kAttnFwd);
    REQUIRE(flash_calls() == before + 1);
}

// Edge keys (engine/cuda/nn.cu): where S keys are not a whole number of 16-byte vectors (4 fp32
// keys, 8 bf16 ones) the GEMMs take the first S rounded down to that and the softmax kernels the
// rest. Against the CPU and against the GEMMs over every key (the switch off), in each layout, with
// dropout, with T != S (1 to 3 edge keys in fp32; 4 and 7 with bf16 GEMMs: one to three register
// slots a lane), causal and not, head dims 32 to 128, and with q, k or v not needing a gradient (dq
// or dk, dv null). bf16 against the CPU's fp32 within bf16's rounding (the GEMMs' keys rounded, the
// edge's not).
TEST_CASE("cuda attention: edge keys against the CPU and against the GEMMs over every key", "[cuda]") {
    using engine::cuda::GemmPrecision;
    test::PrecisionScope precision;
    test::Bf16FastGemmScope packed(false);
    test::EdgeKeysScope on(true);
    struct Case { int64_t B, H, T, S, D; bool causal; float dropout; GemmPrecision p = GemmPrecision::fp32; };
    for (Case c : {Case{1, 2, 9, 9, 64, true, 0.f}, Case{2, 1, 6, 15, 32, false, 0.25f},
                   Case{1, 1, 13, 13, 128, true, 0.25f}, Case{1, 2, 20, 300, 64, false, 0.f, GemmPrecision::bf16},
                   Case{2, 1, 6, 15, 32, true, 0.25f, GemmPrecision::bf16}, Case{2, 2, 33, 37, 96, true, 0.f},
                   Case{1, 1, 257, 257, 64, false, 0.1f}}) {
        INFO("B " << c.B << " H " << c.H << " T " << c.T << " S " << c.S << " D " << c.D << " causal " << c.causal
                  << " dropout " << c.dropout << " precision " << (int)c.p);
        engine::cuda::set_gemm_precision(c.p);
        const bool bf16 = c.p == GemmPrecision::bf16;
        const test::Tol kAttnFwd = bf16 ? test::Tol{2e-2f, 2e-2f} : ::kAttnFwd;
        const test::Tol kAttnBwd = bf16 ? test::Tol{5e-2f, 5e-2f} : ::kAttnBwd;
        auto heads = [c](auto& in) {
            engine::manual_seed(3);
            return engine::attention(in[0], in[1], in[2], c.causal, c.dropout, true);
        };
        auto tokens = [c](auto& in) {
            engine::manual_seed(4);
            return engine::attention_tokens(in[0], in[1], in[2], c.H, c.causal, c.dropout, true);
        };
        const uint64_t calls = engine::cuda::attention_edge_key_calls();
        check_parity("attention edge keys", heads,
                     {randn({c.B, c.H, c.T, c.D}, true, 81), randn({c.B, c.H, c.S, c.D}, true, 82),
                      randn({c.B, c.H, c.S, c.D}, true, 83)}, kAttnFwd, kAttnBwd);
        check_parity("attention_tokens edge keys", tokens,
                     {randn({c.B, c.T, c.H * c.D}, true, 84), randn({c.B, c.S, c.H * c.D}, true, 85),
                      randn({c.B, c.S, c.H * c.D}, true, 86)}, kAttnFwd, kAttnBwd);
        if (c.T == c.S)
            check_parity("attention_qkv edge keys", [c](auto& in) {
                engine::manual_seed(5);
                return engine::attention_qkv(in[0], c.H, c.causal, c.dropout, true);
            }, {randn({c.B, c.T, 3 * c.H * c.D}, true, 87)}, kAttnFwd, kAttnBwd);
        REQUIRE(engine::cuda::attention_edge_key_calls() == calls + (c.T == c.S ? 3 : 2));
        // q, then k and v, without a gradient: the backward without dq, then without dk and dv
        check_parity("attention edge keys, no dq", heads,
                     {randn({c.B, c.H, c.T, c.D}, false, 81), randn({c.B, c.H, c.S, c.D}, true, 82),
                      randn({c.B, c.H, c.S, c.D}, true, 83)}, kAttnFwd, kAttnBwd);
        check_parity("attention edge keys, dq only", heads,
                     {randn({c.B, c.H, c.T, c.D}, true, 81), randn({c.B, c.H, c.S, c.D}, false, 82),
                      randn({c.B, c.H, c.S, c.D}, false, 83)}, kAttnFwd, kAttnBwd);
        check_parity("attention edge keys, dv only", heads,
                     {randn({c.B, c.H, c.T, c.D}, false, 81), randn({c.B, c.H, c.S, c.D}, false, 82),
                      randn({c.B, c.H, c.S, c.D}, true, 83)}, kAttnFwd, kAttnBwd);
        // the same on the device with the GEMMs over every key
        std::vector<Tensor> a{test::to_cuda(randn({c.B, c.T, c.H * c.D}, true, 84)),
                              test::to_cuda(randn({c.B, c.S, c.H * c.D}, true, 85)),
                              test::to_cuda(randn({c.B, c.S, c.H * c.D}, true, 86))};
        std::vector<Tensor> b{test::to_cuda(a[0]), test::to_cuda(a[1]), test::to_cuda(a[2])};
        Tensor g = test::to_cuda(randn({c.B, c.T, c.H * c.D}, false, 88));
        Tensor split = tokens(a), whole;
        {
            test::EdgeKeysScope off(false);
            whole = tokens(b);
            whole.backward(g);
        }
        split.backward(g);
        test::require_close("forward", whole, split, kAttnFwd);
        for (int i = 0; i < 3; i++)
            test::require_close("gradient " + std::to_string(i), b[i].grad(), a[i].grad(), kAttnBwd);
    }
}

#ifdef ENGINE_CUDA_EMU
// What the edge keys are for: with them, at S = 17 and 300 keys, every attention GEMM allows
// 16-byte vectors in the emulator's census of operand alignment (cublas_v2.h's
// emu::gemm_vector_widths: addresses, leading dimensions and the extents along them), which the H100
// profile tied to cuBLAS's fast kernels; without them the same GEMMs count narrower (so the census
// sees what the edge keys mend). In TF32 and bf16, per head and from address arrays, and autotuned
// (cuBLASLt). The edge is taken only where it is needed: 300 keys in TF32 are 75 whole vectors.
TEST_CASE("cuda attention: with edge keys every attention GEMM allows 16-byte vectors (emulator census)", "[cuda]") {
    using engine::cuda::GemmPrecision;
    test::PrecisionScope precision;
    test::PointerBatchScope pointers;
    test::GemmAutotuneScope tune;
    test::EdgeKeysScope edge;
    auto narrow = [] { return emu::gemm_vector_widths().narrower(); };
    struct Case { GemmPrecision p; bool pointers, tune; };
    for (Case c : {Case{GemmPrecision::tf32, false, false}, Case{GemmPrecision::bf16, false, false},
                   Case{GemmPrecision::tf32, true, false}, Case{GemmPrecision::bf16, true, false},
                   Case{GemmPrecision::tf32, false, true}})
        for (bool on : {true, false}) {
            INFO("precision " << (int)c.p << " pointers " << c.pointers << " autotune " << c.tune
                              << " edge keys " << on);
            engine::cuda::set_gemm_precision(c.p);
            engine::cuda::set_pointer_batch(c.pointers);
            engine::cuda::set_gemm_autotune(c.tune);
            engine::cuda::set_attention_edge_keys(on);
            const uint64_t narrow0 = narrow(), wide0 = emu::gemm_vector_widths().bytes16;
            const uint64_t calls = engine::cuda::attention_edge_key_calls();
            Tensor qkv = test::to_cuda(randn({2, 17, 3 * 2 * 32}, true, 91));
            Tensor out = engine::attention_qkv(qkv, 2, false);
            out.backward(test::to_cuda(randn(out.shape(), false, 92)));
            Tensor q = test::to_cuda(randn({1, 20, 64}, true, 93)), k = test::to_cuda(randn({1, 300, 64}, true, 94)),
                   v = test::to_cuda(randn({1, 300, 64}, true, 95));
            Tensor cross = engine::attention_tokens(q, k, v, 1, true);
            cross.backward(test::to_cuda(randn(cross.shape(), false, 96)));
            REQUIRE(emu::gemm_vector_widths().bytes16 > wide0);
            // 300 fp32 keys are 75 vectors: only bf16 copies (37.5) need the edge there
            const bool packed = c.p == GemmPrecision::bf16;
            if (on) {
                CHECK(narrow() == narrow0);
                CHECK(engine::cuda::attention_edge_key_calls() == calls + (packed ? 2 : 1));
            } else {
                // the six products at 17 keys; at 300, the four that read bf16 copies of P or dS
                CHECK(narrow() >= narrow0 + (packed ? 10 : 6));
            }
        }
}
#endif

// The attention GEMMs over every head in one call from address arrays (engine/cuda/matmul.h's
// pointer_batch_enabled) against a call per head: attention_qkv and attention_tokens (groups of
// heads), attention (head-major: one stride, no address arrays), in TF32 and bf16, with and
// without edge keys, dropout, causal.
TEST_CASE("cuda attention: every head in one GEMM call from address arrays against a call per head", "[cuda]") {
    test::PrecisionScope precision;
    struct Case { int64_t B, T, H, D; bool causal; float dropout; };
    using engine::cuda::GemmPrecision;
    for (GemmPrecision p : {GemmPrecision::tf32, GemmPrecision::bf16})
        for (Case c :
             {Case{2, 9, 3, 32, true, 0.f}, Case{2, 257, 3, 64, false, 0.1f}, Case{3, 16, 2, 64, false, 0.f}}) {
            INFO("precision " << engine::cuda::gemm_precision_name(p) << " B " << c.B << " T " << c.T << " H " << c.H
                              << " D " << c.D << " causal " << c.causal << " dropout " << c.dropout);
            engine::cuda::set_gemm_precision(p);
            Tensor qkv = test::to_cuda(randn({c.B, c.T, 3 * c.H * c.D}, true, 95));
            Tensor q = test::to_cuda(randn({c.B, c.T, c.H * c.D}, true, 96));
            Tensor g = test::to_cuda(randn({c.B, c.T, c.H * c.D}, false, 97));
            auto run = [&](bool pointers, Tensor& out_grad_qkv, Tensor& out_grad_q) {
                test::PointerBatchScope scope(pointers);
                Tensor a = test::to_cuda(qkv), b = test::to_cuda(q);
                engine::manual_seed(11);
                Tensor y = engine::attention_qkv(a, c.H, c.causal, c.dropout, true);
                Tensor z = engine::attention_tokens(b, b, b, c.H, c.causal, c.dropout, true);
                engine::sum(engine::mul(engine::add(y, z), g)).backward();
                out_grad_qkv = a.grad(), out_grad_q = b.grad();
                return engine::add(y, z);
            };
            const uint64_t calls = engine::cuda::pointer_batch_calls();
            Tensor gq0, gb0, gq1, gb1;
            Tensor per_head = run(false, gq0, gb0);
            CHECK(engine::cuda::pointer_batch_calls() == calls);
            Tensor one_call = run(true, gq1, gb1);
            CHECK(engine::cuda::pointer_batch_calls() - calls == 2 * 6);  // two ops, 2 + 4 GEMMs each
            test::require_close("forward", per_head, one_call, kAttnFwd);
            test::require_close("qkv gradient", gq0, gq1, kAttnBwd);
            test::require_close("tokens gradient", gb0, gb1, kAttnBwd);
        }
}

TEST_CASE("cuda attention: causal with queries that see no key gives all-zero rows", "[cuda]") {
    test::PrecisionScope fp32(engine::cuda::GemmPrecision::fp32);  // the GEMMs in full fp32
    // T = 7, S = 4: query i sees keys j <= i - 3, so queries 0, 1, 2 see none.
    Tensor q = randn({1, 2, 7, 8}, true, 41), k = randn({1, 2, 4, 8}, true, 42), v = randn({1, 2, 4, 8}, true, 43);
    check_parity("attention no-key queries", [](auto& in) { return engine::attention(in[0], in[1], in[2], true); },
                 {q, k, v}, kAttnFwd, kAttnBwd);
    Tensor out = engine::attention(test::to_cuda(q), test::to_cuda(k), test::to_cuda(v), true);
    for (int64_t h = 0; h < 2; h++)
        for (int64_t i = 0; i < 3; i++)
            for (int64_t d = 0; d < 8; d++) REQUIRE(out.at({0, h, i, d}) == 0.f);
}

TEST_CASE("cuda attention: dropout with the same seed on both sides", "[cuda]") {
    test::PrecisionScope fp32(engine::cuda::GemmPrecision::fp32);  // the GEMMs in full fp32
    for (bool causal : {false, true}) {
        INFO("causal " << causal);
        Tensor q = randn({2, 2, 5, 8}, true, 51), k = randn({2, 2, 7, 8}, true, 52), v = randn({2, 2, 7, 8}, true, 53);
        uint64_t offsets[2];
        int side = 0;
        check_parity("attention dropout", [causal, &offsets, &side](auto& in) {
            engine::manual_seed(99);
            Tensor out = engine::attention(in[0], in[1], in[2], causal, 0.25f, true);
            offsets[side++] = engine::global_generator().offset();
            return out;
        }, {q, k, v}, kAttnFwd, kAttnBwd);
        REQUIRE(offsets[0] == offsets[1]);
        REQUIRE(offsets[0] == (uint64_t)(2 * 2 * 5 * 7 + 3) / 4);
    }
    // Not training: no mask drawn, the generator untouched.
    engine::manual_seed(5);
    Tensor q = test::to_cuda(randn({1, 1, 3, 8}));
    engine::attention(q, q, q, false, 0.5f, false);
    REQUIRE(engine::global_generator().offset() == 0);
}

// ---------------------------------------------------------------------------------------------
// rope

TEST_CASE("cuda rope: start_pos 0 and large, D 2 and 8", "[cuda]") {
    for (int64_t start : {0, 7, 100000})
        for (Shape s : {Shape{2, 3, 5, 8}, Shape{1, 2}, Shape{4, 33, 2}}) {
            INFO("shape " << s.str() << " start_pos " << start);
            check_parity("rope", [start](auto& in) { return engine::rope(in[0], 10000.f, start); }, {randn(s)}, kRope,
                         kRope);
        }
}

// ---------------------------------------------------------------------------------------------

TEST_CASE("cuda nn ops: mixed devices are refused", "[cuda]") {
    using Catch::Contains;
    // (Catch's combined matchers keep references to their parts: one expression per assertion.)
#define MIXED(op) Contains(op) && Contains("cuda") && Contains("cpu")
    Tensor a = randn({3, 8}, false), ac = a.to(Device::CUDA);
    REQUIRE_THROWS_WITH(engine::mse_loss(ac, a), MIXED("mse_loss"));
    REQUIRE_THROWS_WITH(engine::layer_norm(ac, randn({8}, false), Tensor()), MIXED("layer_norm"));
    REQUIRE_THROWS_WITH(engine::layer_norm(a, Tensor(), randn({8}, false).to(Device::CUDA)), MIXED("layer_norm"));
    REQUIRE_THROWS_WITH(engine::cross_entropy(ac, ints({0, 1, 2}, {3})), MIXED("cross_entropy"));
    Tensor q = randn({1, 1, 3, 8}, false);
    REQUIRE_THROWS_WITH(engine::attention(q.to(Device::CUDA), q, q, false), MIXED("attention"));
    REQUIRE_THROWS_WITH(engine::attention(q, q, q.to(Device::CUDA), false), MIXED("attention"));
#undef MIXED
}
