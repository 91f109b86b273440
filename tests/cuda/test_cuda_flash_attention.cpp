// tests/cuda/test_cuda_flash_attention.cpp: the fused attention path (engine/cuda/flash_attention.cu)
// against the unfused one (engine/cuda/nn.cu: batched GEMMs, P stored), both on the device, through
// the `attention` op: the forward output and dq, dk, dv, for head dims 32, 64 and 128, causal and
// not, T == S and T != S (queries that see no key included), sizes that are not multiples of the
// tiles (16 and 32), several heads; gradients of only some inputs; a MultiHeadAttention module
// (head split and merge around the op, weight gradients); repeatability; a head dim
// without a kernel (20) going through the fallback; and proof that the fused path is the one
// taken (its call counters, the device memory the forward keeps, and under the emulator the launch
// count). The unfused path is itself checked against the CPU in test_cuda_nn.cpp. At the end, the
// tensor-core kernels (wmma with TF32 inputs under gemm_precision() tf32, bf16 inputs under bf16)
// against the unfused path in fp32, with tolerances from the inputs' rounding (explained there).
//
// Tolerances: fp32 summation-order differences only (online softmax and tiles against the GEMMs'
// order): forward atol 5e-6, rtol 1e-5; gradients atol 1e-5, rtol 1e-5 (sums of T or S terms of
// order 1).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include "engine/cuda/flash_attention.h"
#include "engine/cuda/matmul.h"
#include "engine/cuda/runtime.h"
#include "nn/attention.h"
#include "tests/cuda/parity.h"
#ifdef ENGINE_CUDA_EMU
#include <cuda_runtime.h>  // the emulator's launch counter
#endif

using engine::Device;
using engine::Shape;
using engine::Tensor;
using test::randn;
using test::to_cuda;

namespace {

const test::Tol kFwd{5e-6f, 1e-5f}, kBwd{1e-5f, 1e-5f};

// Sets the fused-attention switch for a scope (and the GEMMs to full fp32, so the reference path
// is fp32 on a GPU too).
struct FusedAttention {
    test::FusedAttentionScope fused;
    test::PrecisionScope precision;
    explicit FusedAttention(bool on) : fused(on), precision(engine::cuda::GemmPrecision::fp32) {}
};

struct Run {
    Tensor out, dq, dk, dv;
};

// attention on CUDA copies of q, k, v (leaves; gradients where the CPU tensors require them), then
// the backward of Σ out ⊙ w.
Run run(bool fused, const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor& w) {
    FusedAttention mode(fused);
    Tensor qc = to_cuda(q), kc = to_cuda(k), vc = to_cuda(v);
    Tensor out = engine::attention(qc, kc, vc, causal);
    REQUIRE(out.device() == Device::CUDA);
    engine::sum(engine::mul(out, w.to(Device::CUDA))).backward();
    return {out.detach(), qc.grad(), kc.grad(), vc.grad()};
}

Tensor weights_like(const Shape& s) {
    engine::Generator gen(99);
    Tensor w = Tensor::empty(s);
    gen.uniform(w.data_f32(), w.numel(), -1.f, 1.f);
    return w;
}

// Fused against unfused on the device; returns the fused run.
Run compare(int64_t B, int64_t H, int64_t T, int64_t S, int64_t D, bool causal, bool grad_q = true,
            bool grad_kv = true) {
    INFO("B " << B << " H " << H << " T " << T << " S " << S << " D " << D << " causal " << causal << " grads q "
              << grad_q << " k,v " << grad_kv);
    Tensor q = randn({B, H, T, D}, grad_q, 61), k = randn({B, H, S, D}, grad_kv, 62), v = randn({B, H, S, D}, grad_kv, 63);
    Tensor w = weights_like({B, H, T, D});
    auto before = engine::cuda::flash_attention_calls();
    Run fused = run(true, q, k, v, causal, w);
    auto after = engine::cuda::flash_attention_calls();
    REQUIRE(after.forward == before.forward + 1);
    REQUIRE(after.backward == before.backward + 1);
    Run ref = run(false, q, k, v, causal, w);
    REQUIRE(engine::cuda::flash_attention_calls().forward == after.forward);  // the reference is not fused

    test::require_close("forward", ref.out, fused.out, kFwd);
    if (grad_q) test::require_close("dq", ref.dq, fused.dq, kBwd);
    else REQUIRE(!fused.dq.defined());
    if (grad_kv) {
        test::require_close("dk", ref.dk, fused.dk, kBwd);
        test::require_close("dv", ref.dv, fused.dv, kBwd);
    } else {
        REQUIRE(!fused.dk.defined());
        REQUIRE(!fused.dv.defined());
    }
    return fused;
}

std::vector<uint32_t> bits_of(const Tensor& t) {
    std::vector<float> v = t.to_vector();
    std::vector<uint32_t> b(v.size());
    std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
    return b;
}

}  // namespace

