// engine/cuda/emu/include/cuda_runtime.h: the CUDA emulator's stand-in for <cuda_runtime.h>.
//
// The emulated build (make emu) compiles engine/cuda/*.cu with g++ and puts this folder first on
// the include path, so `#include <cuda_runtime.h>` lands here. It offers what the project's kernels
// use and nothing more: the execution-space keywords, dim3 and the thread-index variables, block
// barriers, warp shuffles and votes, atomics, a few math intrinsics, and the runtime calls
// (memory, copies, streams, events, errors, device properties). Kernels run on the CPU, thread by
// thread, scheduled by engine/cuda/emu/emu.cpp, which also checks what a GPU would punish:
// launch limits, barriers not reached by every live thread (or a block's threads waiting at two
// different __syncthreads()), warp ops with absent or exited lanes, copies that
// mix host and device pointers, reads of memory never written (fresh allocations and shared
// memory are filled with a NaN pattern, 0x7FBADBAD, also a huge int32).
//
// It is a test instrument: the nvcc build never sees it.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <source_location>
#include <stdexcept>
#include <string>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 { unsigned x, y, z; };
struct alignas(16) float4 { float x, y, z, w; };  // CUDA's vector type: 16-byte loads and stores
struct alignas(8) uint2 { unsigned x, y; };         // 8-byte loads and stores

struct CUstream_st;
typedef CUstream_st* cudaStream_t;

// ---------------------------------------------------------------------------------------------
// The emulator's interface (engine/cuda/emu/emu.cpp).

namespace emu {

// What the emulator detected (bad launch, deadlock, divergent warp op, bad copy): thrown out of
// the launch or the runtime call, with the kernel's or the call's name.
struct Error : std::runtime_error { using std::runtime_error::runtime_error; };

struct ThreadState {
    uint3 thread_idx{0, 0, 0}, block_idx{0, 0, 0};
    dim3 block_dim, grid_dim;
};
ThreadState& self();  // the emulated thread now running

// Run `body` (one call = one CUDA thread) over the grid. `kernel` identifies the kernel for the
// shared-memory opt-in and the barrier cache; `name` is used in every error message. The launch
// configuration is checked at once, and `check_args` (if given: the launch helper's
// check_kernel_args) before the run; while `stream` is being captured into a graph the run is
// recorded (with `body`, whose arguments it holds by value) instead of done, and each graph launch
// checks the arguments again before running it.
void launch(const char* name, const void* kernel, dim3 grid, dim3 block, size_t dynamic_smem,
            const std::function<void()>& body, cudaStream_t stream,
            const std::function<void()>& check_args = nullptr);


// Block-shared memory: the same pointer for every thread of the block, filled with the NaN
// pattern when the block starts. `site` identifies the declaration (one per SHARED_ARRAY).
void* shared_array(const void* site, size_t bytes);
void* dynamic_shared();

// `file`/`line`: the __syncthreads() call; threads waiting at two different ones are an error (a
// barrier in a branch not every thread takes: a hang or a silent mix-up on a GPU).
void syncthreads(const char* file, unsigned line);
// One warp-wide exchange: every lane in `mask` deposits `value` and reads the value deposited by
// lane `src_lane` (its own if that lane is outside the width segment); kind names the op for errors.
uint64_t warp_exchange(const char* kind, unsigned mask, uint64_t value, int src_lane);
unsigned warp_ballot(const char* kind, unsigned mask, bool pred);
// A warp-collective op (the WMMA stand-in, include/mma.h): the calling lane deposits `arg` and
// waits until all 32 lanes of its warp are at the same op (`kind`); then `run` is called once, on
// the scheduler's side while every lane is parked, with the 32 lanes' args (in lane order), and
// does the op for the whole warp at once. A non-empty string it returns is an error (reported with
// the kernel's name and the thread). Lanes at a different op, exited or missing are reported as
// for the shuffles.
using WarpCollective = std::string (*)(void* const* args);
void warp_collective(const char* kind, void* arg, WarpCollective run);

constexpr uint32_t kPoison = 0x7FBADBADu;  // a NaN as float32, 2142952365 as int32
void fill_poison(void* p, size_t bytes);

// Seed of the thread and block orders (also from INITLAB_EMU_SEED).
void set_seed(uint64_t seed);
// The device's shared memory per block with the opt-in attribute (227 KiB, an H100's), as
// cudaDeviceGetAttribute and cudaGetDeviceProperties report it and launches enforce it: a test sets
// an RTX 30/40 card's 99 KiB. Returns the previous limit.
size_t set_optin_shared_limit(size_t bytes);
// Launches, emulated threads and fiber switches since the start (for tests and timing notes), and
// host waits: the calls that make the host wait until the stream's queued work is done
// (cudaStreamSynchronize, cudaDeviceSynchronize, a synchronous cudaMemcpy), which on a GPU keep
// the host from queueing the next kernels while the device runs (a test counts a step's).
struct Counters { uint64_t launches, threads, switches, host_waits; };
Counters counters();
// INITLAB_EMU_TRACE=FILE: one line per kernel launch and GEMM run, as they run (a replayed graph's
// too): `kernel NAME grid=(x,y,z) block=(x,y,z) shared=BYTES` and `gemm CALL ...` (cublas_v2.h's
// census), for counting what a step launches without a GPU (docs/BENCHMARKS.md).
bool tracing();
void trace(const std::string& line);
// The context switch between fibers: "asm" (x86-64) or "ucontext" (elsewhere, under ASan, or with
// INITLAB_EMU_UCONTEXT=1). set_ucontext(true) picks ucontext between launches (for tests); false
// goes back to asm where it is available. Returns the switch now in use.
const char* context_switch();
const char* set_ucontext(bool on);

}  // namespace emu

