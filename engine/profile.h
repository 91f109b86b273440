// engine/profile.h: the op-level profiler behind --profile (apps/bench, train_vit, train_lm).
//
// It charges every moment of a training step to one label. The step is cut at *boundaries*: each
// op's attach() (engine/autograd.cpp) is the end of that op's forward, each backward closure's
// return is the end of that op's backward, and the apps mark the rest ("zero_grad", "optimizer",
// ...). The time since the previous boundary goes to the label of the boundary that ends it, so
// the labels of a step add up to the whole step: nothing is lost between ops, and what an op
// costs includes its argument checks and allocations as well as its kernel.
//
// Time: on the CPU a steady clock at each boundary. On CUDA an event recorded on the stream at each
// boundary (engine/cuda/runtime.h: record_mark); step_end() waits for the device and charges each
// interval with the device time between its two events, so an op is charged for its kernels, not
// for the host's asynchronous launches.
//
// Work: GEMMs report their FLOPs (note_flops, from engine/cpu/matmul.cpp and cuda/matmul.cu) and
// they go to the op whose interval holds them; bytes are the sizes of the tensors an op reads and
// writes (inputs and output forward; upstream gradient, inputs and input gradients backward): a
// lower bound of its memory traffic, which is what GB/s is computed from.
//
// Off by default; while off every hook is one relaxed atomic load. Only the thread that called
// start() is profiled (data-loader threads are not); FLOPs are counted from any thread (the CPU
// convolution runs GEMMs inside OpenMP loops).
#pragma once
#include <atomic>
#include <string>
#include <vector>
#include "engine/tensor.h"

namespace engine::profile {

enum class Phase { Forward, Backward, Outside };
const char* phase_name(Phase p);  // "forward", "backward", "outside ops"

struct Entry {
    std::string name;  // the op's name (as attach() gives it) or the app's label
    Phase phase;
    int64_t calls = 0;
    double ms = 0;      // summed over the profiled steps
    double flops = 0;   // GEMM floating-point operations (multiply and add counted apart)
    double bytes = 0;   // tensor bytes read and written
};

struct Report {
    std::vector<Entry> entries;  // sorted by time, longest first
    int64_t steps = 0;
    double step_ms = 0;          // the steps' own duration (host wall clock, device synchronized)
    double charged_ms() const;   // the sum of the entries: equals step_ms up to the clocks' difference
    Device device = Device::CPU;
};

namespace detail {
extern std::atomic<bool> g_active;
}
inline bool active() { return detail::g_active.load(std::memory_order_relaxed); }

// Starts collecting (clears what was collected); `device` is where the model runs. Only steps
// between step_begin() and step_end() are profiled.
void start(Device device);
Report stop();

void step_begin();
void step_end();  // charges the rest of the step to "step end (sync)"; CUDA: waits for the device

// The hooks. boundary() charges the interval that ends now to (name, phase).
void boundary(const char* name, Phase phase, double bytes = 0);
void note_flops(double flops);

// Every GEMM FLOP since the process started, profiler on or off (one relaxed atomic add per GEMM):
// the apps' model-FLOPs-utilization figure takes a step's share of it.
double gemm_flops_total();

// Ops that run inside a backward closure (matmul's backward calls matmul) are part of that
// closure's interval: their attach() boundaries are suppressed while this scope lives.
struct InBackwardClosure {
    InBackwardClosure();
    ~InBackwardClosure();
    InBackwardClosure(const InBackwardClosure&) = delete;
    InBackwardClosure& operator=(const InBackwardClosure&) = delete;
};
bool in_backward_closure();

}  // namespace engine::profile