TEST_CASE("cuda flash attention: fused against unfused, D 32, 64, 128, causal and not, T != S", "[cuda][flash]") {
    struct Case { int64_t B, H, T, S; };
    // 37: not a multiple of the 16- or 32-row tiles; 5/9 and 9/5: T != S both ways (T = 9, S = 5
    // causal: queries 0-3 see no key); 70: three and five tiles; 1/1: a single key.
    for (int64_t D : {32, 64, 128})
        for (Case c : {Case{2, 3, 37, 37}, Case{1, 2, 5, 9}, Case{2, 1, 9, 5}, Case{1, 1, 1, 1}, Case{1, 2, 70, 41}})
            for (bool causal : {false, true}) compare(c.B, c.H, c.T, c.S, D, causal);
}

TEST_CASE("cuda flash attention: gradients of only q, or only k and v", "[cuda][flash]") {
    for (bool causal : {false, true}) {
        compare(1, 2, 21, 33, 64, causal, true, false);
        compare(1, 2, 33, 21, 128, causal, false, true);
    }
}

TEST_CASE("cuda flash attention: queries that see no key give zero rows and zero gradients", "[cuda][flash]") {
    // T = 7, S = 4, causal: query i sees keys j <= i - 3, so queries 0, 1, 2 see none.
    Run r = compare(1, 2, 7, 4, 32, true);
    for (int64_t h = 0; h < 2; h++)
        for (int64_t i = 0; i < 3; i++)
            for (int64_t d = 0; d < 32; d++) {
                REQUIRE(r.out.at({0, h, i, d}) == 0.f);
                REQUIRE(r.dq.at({0, h, i, d}) == 0.f);
            }
}

TEST_CASE("cuda flash attention: a MultiHeadAttention module, fused against unfused", "[cuda][flash]") {
    // dim 96, 3 heads: head dim 32. The module's output, dx and every weight gradient.
    for (bool causal : {false, true}) {
        INFO("causal " << causal);
        Tensor x = randn({2, 19, 96}, true, 101), w = weights_like({2, 19, 96});
        std::vector<Tensor> outs, dxs;
        std::vector<std::vector<nn::NamedTensor>> params;
        std::vector<std::unique_ptr<nn::MultiHeadAttention>> mods;
        for (bool fused : {true, false}) {
            engine::manual_seed(5);  // the same weights both times
            mods.push_back(std::make_unique<nn::MultiHeadAttention>(96, 3, causal));
            mods.back()->to(Device::CUDA);
            FusedAttention mode(fused);
            auto before = engine::cuda::flash_attention_calls().forward;
            Tensor xc = to_cuda(x);
            Tensor out = mods.back()->forward(xc);
            REQUIRE(engine::cuda::flash_attention_calls().forward == before + (fused ? 1 : 0));
            engine::sum(engine::mul(out, w.to(Device::CUDA))).backward();
            outs.push_back(out.detach());
            dxs.push_back(xc.grad());
            params.push_back(mods.back()->named_parameters());
        }
        test::require_close("module output", outs[1], outs[0], kFwd);
        test::require_close("module dx", dxs[1], dxs[0], kBwd);
        REQUIRE(params[0].size() == params[1].size());
        for (size_t i = 0; i < params[0].size(); i++)
            test::require_close("grad of " + params[0][i].name, params[1][i].tensor->grad(), params[0][i].tensor->grad(),
                                kBwd);
    }
}

TEST_CASE("cuda flash attention: the same bits on every run", "[cuda][flash]") {
    Tensor q = randn({2, 2, 37, 64}, true, 71), k = randn({2, 2, 45, 64}, true, 72), v = randn({2, 2, 45, 64}, true, 73);
    Tensor w = weights_like({2, 2, 37, 64});
    Run a = run(true, q, k, v, true, w), b = run(true, q, k, v, true, w);
    REQUIRE(bits_of(a.out) == bits_of(b.out));
    REQUIRE(bits_of(a.dq) == bits_of(b.dq));
    REQUIRE(bits_of(a.dk) == bits_of(b.dk));
    REQUIRE(bits_of(a.dv) == bits_of(b.dv));
}