#define threadIdx (::emu::self().thread_idx)
#define blockIdx (::emu::self().block_idx)
#define blockDim (::emu::self().block_dim)
#define gridDim (::emu::self().grid_dim)
constexpr int warpSize = 32;

// ---------------------------------------------------------------------------------------------
// Synchronisation, warp ops, atomics.

inline void __syncthreads(std::source_location where = std::source_location::current()) {
    emu::syncthreads(where.file_name(), where.line());
}

inline int __lane_id_emu() {
    const emu::ThreadState& s = emu::self();
    unsigned linear = s.thread_idx.x + s.block_dim.x * (s.thread_idx.y + s.block_dim.y * s.thread_idx.z);
    return (int)(linear % 32);
}

template <typename T>
inline T __emu_from_bits(uint64_t bits) {
    static_assert(sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
    T v;
    std::memcpy(&v, &bits, sizeof(T));
    return v;
}
template <typename T>
inline uint64_t __emu_to_bits(T v) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    return bits;
}

// Lane l of a width-w segment reads lane (l ^ laneMask) of the same segment (own value if outside).
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int laneMask, int width = warpSize) {
    int lane = __lane_id_emu(), base = lane / width * width, src = lane ^ laneMask;
    if (src < base || src >= base + width) src = lane;
    return __emu_from_bits<T>(emu::warp_exchange("__shfl_xor_sync", mask, __emu_to_bits(v), src));
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
    int lane = __lane_id_emu(), base = lane / width * width, src = lane + (int)delta;
    if (src >= base + width) src = lane;
    return __emu_from_bits<T>(emu::warp_exchange("__shfl_down_sync", mask, __emu_to_bits(v), src));
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
    int lane = __lane_id_emu(), base = lane / width * width, src = lane - (int)delta;
    if (src < base) src = lane;
    return __emu_from_bits<T>(emu::warp_exchange("__shfl_up_sync", mask, __emu_to_bits(v), src));
}
template <typename T>
inline T __shfl_sync(unsigned mask, T v, int srcLane, int width = warpSize) {
    int lane = __lane_id_emu(), base = lane / width * width, src = base + ((srcLane % width) + width) % width;
    return __emu_from_bits<T>(emu::warp_exchange("__shfl_sync", mask, __emu_to_bits(v), src));
}
inline unsigned __ballot_sync(unsigned mask, int pred) { return emu::warp_ballot("__ballot_sync", mask, pred != 0); }
inline int __all_sync(unsigned mask, int pred) { return (emu::warp_ballot("__all_sync", mask, pred != 0) & mask) == mask; }
inline int __any_sync(unsigned mask, int pred) { return emu::warp_ballot("__any_sync", mask, pred != 0) != 0; }
inline void __syncwarp(unsigned mask = 0xffffffffu) { (void)emu::warp_ballot("__syncwarp", mask, true); }

// Blocks of one launch run one after another on one host thread and the threads of a block are
// fibers of that thread, so a plain read-modify-write is atomic here; the functions keep CUDA's
// contract (return the old value).
inline float atomicAdd(float* p, float v) { float old = *p; *p = old + v; return old; }
inline double atomicAdd(double* p, double v) { double old = *p; *p = old + v; return old; }
inline int atomicAdd(int* p, int v) { int old = *p; *p = old + v; return old; }
inline unsigned atomicAdd(unsigned* p, unsigned v) { unsigned old = *p; *p = old + v; return old; }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    unsigned long long old = *p; *p = old + v; return old;
}
inline int atomicMax(int* p, int v) { int old = *p; *p = old > v ? old : v; return old; }
inline int atomicMin(int* p, int v) { int old = *p; *p = old < v ? old : v; return old; }
inline unsigned long long atomicMin(unsigned long long* p, unsigned long long v) {
    unsigned long long old = *p; *p = old < v ? old : v; return old;
}
inline int atomicCAS(int* p, int compare, int v) { int old = *p; if (old == compare) *p = v; return old; }
inline unsigned atomicCAS(unsigned* p, unsigned compare, unsigned v) { unsigned old = *p; if (old == compare) *p = v; return old; }
inline int atomicExch(int* p, int v) { int old = *p; *p = v; return old; }

