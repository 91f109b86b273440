// tests/cuda/parity.h: the [cuda] suite's one check: run the same function on CPU tensors and on
// their CUDA copies and compare outputs and gradients (the CPU backend is verified against PyTorch,
// so it is the reference). Under the emulated build "CUDA" is the CPU emulator; on a GPU machine
// (make test-gpu) the same tests run on the device.
//
//   check_parity("softmax", [](auto& in) { return engine::softmax(in[0]); }, {randn({7, 33})});
//
// The gradient compared is that of L = Σ f(inputs)·w for fixed random weights w, so every output
// element contributes differently.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>
#include "engine/cuda/flash_attention.h"
#include "engine/cuda/matmul.h"
#include "engine/cuda/nn.h"
#include "engine/ops.h"
#include "engine/rng.h"

namespace test {

using engine::Device;
using engine::Tensor;

struct Tol {
    float atol = 1e-5f;
    float rtol = 1e-4f;
};

// Largest |got − want| − tol(want) over the elements, with the index where it happens; both on any device.
inline void require_close(const std::string& what, const Tensor& want, const Tensor& got, Tol tol) {
    INFO(what);
    REQUIRE(got.defined());
    REQUIRE(want.shape() == got.shape());
    std::vector<float> w = want.to_vector(), g = got.to_vector();
    int64_t worst = -1;
    double worst_excess = 0;
    for (size_t i = 0; i < w.size(); i++) {
        bool both_nan = std::isnan(w[i]) && std::isnan(g[i]);
        if (both_nan) continue;
        double err = std::fabs((double)g[i] - w[i]), allowed = tol.atol + tol.rtol * std::fabs((double)w[i]);
        if (std::isnan(g[i]) || std::isnan(w[i]) || err > allowed) {
            double excess = std::isnan(err) ? 1e30 : err - allowed;
            if (worst < 0 || excess > worst_excess) { worst = (int64_t)i; worst_excess = excess; }
        }
    }
    if (worst >= 0) {
        INFO("element " << worst << " of " << w.size() << " (shape " << want.shape().str() << "): cpu " << w[worst]
                        << ", cuda " << g[worst] << " (atol " << tol.atol << ", rtol " << tol.rtol << ")");
        REQUIRE(worst < 0);
    }
}

// A CUDA leaf copy of a CPU tensor (same requires_grad).
inline Tensor to_cuda(const Tensor& t) {
    if (!t.defined()) return t;
    Tensor c = t.detach().to(Device::CUDA);
    if (t.requires_grad()) c.requires_grad_(true);
    return c;
}

inline void check_parity(const std::string& name, const std::function<Tensor(const std::vector<Tensor>&)>& f,
                         std::vector<Tensor> cpu_inputs, Tol fwd = {}, Tol bwd = {}) {
    INFO("op " << name);
    std::vector<Tensor> cuda_inputs;
    for (const Tensor& t : cpu_inputs) cuda_inputs.push_back(to_cuda(t));

    Tensor out_cpu = f(cpu_inputs), out_cuda = f(cuda_inputs);
    REQUIRE(out_cuda.device() == Device::CUDA);
    require_close(name + " forward", out_cpu, out_cuda, fwd);

    bool any_grad = false;
    for (const Tensor& t : cpu_inputs) any_grad = any_grad || (t.defined() && t.requires_grad());
    if (!any_grad) return;
    engine::Generator wgen(99);
    Tensor w = Tensor::empty(out_cpu.shape());
    wgen.uniform(w.data_f32(), w.numel(), -1.f, 1.f);
    // The CPU inputs may have been through an earlier check (the same leaves, a second backend path):
    // only this call's gradients count.
    for (Tensor& t : cpu_inputs)
        if (t.defined() && t.requires_grad()) t.zero_grad();
    engine::sum(engine::mul(out_cpu, w)).backward();
    engine::sum(engine::mul(out_cuda, w.to(Device::CUDA))).backward();
    for (size_t i = 0; i < cpu_inputs.size(); i++) {
        if (!cpu_inputs[i].defined() || !cpu_inputs[i].requires_grad()) continue;
        INFO("gradient of input " << i);
        REQUIRE(cpu_inputs[i].grad().defined());
        REQUIRE(cuda_inputs[i].grad().defined());
        REQUIRE(cuda_inputs[i].grad().device() == Device::CUDA);
        require_close(name + " backward, input " + std::to_string(i), cpu_inputs[i].grad(), cuda_inputs[i].grad(), bwd);
    }
}

// Random CPU inputs (from a fixed generator, so each test sees the same values).
inline Tensor randn(const engine::Shape& s, bool grad = true, uint64_t seed = 7) {
    engine::Generator g(seed + (uint64_t)s.numel());
    Tensor t = Tensor::empty(s);
    g.normal(t.data_f32(), t.numel(), 0.f, 1.f);
    if (grad) t.requires_grad_(true);
    return t;
}
// The root mean square of a tensor's values (0 for an empty one), on any device.
inline double rms(const Tensor& t) {
    std::vector<float> v = t.to_vector();
    double sq = 0;
    for (float e : v) sq += (double)e * e;
    return v.empty() ? 0.0 : std::sqrt(sq / (double)v.size());
}

// Scoped switches: each restores the setting it found when the scope ends (or a REQUIRE fails).
// Made without an argument they only restore, for tests that change the setting as they go.
struct PrecisionScope {  // engine/cuda/matmul.h: the GEMM precision
    engine::cuda::GemmPrecision saved = engine::cuda::gemm_precision();
    PrecisionScope() = default;
    explicit PrecisionScope(engine::cuda::GemmPrecision p) { engine::cuda::set_gemm_precision(p); }
    ~PrecisionScope() { engine::cuda::set_gemm_precision(saved); }
    PrecisionScope(const PrecisionScope&) = delete;
    PrecisionScope& operator=(const PrecisionScope&) = delete;
};
// An on/off switch of the backend (its getter and setter) for a scope.
template <bool (*Get)(), void (*Set)(bool)>
struct SwitchScope {
    bool saved = Get();
    SwitchScope() = default;
    explicit SwitchScope(bool on) { Set(on); }
    ~SwitchScope() { Set(saved); }
    SwitchScope(const SwitchScope&) = delete;
    SwitchScope& operator=(const SwitchScope&) = delete;
};
// The fused attention path; the tensor-core backward's split dq; the TF32 flash kernels'
// asynchronous copies; the narrow tensor-core forward.
using FusedAttentionScope = SwitchScope<engine::cuda::fused_attention_enabled, engine::cuda::set_fused_attention>;
using SplitDqScope = SwitchScope<engine::cuda::flash_split_dq_enabled, engine::cuda::set_flash_split_dq>;
using AsyncCopyScope = SwitchScope<engine::cuda::flash_async_enabled, engine::cuda::set_flash_async>;
using NarrowForwardScope = SwitchScope<engine::cuda::flash_narrow_forward_enabled, engine::cuda::set_flash_narrow_forward>;
// bf16 GEMMs on fp32 inputs that cuBLAS rounds itself (engine/cuda/matmul.h).
using Bf16FastGemmScope = SwitchScope<engine::cuda::bf16_fast_gemm_enabled, engine::cuda::set_bf16_fast_gemm>;
// linear's bias by cuBLASLt's epilogue (engine/cuda/matmul.h's gemm_bias).
using LtBiasScope = SwitchScope<engine::cuda::lt_bias_enabled, engine::cuda::set_lt_bias>;
// Grouped GEMM batches in one call from address arrays (engine/cuda/matmul.h).
using PointerBatchScope = SwitchScope<engine::cuda::pointer_batch_enabled, engine::cuda::set_pointer_batch>;
// gemm through cuBLASLt with autotuned algorithms (engine/cuda/matmul.h).
using GemmAutotuneScope = SwitchScope<engine::cuda::gemm_autotune_enabled, engine::cuda::set_gemm_autotune>;
// The unfused attention's edge keys (engine/cuda/nn.h).
using EdgeKeysScope = SwitchScope<engine::cuda::attention_edge_keys_enabled, engine::cuda::set_attention_edge_keys>;

inline Tensor rand_uniform(const engine::Shape& s, float lo, float hi, bool grad = true, uint64_t seed = 11) {
    engine::Generator g(seed + (uint64_t)s.numel());
    Tensor t = Tensor::empty(s);
    g.uniform(t.data_f32(), t.numel(), lo, hi);
    if (grad) t.requires_grad_(true);
    return t;
}

}  // namespace test