TEST_CASE("cuda flash attention: a head dim without a kernel, and dropout, take the unfused path", "[cuda][flash]") {
    REQUIRE(!engine::cuda::flash_attention_supports(20));
    REQUIRE(engine::cuda::flash_attention_supports(32));
    REQUIRE(engine::cuda::flash_attention_supports(64));
    REQUIRE(engine::cuda::flash_attention_supports(128));
    FusedAttention mode(true);
    for (bool causal : {false, true}) {
        INFO("causal " << causal);
        // D = 20: the fused switch is on, the op falls back and still matches the CPU.
        Tensor q = randn({1, 2, 6, 20}, true, 81), k = randn({1, 2, 9, 20}, true, 82), v = randn({1, 2, 9, 20}, true, 83);
        auto before = engine::cuda::flash_attention_calls();
        test::check_parity("attention D 20", [causal](auto& in) { return engine::attention(in[0], in[1], in[2], causal); },
                           {q, k, v}, {1e-5f, 1e-4f}, {1e-4f, 1e-3f});
        auto after = engine::cuda::flash_attention_calls();
        REQUIRE(after.forward == before.forward);
        REQUIRE(after.backward == before.backward);
        // Dropout while training needs the mask: unfused. Not training: fused.
        Tensor qc = to_cuda(randn({1, 1, 5, 32}, false));
        engine::attention(qc, qc, qc, causal, 0.25f, true);
        REQUIRE(engine::cuda::flash_attention_calls().forward == after.forward);
        engine::attention(qc, qc, qc, causal, 0.25f, false);
        REQUIRE(engine::cuda::flash_attention_calls().forward == after.forward + 1);
    }
}

TEST_CASE("cuda flash attention: the op takes the fused path (calls, memory kept, launches)", "[cuda][flash]") {
    const int64_t B = 2, H = 3, T = 40, S = 40, D = 64;
    // Leaves that require grad, so the forward keeps what its backward needs.
    Tensor q = to_cuda(randn({B, H, T, D}, true, 91)), k = to_cuda(randn({B, H, S, D}, true, 92)),
           v = to_cuda(randn({B, H, S, D}, true, 93));
    // Device memory the forward leaves allocated: out and lse fused; out and P [B, H, T, S] unfused.
    auto kept = [&](bool fused) {
        FusedAttention mode(fused);
        engine::cuda::synchronize();
        size_t before = engine::cuda::memory_in_use();
        Tensor out = engine::attention(q, k, v, false);
        return engine::cuda::memory_in_use() - before;
    };
    const size_t out_bytes = sizeof(float) * B * H * T * D;
    REQUIRE(kept(true) == out_bytes + sizeof(float) * B * H * T);
    REQUIRE(kept(false) == out_bytes + sizeof(float) * B * H * T * S);

    FusedAttention mode(true);
    auto before = engine::cuda::flash_attention_calls();
#ifdef ENGINE_CUDA_EMU
    // One kernel forward, three backward (Δ, dk/dv, dq): no GEMM, no softmax kernel.
    uint64_t launches = emu::counters().launches;
    Tensor out = engine::attention(q, k, v, true);
    CHECK(emu::counters().launches - launches == 1);
    Tensor lse = q.new_empty({B, H, T}), dout = to_cuda(randn({B, H, T, D}, false, 94));
    Tensor dq = q.new_empty(q.shape()), dk = q.new_empty(k.shape()), dv = q.new_empty(v.shape());
    const auto head_major = engine::AttentionHeads::head_major(D);
    engine::cuda::flash_attention_forward(q.raw_f32(), k.raw_f32(), v.raw_f32(), out.raw_f32(), lse.raw_f32(), B * H,
                                          T, S, D, true, 0.125f, head_major, head_major);
    launches = emu::counters().launches;
    engine::cuda::flash_attention_backward(q.raw_f32(), k.raw_f32(), v.raw_f32(), out.raw_f32(), lse.raw_f32(),
                                           dout.raw_f32(), dq.raw_f32(), dk.raw_f32(), dv.raw_f32(), B * H, T, S, D,
                                           true, 0.125f, head_major, head_major);
    CHECK(emu::counters().launches - launches == 3);
    REQUIRE(engine::cuda::flash_attention_calls().forward == before.forward + 2);
    REQUIRE(engine::cuda::flash_attention_calls().backward == before.backward + 1);
#else
    Tensor out = engine::attention(q, k, v, true);
    REQUIRE(engine::cuda::flash_attention_calls().forward == before.forward + 1);
#endif
}

