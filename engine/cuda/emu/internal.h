// engine/cuda/emu/internal.h: what the emulator's own files (emu.cpp, graph.cpp) share; not part
// of the emulated CUDA API (include/cuda_runtime.h).
#pragma once
#include "cuda_runtime.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

namespace emu {

[[noreturn]] void fail(const std::string& msg);  // throws emu::Error("CUDA emulator: " + msg)
cudaError_t set_error(cudaError_t e);            // becomes the thread's last error; returns e
std::string hex(const void* p);

// Device memory bookkeeping (emu.cpp): the map of live allocations that copies, kernels' pointer
// arguments and frees are checked against.
void add_allocation(void* p, size_t bytes);
bool remove_allocation(void* p);  // false: p is not the start of a live allocation
bool is_live_allocation(const void* p);
void check_copy(const char* call, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);

// Copies from pinned host memory (emu.cpp, "Pinned host memory"): a host-to-device copy is noted
// with what it sent (nothing for a pageable source); an event's record takes the next position in
// the stream; a wait settles the copies before a position, failing if the host wrote one's source.
void note_copy_from_host(const void* src, size_t bytes);
uint64_t stream_position();
void settle_copies(uint64_t until, const char* wait);

// Stream capture (graph.cpp).
enum class Capture { none, recording, invalidated };
// The state of a capture on `s` (any thread may add work to a captured stream).
Capture capture_on(cudaStream_t s);
// Appends work to the graph being captured (capture_on(...) == recording).
void record(std::string what, std::function<void()> run);
// A call that waits for the device or is synchronous (`s` null: a legacy call, refused only on
// the capturing thread): cudaSuccess outside a capture, else the capture is invalidated and the
// call fails with cudaErrorStreamCaptureUnsupported (cudaErrorStreamCaptureInvalidated if it
// already was).
cudaError_t refuse_during_capture(const char* call, cudaStream_t s);
// cudaMallocAsync / cudaFreeAsync on a captured stream: a graph allocation node / a free node.
void* graph_alloc(size_t bytes);
void graph_free(void* p);
// The memory belongs to a graph: cudaFree ends its life as an allocation but does not release it.
bool graph_owned(const void* p);

// Round to TF32: keep 10 mantissa bits, round to nearest even (what the tensor cores read); the
// cuBLAS and cuDNN stand-ins' TF32 math.
inline float to_tf32(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return x;  // inf, nan
    u += 0xfffu + ((u >> 13) & 1u);
    u &= 0xffffe000u;
    std::memcpy(&x, &u, 4);
    return x;
}

}  // namespace emu