// ---------------------------------------------------------------------------------------------
// Math intrinsics (the fast versions are the accurate ones here; tolerances cover the difference).

inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanhf(float x) { return tanhf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float rsqrtf(float x) { return 1.f / sqrtf(x); }
inline void sincosf_emu(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
template <typename T> inline T __ldg(const T* p) { return *p; }

// ---------------------------------------------------------------------------------------------
// Runtime API: errors, devices, memory, streams, events.

enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorIllegalState = 401,
    cudaErrorLaunchFailure = 719,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureImplicit = 906,
};
typedef cudaError cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold = 4 };
enum { cudaStreamDefault = 0, cudaStreamNonBlocking = 1 };

struct CUevent_st;
struct CUmemPoolHandle_st;
typedef CUevent_st* cudaEvent_t;
typedef CUmemPoolHandle_st* cudaMemPool_t;

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    size_t sharedMemPerBlockOptin;
    int regsPerBlock;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int multiProcessorCount;
    int major, minor;
};

const char* cudaGetErrorString(cudaError_t e);
const char* cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();

cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaGetDevice(int* d);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);  // the one attribute above
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attr, int value);
template <typename... A>
cudaError_t cudaFuncSetAttribute(void (*kernel)(A...), cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute((const void*)kernel, attr, value);
}

cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t s);
cudaError_t cudaFreeAsync(void* p, cudaStream_t s);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s = nullptr);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s = nullptr);

// Pinned host memory. An asynchronous copy from it is checked: the host may not write the
// buffer before a wait says the copy is done (emu.cpp, "Pinned host memory").
constexpr unsigned cudaHostAllocDefault = 0;
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned flags);
cudaError_t cudaMallocHost(void** p, size_t bytes);
cudaError_t cudaFreeHost(void* p);

cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);

cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

// Stream capture and graphs (CUDA 12 signatures). While a stream is captured nothing runs:
// kernel launches, async copies and memsets, and the cuBLAS stand-ins' GEMMs are recorded in
// order; cudaMallocAsync hands out memory the graph owns at an address fixed for the graph's life
// (an allocation node, which fills it with the poison pattern again at each launch) and
// cudaFreeAsync becomes a free node. Waiting for the stream (cudaStreamSynchronize,
// cudaDeviceSynchronize, cudaEventSynchronize) or a legacy synchronous call (cudaMemcpy,
// cudaMemset, cudaMalloc, cudaFree) from the capturing thread fails with
// cudaErrorStreamCaptureUnsupported and invalidates the capture, as on a GPU: every later call on
// the stream and cudaStreamEndCapture then fail with cudaErrorStreamCaptureInvalidated.
// cudaGraphLaunch runs the recorded sequence in order; it fails with cudaErrorInvalidValue while an
// allocation of an earlier launch is still live (not freed in the graph nor after it).
enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2,
};
enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2,
};
struct CUgraph_st;
struct CUgraphExec_st;
typedef CUgraph_st* cudaGraph_t;
typedef CUgraphExec_st* cudaGraphExec_t;

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);

namespace emu {
// Nodes recorded in a graph (for tests: "nothing ran during capture, it was recorded").
size_t graph_node_count(cudaGraph_t graph);
// Work that a library puts on a stream (the cuBLAS and cuDNN stand-ins): done now, or recorded while
// `stream` is being captured (`work` must hold its arguments by value). Returns
// cudaErrorStreamCaptureInvalidated, doing nothing, on a stream whose capture was invalidated.
cudaError_t on_stream(cudaStream_t stream, const char* what, std::function<void()> work);
}  // namespace emu

// Is p inside a live emulated device allocation? (The emulator's own bookkeeping, for tests.)
namespace emu {
bool is_device_pointer(const void* p);
size_t live_device_bytes();

// A kernel's pointer arguments must be device memory (or null, or one past the end of an
// allocation): a kernel dereferencing a host pointer faults on a GPU (illegal address) but would
// quietly work here. check_kernel_args(name, args...) checks every object-pointer argument and
// throws emu::Error naming the kernel and the argument; the launch helper calls it.
void check_kernel_pointer(const char* kernel, int index, const void* p);
template <typename... A>
void check_kernel_args(const char* kernel, const A&... args) {
    int index = 0;
    (
        [&] {
            if constexpr (std::is_pointer_v<A> && std::is_object_v<std::remove_pointer_t<A>>)
                check_kernel_pointer(kernel, index, (const void*)args);
            index++;
        }(),
        ...);
}
}  // namespace emu