// ---------------------------------------------------------------------------------------------
// The tensor-core kernels (gemm_precision() tf32: TF32 wmma products; bf16: bf16 ones; fp32
// softmax either way), against the unfused path in full fp32.
//
// Tolerance from TF32 rounding: each product's inputs carry 10 mantissa bits (a relative error up
// to 2^-11 each), so a sum of K products is off by about 2^-11·sqrt(2K)·rms(term): a few 2^-11 of
// the output's scale, whatever the element's own size (an element near 0 is as far off as a large
// one), plus a relative part for the large elements (a causal dv of the first keys sums many
// terms of one sign). The forward has two rounded products in a row (q·kᵀ, then P·v), the
// gradients three (q·kᵀ and dout·vᵀ, then dS·k etc.), and the score errors pass through exp. So
// each element may be off by bound · 2^-10 · (rms of the output + |element|), bound 4 forward and
// 6 for the gradients (seen in these cases, emulated: at most 2.5 and 2.8); a wrong mask, tile
// offset or scale is off by the rms itself (hundreds of units). bf16 inputs (and P, dS) carry 7
// mantissa bits, a relative error up to 2^-8: the same bounds in units of 2^-7 (seen: at most
// 3.5 forward and 2.2 for the gradients).
namespace {


Run run_tc(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor& w,
           engine::cuda::GemmPrecision p = engine::cuda::GemmPrecision::tf32) {
    test::FusedAttentionScope fused(true);
    test::PrecisionScope precision(p);
    Tensor qc = to_cuda(q), kc = to_cuda(k), vc = to_cuda(v);
    Tensor out = engine::attention(qc, kc, vc, causal);
    engine::sum(engine::mul(out, w.to(Device::CUDA))).backward();
    return {out.detach(), qc.grad(), kc.grad(), vc.grad()};
}

// max over the elements of |got − want| / (2^unit · (rms(want) + floor + |want|)); requires it at
// most `bound`. Returns the ratio. unit −10 for TF32; −7 for bf16, whose rounding is 8× coarser
// (8 significant bits against 11).
double require_close_rms(const std::string& what, const Tensor& want, const Tensor& got, double bound,
                         double floor = 0, int unit_exp = -10) {
    INFO(what);
    REQUIRE(got.defined());
    REQUIRE(want.shape() == got.shape());
    std::vector<float> w = want.to_vector(), g = got.to_vector();
    const double rms = test::rms(want) + floor;
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < w.size(); i++) {
        REQUIRE(std::isfinite(g[i]));
        const double e = std::fabs((double)g[i] - w[i]), unit = std::ldexp(rms + std::fabs((double)w[i]), unit_exp);
        const double r = unit > 0 ? e / unit : (e > 0 ? 1e30 : 0);
        if (r > worst) { worst = r; at = i; }
    }
    INFO("rms " << rms << ", worst element " << at << ": want " << (w.empty() ? 0.f : w[at]) << ", got "
                << (g.empty() ? 0.f : g[at]) << ": " << worst << " units of 2^" << unit_exp
                << "·(rms + |want|), bound " << bound);
    if (std::getenv("INITLAB_TC_TOL")) std::fprintf(stderr, "tc-tol %s %.3f\n", what.c_str(), worst);
    REQUIRE(worst <= bound);
    return worst;
}

constexpr double kTcFwdBound = 4, kTcBwdBound = 6;

void compare_tc(int64_t B, int64_t H, int64_t T, int64_t S, int64_t D, bool causal,
                engine::cuda::GemmPrecision p = engine::cuda::GemmPrecision::tf32) {
    const bool bf16 = p == engine::cuda::GemmPrecision::bf16;
    INFO("tensor cores, " << (bf16 ? "bf16" : "tf32") << ": B " << B << " H " << H << " T " << T << " S " << S
                          << " D " << D << " causal " << causal);
    Tensor q = randn({B, H, T, D}, true, 161), k = randn({B, H, S, D}, true, 162), v = randn({B, H, S, D}, true, 163);
    Tensor w = weights_like({B, H, T, D});
    Run ref = run(false, q, k, v, causal, w);  // unfused, fp32 GEMMs
    const int unit = bf16 ? -7 : -10;
    // dq split (the dk/dv kernel's parts, summed; S <= 512 here), then from the dq kernel; TF32 with
    // synchronous loads (the default) and, once, with the asynchronous copies: the same bits; and
    // the narrow forward (32 keys a step, at D = 64 only).
    struct Mode { bool split, async, narrow; };
    for (Mode mode : {Mode{true, false, false}, Mode{false, false, false}, Mode{true, true, false},
                      Mode{true, false, true}}) {
        if (bf16 && mode.async) continue;  // bf16 has no asynchronous kernels
        INFO((mode.split ? "split dq" : "dq kernel") << (mode.async ? ", asynchronous copies" : ", synchronous loads")
                                                     << (mode.narrow ? ", narrow forward" : ""));
        test::SplitDqScope split_scope(mode.split);
        test::AsyncCopyScope async_scope(mode.async);
        test::NarrowForwardScope narrow_scope(mode.narrow);
        auto before = engine::cuda::flash_attention_calls();
        Run tc = run_tc(q, k, v, causal, w, p);
        auto after = engine::cuda::flash_attention_calls();
        REQUIRE(after.tc_forward == before.tc_forward + 1);
        REQUIRE(after.tc_backward == before.tc_backward + 1);
        REQUIRE(after.bf16_forward == before.bf16_forward + (bf16 ? 1 : 0));
        REQUIRE(after.bf16_backward == before.bf16_backward + (bf16 ? 1 : 0));
        REQUIRE(after.split_dq == before.split_dq + (mode.split ? 1 : 0));
        const int async_calls = mode.async ? 1 : 0;
        REQUIRE(after.async_forward == before.async_forward + async_calls);
        REQUIRE(after.async_backward == before.async_backward + async_calls);
        REQUIRE(after.narrow_forward == before.narrow_forward + (mode.narrow && D == 64 ? 1 : 0));
        if (mode.async) {  // against the synchronous run of the same split
            test::AsyncCopyScope off(false);
            Run sync = run_tc(q, k, v, causal, w, p);
            REQUIRE(bits_of(sync.out) == bits_of(tc.out));
            REQUIRE(bits_of(sync.dq) == bits_of(tc.dq));
            REQUIRE(bits_of(sync.dk) == bits_of(tc.dk));
            REQUIRE(bits_of(sync.dv) == bits_of(tc.dv));
        }
        require_close_rms("forward", ref.out, tc.out, kTcFwdBound, 0, unit);
        // A gradient can cancel to exactly 0 (one key: dS = P·(dP − Δ) = 0), where TF32's dP − Δ
        // leaves about 2^-10·|dout|·|v|: the gradients' floor is the rms of dv (|dout| weighted by
        // P), their scale.
        const double floor = test::rms(ref.dv);
        require_close_rms("dq", ref.dq, tc.dq, kTcBwdBound, floor, unit);
        require_close_rms("dk", ref.dk, tc.dk, kTcBwdBound, floor, unit);
        require_close_rms("dv", ref.dv, tc.dv, kTcBwdBound, floor, unit);
    }
}

}  // namespace

