// apps/common/mfu.cpp: peaks and the per-step FLOPs behind the MFU figure (apps/common/mfu.h).
#include "apps/common/mfu.h"

#include <fmt/format.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <vector>
#include "engine/cpu/matmul.h"
#include "engine/profile.h"
#ifdef ENGINE_CUDA
#include "engine/cuda/runtime.h"
#endif

namespace apps {

namespace {

// Dense peaks in TFLOP/s (no 2:4 sparsity), from NVIDIA's datasheets: FP32 on the CUDA cores, TF32
// and BF16 on the tensor cores. The H100/H200 datasheets print the tensor-core figures with
// sparsity (H100 SXM and H200 SXM: BF16 1,979; H100 PCIe: BF16 1,513), so the dense ones are half;
// the A100 datasheet prints BF16 312 dense (624 with sparsity).
struct GpuPeak {
    const char* name_has;
    const char* label;
    double fp32, tf32, bf16;
};
const GpuPeak kGpus[] = {
    {"H100 PCIe", "NVIDIA H100 PCIe", 51.2, 378, 756.5},
    {"H100", "NVIDIA H100 SXM", 66.9, 494.7, 989.4},
    {"H200", "NVIDIA H200 SXM", 66.9, 494.7, 989.4},
    {"A100", "NVIDIA A100", 19.5, 156, 312},
};

Peak measure_cpu_sgemm() {
    const int n = 1024;
    std::vector<float> a((size_t)n * n, 0.5f), b((size_t)n * n, 0.25f), c((size_t)n * n);
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        auto t0 = std::chrono::steady_clock::now();
        engine::cpu::gemm(false, false, n, n, n, 1.f, a.data(), b.data(), 0.f, c.data());
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (s > 0) best = std::max(best, 2.0 * n * n * n / s);
    }
    return {best, fmt::format("sgemm {}^3 on {} threads (measured)", n, omp_get_max_threads())};
}

Peak lookup(engine::Device dev, const std::string& precision) {
    if (dev == engine::Device::CPU) return measure_cpu_sgemm();
#ifdef ENGINE_CUDA
    std::string name = engine::cuda::device_description();
    for (const GpuPeak& g : kGpus)
        if (name.find(g.name_has) != std::string::npos) {
            if (precision == "bf16") return {g.bf16 * 1e12, fmt::format("{}, bf16 dense (datasheet)", g.label)};
            if (precision == "tf32") return {g.tf32 * 1e12, fmt::format("{}, tf32 dense (datasheet)", g.label)};
            return {g.fp32 * 1e12, fmt::format("{}, fp32 dense (datasheet)", g.label)};
        }
#endif
    return {0, "unknown device: no MFU"};
}

}  // namespace

const Peak& peak_flops(engine::Device dev, const std::string& precision) {
    static std::map<std::pair<int, std::string>, Peak> cache;
    auto key = std::make_pair((int)dev, precision);
    auto it = cache.find(key);
    if (it == cache.end()) {
        it = cache.emplace(key, lookup(dev, precision)).first;
        std::fprintf(stderr, "mfu: against %s, %.3g TFLOP/s\n", it->second.source.c_str(),
                     it->second.flops_per_s / 1e12);
    }
    return it->second;
}

void StepFlops::begin() { start_ = engine::profile::gemm_flops_total(); }

void StepFlops::add_to(json& line, double ms) const {
    // Read before peak_flops(): its first call runs the CPU measurement's own GEMMs.
    double flops = engine::profile::gemm_flops_total() - start_;
    line["gflop"] = flops / 1e9;
    const Peak& peak = peak_flops(dev_, precision_);
    if (peak.flops_per_s > 0 && ms > 0) line["mfu"] = flops / (ms / 1000.0) / peak.flops_per_s;
}

}  // namespace apps
