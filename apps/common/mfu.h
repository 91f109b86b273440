// apps/common/mfu.h: model FLOPs utilization (MFU) for the apps' log lines: the GEMM FLOPs a step
// ran (counted by the engine, engine/profile.h gemm_flops_total) over the step's time, as a share
// of the device's peak for the precision in use. GPUs: dense tensor-core or FP32 peaks from
// NVIDIA's datasheets for the models listed in mfu.cpp (an unlisted GPU, or the emulator, gets no
// MFU). CPU: the rate of a 1024³ OpenBLAS sgemm measured once on the run's threads, so 100 %
// means "as fast as one big sgemm", the most a GEMM-bound step can do here.
#pragma once
#include <string>
#include "apps/common/run.h"

namespace apps {

struct Peak {
    double flops_per_s = 0;  // 0: unknown
    std::string source;      // "NVIDIA H100 SXM, tf32 dense (datasheet)", "sgemm 1024^3 on 2 threads (measured)"
};
// Measured or looked up once per process (the CPU measurement takes ~0.1 s).
const Peak& peak_flops(engine::Device dev, const std::string& precision);

// The GEMM FLOPs since begin(); add_to() puts "gflop" (per step) and "mfu" (0..1) into a metrics
// line for a step of `ms` milliseconds.
class StepFlops {
public:
    StepFlops(engine::Device dev, std::string precision) : dev_(dev), precision_(std::move(precision)) {}
    void begin();
    void add_to(json& line, double ms) const;

private:
    engine::Device dev_;
    std::string precision_;
    double start_ = 0;
};

}  // namespace apps