TEST_CASE("cuda flash attention, tensor cores: against unfused fp32, D 32, 64, 128, causal and not, T != S",
          "[cuda][flash]") {
    struct Case { int64_t B, H, T, S; };
    // 257: ViT-Tiny's length (not a multiple of any tile); 37/45 and 45/37; 5/9 and 9/5 (T = 9,
    // S = 5 causal: queries 0-3 see no key); 1/1: a single key; 70/41: several tiles, T > S;
    // 130/41 causal: the first tile of 64 queries sees no key at all (its key loop never runs).
    for (int64_t D : {32, 64, 128})
        for (Case c : {Case{1, 1, 257, 257}, Case{2, 1, 37, 45}, Case{1, 2, 45, 37}, Case{1, 2, 5, 9}, Case{2, 1, 9, 5},
                       Case{1, 1, 1, 1}, Case{1, 1, 70, 41}, Case{1, 1, 130, 41}})
            for (bool causal : {false, true}) compare_tc(c.B, c.H, c.T, c.S, D, causal);
}

#ifdef ENGINE_CUDA_EMU
// An RTX 30/40 card gives a block 99 KiB of shared memory, where some tensor-core kernels at D = 128
// take 110-155 KB (an H100 gives 227): there the fp32 kernels run instead of failing to launch. The
// emulated device is given that limit here; the same call on the default device takes the tensor
// cores.
TEST_CASE("cuda flash attention, tensor cores: kernels that need more shared memory than the device has fall back to "
          "fp32",
          "[cuda][flash]") {
    Tensor q = randn({1, 2, 40, 128}, true, 171), k = randn({1, 2, 40, 128}, true, 172);
    Tensor v = randn({1, 2, 40, 128}, true, 173), w = weights_like({1, 2, 40, 128});
    Run ref = run(false, q, k, v, false, w);
    struct Limit {
        size_t before = emu::set_optin_shared_limit(99 << 10);
        ~Limit() { emu::set_optin_shared_limit(before); }
    };
    for (bool small : {true, false}) {
        INFO((small ? "99 KiB a block" : "227 KiB a block"));
        std::optional<Limit> limit;
        if (small) limit.emplace();
        REQUIRE(engine::cuda::max_shared_memory_per_block() == (small ? 99u << 10 : 227u << 10));
        auto before = engine::cuda::flash_attention_calls();
        Run got = run_tc(q, k, v, false, w);
        auto after = engine::cuda::flash_attention_calls();
        REQUIRE(after.backward == before.backward + 1);
        REQUIRE(after.tc_backward == before.tc_backward + (small ? 0 : 1));  // TF32 dk/dv: 120 KB
        const double floor = test::rms(ref.dv);
        require_close_rms("forward", ref.out, got.out, kTcFwdBound, 0, -10);
        require_close_rms("dq", ref.dq, got.dq, kTcBwdBound, floor, -10);
        require_close_rms("dk", ref.dk, got.dk, kTcBwdBound, floor, -10);
        require_close_rms("dv", ref.dv, got.dv, kTcBwdBound, floor, -10);
    }
}
#endif

TEST_CASE("cuda flash attention, tensor cores, bf16 inputs: against unfused fp32, D 32, 64, 128, causal and not",
          "[cuda][flash]") {
    using engine::cuda::GemmPrecision;
    struct Case { int64_t B, H, T, S; };
    for (int64_t D : {32, 64, 128})
        for (Case c : {Case{1, 1, 257, 257}, Case{1, 2, 45, 37}, Case{2, 1, 9, 5}, Case{1, 1, 70, 41},
                       Case{1, 1, 130, 41}})
            for (bool causal : {false, true}) compare_tc(c.B, c.H, c.T, c.S, D, causal, GemmPrecision::bf16);
}

