// engine/cuda/runtime.h: the CUDA backend's host interface, in plain C++ (no CUDA types), so the
// engine's .cpp files can call it: device memory, copies, the stream, cuBLAS settings, memory
// statistics. Implemented in engine/cuda/runtime.cu, which nvcc compiles for a GPU and g++
// compiles against the emulator (engine/cuda/emu/) in the emulated build.
//
// One stream for the device: every kernel, copy and cuBLAS call goes on it in order, so the host
// waits only where it reads a result (copy_to_host, synchronize).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace engine::cuda {

// Throws engine::Error with the message (defined in a g++-compiled file: nvcc cannot compile fmt).
[[noreturn]] void fail(const std::string& message);

// A switch of the backend (state −1: not decided yet; 0 off; 1 on) decided from the environment at
// its first question: `name` = "0" turns off one that is on by default, "1" turns on one that is
// off. Its setter stores 0 or 1 and wins over a concurrent first question.
bool env_switch(std::atomic<int>& state, const char* name, bool by_default);

bool emulated();                   // this build runs kernels in the CPU emulator
bool available();                  // a device is there (always, in the emulated build)
std::string device_description();  // "cuda: NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)" or "cuda: emulated"
// Shared memory a block may have with the opt-in attribute: 227 KiB on an H100, 163 on an A100,
// 99 on an RTX 30/40 card. Kernels that need more have another path there (flash_attention.cu).
size_t max_shared_memory_per_block();

// Stream-ordered device memory from the device's memory pool, which keeps freed blocks (its
// release threshold is raised) so the training loop does not call the driver to allocate.
void* alloc(size_t bytes);
void free(void* p);

// host -> device, in stream order: the source is staged in pinned memory first, so the caller may
// free or change it at once, and the call does not wait for the device (runtime.cu says why;
// INITLAB_STAGED_COPY=0 makes it wait)
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);    // device -> host; waits for it
void copy_on_device(void* dst, const void* src, size_t bytes);  // device -> device
void memset_zero(void* p, size_t bytes);
void fill_f32(float* p, float value, int64_t n);
void fill_i32(int32_t* p, int32_t value, int64_t n);
void synchronize();

// Indices and targets checked on the device. A kernel cannot throw, and reading a check's answer
// back would make the host wait for the device at every embedding and loss of a training step. So
// an op with device indices launches a check (check_indices, engine/cuda/shape.h) and goes on: the
// check records the first index out of range in the record below, the kernels that use the indices
// leave such a row alone (no read or write out of bounds), and the host's next wait for the device
// (copy_to_host, synchronize) reads the record and throws the error the CPU would have thrown at the
// op, saying it was found on the device. A captured step's checks write the same record.
enum class IndexOp : int32_t { none = 0, index_select, gather, embedding, cross_entropy };
struct BadIndex {
    // min over the bad positions i of i·2³² + (uint32) index: the first bad position, its index
    unsigned long long first = ~0ull;
    uint32_t check = 0;  // the launch of the check that owns the record (0: none yet)
    int32_t op = 0;      // IndexOp
    int64_t bound = 0;   // the valid indices are [0, bound)
    int32_t skip = 0;    // an index that is not checked (cross_entropy's ignore_index), when has_skip
    int32_t has_skip = 0;
};
BadIndex* bad_index_record();   // device memory, the same address for the whole run
uint32_t next_index_check();    // a new number for a check launch (never 0)

// Device memory handed out by alloc() and not freed yet, and its peak since the last reset.
size_t memory_in_use();
size_t peak_memory();
void reset_peak_memory();

// Timing marks for the profiler (engine/profile.cpp): record_mark() records an event on the stream
// and returns its index; mark_elapsed_ms(a, b) waits for mark b and gives the device time from
// mark a to mark b; clear_marks() lets the events be recorded again (they are kept, not freed).
int record_mark();
double mark_elapsed_ms(int a, int b);
void clear_marks();

// CUDA graphs: the work put on the stream between begin_capture() and end_capture() is recorded,
// not run (kernels, copies, memsets and cuBLAS calls, their arguments frozen by value), and
// CudaGraph::launch() replays it. Nothing may wait for the device during the capture: a copy to
// the host, synchronize() or a profiler mark's time throws engine::Error naming the call, and the
// capture is lost. Device memory allocated during the capture belongs to the graph at addresses
// fixed for its life; memory the graph allocates and does not free must be freed before the next
// launch (the launch fails otherwise), and memory allocated before the capture and freed in it is
// freed by the first launch (the second fails): a captured step keeps its tensors across steps.
class CudaGraph {
public:
    CudaGraph() = default;
    CudaGraph(CudaGraph&& other) noexcept;
    CudaGraph& operator=(CudaGraph&& other) noexcept;
    CudaGraph(const CudaGraph&) = delete;
    CudaGraph& operator=(const CudaGraph&) = delete;
    ~CudaGraph();

    bool empty() const { return exec_ == nullptr; }
    void launch() const;  // on the stream, in order after the work before it; does not wait

private:
    friend CudaGraph end_capture();
    void* graph_ = nullptr;  // cudaGraph_t
    void* exec_ = nullptr;   // cudaGraphExec_t
};

void begin_capture();      // one capture at a time
CudaGraph end_capture();   // throws engine::Error if the capture was invalidated
void abort_capture();      // ends a capture that failed, dropping what it recorded
bool capturing();
// begin_capture(), work(), end_capture(); if work throws, the capture is aborted and the error
// passed on.
CudaGraph capture(const std::function<void()>& work);

// Random draws in a captured step: while a shift is set, the kernels that draw from the global
// generator's Philox stream add *shift (a device uint64) to the first block the host reserved, so
// that each launch of the graph draws the blocks the host reserves for it (nn/graph_step.h).
void set_rng_shift(const uint64_t* device_shift);  // null: no shift
const uint64_t* rng_shift();

// cuBLAS math mode: TF32 tensor-core math for fp32 GEMMs (--precision tf32) or full fp32.
void set_tf32(bool on);
bool tf32();

}  // namespace engine::cuda