TEST_CASE("cuda flash attention, tensor cores: dq is split for S <= 512 when dk or dv is wanted too",
          "[cuda][flash]") {
    test::SplitDqScope split(true);
    auto split_calls = [] { return engine::cuda::flash_attention_calls().split_dq; };
    // 9 key tiles (S = 520): the dq kernel; right either way.
    Tensor q = randn({1, 1, 5, 32}, true, 191), k = randn({1, 1, 520, 32}, true, 192), v = randn({1, 1, 520, 32}, true, 193);
    Tensor w = weights_like({1, 1, 5, 32});
    uint64_t before = split_calls();
    Run tc = run_tc(q, k, v, false, w);
    REQUIRE(split_calls() == before);
    Run ref = run(false, q, k, v, false, w);
    require_close_rms("dq, 9 key tiles", ref.dq, tc.dq, kTcBwdBound, test::rms(ref.dv));
    // 8 key tiles (S = 512): split.
    Tensor k8 = randn({1, 1, 512, 32}, true, 194), v8 = randn({1, 1, 512, 32}, true, 195);
    before = split_calls();
    Run tc8 = run_tc(q, k8, v8, true, w);
    REQUIRE(split_calls() == before + 1);
    Run ref8 = run(false, q, k8, v8, true, w);
    require_close_rms("dq, 8 key tiles", ref8.dq, tc8.dq, kTcBwdBound, test::rms(ref8.dv));
    // Only dq wanted: the dq kernel (the dk/dv kernel would run for nothing else).
    Tensor kc = randn({1, 1, 40, 32}, false, 196), vc = randn({1, 1, 40, 32}, false, 197);
    before = split_calls();
    Run only_q = run_tc(q, kc, vc, true, w);
    REQUIRE(split_calls() == before);
    REQUIRE(!only_q.dk.defined());
    Run ref_q = run(false, q, kc, vc, true, w);
    require_close_rms("only dq", ref_q.dq, only_q.dq, kTcBwdBound, test::rms(ref_q.out));
}

TEST_CASE("cuda flash attention, tensor cores: queries that see no key give zero rows and gradients", "[cuda][flash]") {
    Tensor q = randn({1, 2, 7, 32}, true, 171), k = randn({1, 2, 4, 32}, true, 172), v = randn({1, 2, 4, 32}, true, 173);
    Run r = run_tc(q, k, v, true, weights_like({1, 2, 7, 32}));
    for (int64_t h = 0; h < 2; h++)
        for (int64_t i = 0; i < 3; i++)
            for (int64_t d = 0; d < 32; d++) {
                REQUIRE(r.out.at({0, h, i, d}) == 0.f);
                REQUIRE(r.dq.at({0, h, i, d}) == 0.f);
            }
}

TEST_CASE("cuda flash attention, tensor cores: the same bits on every run, TF32 and bf16", "[cuda][flash]") {
    Tensor q = randn({2, 2, 37, 64}, true, 181), k = randn({2, 2, 45, 64}, true, 182), v = randn({2, 2, 45, 64}, true, 183);
    Tensor w = weights_like({2, 2, 37, 64});
    auto before = engine::cuda::flash_attention_calls();
    Run a = run_tc(q, k, v, true, w), b = run_tc(q, k, v, true, w);
    REQUIRE(bits_of(a.out) == bits_of(b.out));
    REQUIRE(bits_of(a.dq) == bits_of(b.dq));
    REQUIRE(bits_of(a.dk) == bits_of(b.dk));
    REQUIRE(bits_of(a.dv) == bits_of(b.dv));
    // gemm_precision bf16: the bf16 kernels, deterministic too, and not the TF32 ones' bits.
    Run c = run_tc(q, k, v, true, w, engine::cuda::GemmPrecision::bf16);
    Run c2 = run_tc(q, k, v, true, w, engine::cuda::GemmPrecision::bf16);
    REQUIRE(bits_of(c.out) == bits_of(c2.out));
    REQUIRE(bits_of(c.dq) == bits_of(c2.dq));
    REQUIRE(bits_of(c.dk) == bits_of(c2.dk));
    REQUIRE(bits_of(c.dv) == bits_of(c2.dv));
    REQUIRE(bits_of(a.out) != bits_of(c.out));
    REQUIRE(bits_of(a.dq) != bits_of(c.dq));
    auto after = engine::cuda::flash_attention_calls();
    REQUIRE(after.tc_forward == before.tc_forward + 4);
    REQUIRE(after.tc_backward == before.tc_backward + 4);
    REQUIRE(after.bf16_forward == before.bf16_forward + 2);
    REQUIRE(after.bf16_backward == before.bf16_backward + 2);
    // fp32 precision: the fp32 kernels, not the tensor-core ones.
    Run d = run(true, q, k, v, true, w);
    REQUIRE(d.out.defined());
    REQUIRE(engine::cuda::flash_attention_calls().tc_forward == after.tc_forward);
    REQUIRE(engine::cuda::flash_attention_calls().forward == after.forward + 1);
}

// ---------------------------------------------------------------------------------------------
// Token-major layouts: attention_qkv (q, k, v the column blocks of one [B, T, 3·H·D] projection)
// and attention_tokens (q, k, v [B, T, H·D]) hand their tensors to the fused kernels as they are,
// and get out, dq, dk, dv written in the same layouts: no permute, narrow or concat around them.
namespace {

struct TokensRun {
    Tensor out, dq, dk, dv;  // attention_qkv: dq holds d(qkv)
};

// attention_qkv (k, v undefined) or attention_tokens on CUDA copies, then the backward of Σ out ⊙ w.
TokensRun run_tokens(bool fused, engine::cuda::GemmPrecision p, const Tensor& q, const Tensor& k, const Tensor& v,
                     int64_t heads, bool causal, const Tensor& w, uint64_t* launches = nullptr) {
    test::FusedAttentionScope f(fused);
    test::PrecisionScope precision(p);
    Tensor qc = to_cuda(q), kc = k.defined() ? to_cuda(k) : Tensor(), vc = v.defined() ? to_cuda(v) : Tensor();
    Tensor wc = w.to(Device::CUDA);
#ifdef ENGINE_CUDA_EMU
    const uint64_t before = emu::counters().launches;
#endif
    Tensor out = k.defined() ? engine::attention_tokens(qc, kc, vc, heads, causal) : engine::attention_qkv(qc, heads, causal);
#ifdef ENGINE_CUDA_EMU
    if (launches) *launches = emu::counters().launches - before;
#else
    (void)launches;
#endif
    engine::sum(engine::mul(out, wc)).backward();
    return {out.detach(), qc.grad(), kc.defined() ? kc.grad() : Tensor(), vc.defined() ? vc.grad() : Tensor()};
}

// A fused run_tokens that requires the kernels it took by their call counts (as compare_tc does):
// one flash forward and one backward, on the tensor cores unless in fp32, in bf16 under bf16. A run
// that fell back to the unfused path would meet the tolerances as well.
TokensRun run_tokens_fused(engine::cuda::GemmPrecision p, const Tensor& q, const Tensor& k, const Tensor& v,
                           int64_t heads, bool causal, const Tensor& w, uint64_t* launches = nullptr) {
    const bool tc = p != engine::cuda::GemmPrecision::fp32, bf16 = p == engine::cuda::GemmPrecision::bf16;
    auto before = engine::cuda::flash_attention_calls();
    TokensRun r = run_tokens(true, p, q, k, v, heads, causal, w, launches);
    auto after = engine::cuda::flash_attention_calls();
    REQUIRE(after.forward == before.forward + 1);
    REQUIRE(after.backward == before.backward + 1);
    REQUIRE(after.tc_forward == before.tc_forward + (tc ? 1 : 0));
    REQUIRE(after.tc_backward == before.tc_backward + (tc ? 1 : 0));
    REQUIRE(after.bf16_forward == before.bf16_forward + (bf16 ? 1 : 0));
    REQUIRE(after.bf16_backward == before.bf16_backward + (bf16 ? 1 : 0));
    return r;
}

}  // namespace

TEST_CASE("cuda flash attention: attention_qkv and attention_tokens read and write token-major heads", "[cuda][flash]") {
    using engine::cuda::GemmPrecision;
    const int64_t B = 2, heads = 3;
    struct Case { int64_t T, S, D; };
    for (Case c : {Case{37, 37, 32}, Case{70, 45, 64}, Case{19, 19, 128}})
        for (bool causal : {false, true}) {
            const int64_t W = heads * c.D;
            INFO("T " << c.T << " S " << c.S << " D " << c.D << " causal " << causal);
            Tensor w = weights_like({B, c.T, W});
            // attention_qkv (T = S only): fused fp32 kernels against unfused to fp32 rounding, the
            // tensor-core kernels against unfused fp32 to TF32's bounds.
            if (c.T == c.S) {
                Tensor qkv = randn({B, c.T, 3 * W}, true, 201);
                TokensRun ref = run_tokens(false, GemmPrecision::fp32, qkv, {}, {}, heads, causal, w);
                uint64_t launches = 0;
                TokensRun f32 = run_tokens_fused(GemmPrecision::fp32, qkv, {}, {}, heads, causal, w, &launches);
                test::require_close("qkv forward", ref.out, f32.out, kFwd);
                test::require_close("d(qkv)", ref.dq, f32.dq, kBwd);
#ifdef ENGINE_CUDA_EMU
                CHECK(launches == 1);  // the flash forward alone: no permute of q, k, v or out
#endif
                TokensRun tc = run_tokens_fused(GemmPrecision::tf32, qkv, {}, {}, heads, causal, w, &launches);
                require_close_rms("qkv forward, tensor cores", ref.out, tc.out, kTcFwdBound);
                require_close_rms("d(qkv), tensor cores", ref.dq, tc.dq, kTcBwdBound, test::rms(ref.dq));
#ifdef ENGINE_CUDA_EMU
                CHECK(launches == 1);
#endif
                TokensRun bf = run_tokens_fused(GemmPrecision::bf16, qkv, {}, {}, heads, causal, w);
                require_close_rms("qkv forward, bf16", ref.out, bf.out, kTcFwdBound, 0, -7);
                require_close_rms("d(qkv), bf16", ref.dq, bf.dq, kTcBwdBound, test::rms(ref.dq), -7);
            }
            Tensor q = randn({B, c.T, W}, true, 202), k = randn({B, c.S, W}, true, 203), v = randn({B, c.S, W}, true, 204);
            TokensRun ref = run_tokens(false, GemmPrecision::fp32, q, k, v, heads, causal, w);
            uint64_t launches = 0;
            TokensRun f32 = run_tokens_fused(GemmPrecision::fp32, q, k, v, heads, causal, w, &launches);
            test::require_close("tokens forward", ref.out, f32.out, kFwd);
            test::require_close("tokens dq", ref.dq, f32.dq, kBwd);
            test::require_close("tokens dk", ref.dk, f32.dk, kBwd);
            test::require_close("tokens dv", ref.dv, f32.dv, kBwd);
#ifdef ENGINE_CUDA_EMU
            CHECK(launches == 1);
#endif
            TokensRun tc = run_tokens_fused(GemmPrecision::tf32, q, k, v, heads, causal, w);
            const double floor = test::rms(ref.dv);
            require_close_rms("tokens forward, tensor cores", ref.out, tc.out, kTcFwdBound);
            require_close_rms("tokens dq, tensor cores", ref.dq, tc.dq, kTcBwdBound, floor);
            require_close_rms("tokens dk, tensor cores", ref.dk, tc.dk, kTcBwdBound, floor);
            require_close_rms("tokens dv, tensor cores", ref.dv, tc.dv, kTcBwdBound, floor);
            TokensRun bf = run_tokens_fused(GemmPrecision::bf16, q, k, v, heads, causal, w);
            require_close_rms("tokens forward, bf16", ref.out, bf.out, kTcFwdBound, 0, -7);
            require_close_rms("tokens dq, bf16", ref.dq, bf.dq, kTcBwdBound, floor, -7);
            require_close_rms("tokens dk, bf16", ref.dk, bf.dk, kTcBwdBound, floor, -7);
            require_close_rms("tokens dv, bf16", ref.dv, bf.dv, kTcBwdBound, floor, -7);
        }
}

TEST_CASE("cuda flash attention: layouts of another head dim, and misaligned rows for the tensor cores, are errors",
          "[cuda][flash]") {
    const int64_t T = 8, D = 32;
    Tensor x = to_cuda(randn({1, T, 3 * D + 1}, false, 211)), out = x.new_empty({1, T, D}), lse = x.new_empty({1, T});
    const float* p = x.raw_f32();
    const auto hm = engine::AttentionHeads::head_major(D);
    // A layout of head dim 64 for a call of head dim 32.
    REQUIRE_THROWS_WITH(engine::cuda::flash_attention_forward(p, p, p, out.raw_f32(), lse.raw_f32(), 1, T, T, D, false,
                                                              0.2f, engine::AttentionHeads::head_major(64), hm),
                        Catch::Contains("flash attention forward") && Catch::Contains("head dim 64"));
    // Rows 3·D + 1 floats apart: fine for the fp32 kernels, not for the tensor cores' float4s.
    const auto odd = engine::AttentionHeads::token_major(1, D, 3 * D + 1);
    {
        test::PrecisionScope precision(engine::cuda::GemmPrecision::fp32);
        engine::cuda::flash_attention_forward(p, p + D, p + 2 * D, out.raw_f32(), lse.raw_f32(), 1, T, T, D, false,
                                              0.2f, odd, engine::AttentionHeads::token_major(1, D));
    }
    test::PrecisionScope precision(engine::cuda::GemmPrecision::tf32);
    REQUIRE_THROWS_WITH(engine::cuda::flash_attention_forward(p, p + D, p + 2 * D, out.raw_f32(), lse.raw_f32(), 1, T,
                                                              T, D, false, 0.2f, odd,
                                                              engine::AttentionHeads::token_major(1, D)),
                        Catch::Contains("16-byte"));
}
