// engine/cuda/kernel.h: what every engine/cuda/*.cu file includes: the CUDA runtime, the stream,
// error checks, and the launch helper and shared-memory macros that let one kernel source build
// with nvcc (for a GPU) and with g++ (against the emulator, engine/cuda/emu/).
//
// Launch a kernel with
//     KERNEL_LAUNCH(softmax_kernel, grid, block, shared_bytes, x, y, rows, n);
// never with <<<...>>> directly: under nvcc it is the usual launch on the backend's stream followed
// by a check; under the emulator it runs the kernel on the CPU with the emulator's checks. Either
// way a failure throws engine::Error naming the kernel and its grid and block.
//
// Shared memory: declare it at the top of a kernel with
//     SHARED_ARRAY(float, partial, 32);     // __shared__ float partial[32];
//     DYNAMIC_SHARED(float, tile);          // extern __shared__ float tile[];  (size at launch)
// (the emulator hands every thread of a block the same buffer, filled with NaNs at block start).
#pragma once
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <tuple>
#include "engine/cuda/runtime.h"

namespace engine::cuda {

cudaStream_t stream();

std::string launch_config(dim3 grid, dim3 block, size_t smem);
// Throws engine::Error: "<what>: <CUDA error name>: <CUDA error string>".
[[noreturn]] void fail_cuda(const std::string& what, cudaError_t e);
inline void check_cuda(cudaError_t e, const char* what) {
    if (e != cudaSuccess) fail_cuda(what, e);
}
// After a launch: the launch error, and with INITLAB_CUDA_SYNC=1 the kernel's own (waits for it).
void check_launch(const char* name, dim3 grid, dim3 block, size_t smem);

#ifdef ENGINE_CUDA_EMU
// check_args: the emulator's check that the kernel's pointer arguments are device memory, run
// before the launch and again before each graph launch that replays it (the memory may be gone).
void emulated_launch(const char* name, const void* kernel, dim3 grid, dim3 block, size_t smem,
                     const std::function<void()>& body, const std::function<void()>& check_args);
#endif

template <typename... KArgs, typename... Args>
void launch(const char* name, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, Args... args) {
    static_assert(sizeof...(KArgs) == sizeof...(Args), "launch: wrong number of kernel arguments");
#ifdef ENGINE_CUDA_EMU
    emulated_launch(name, (const void*)kernel, grid, block, smem, [=] { kernel(static_cast<KArgs>(args)...); },
                    [=] { emu::check_kernel_args(name, static_cast<KArgs>(args)...); });
#else
    // Arguments converted to the kernel's exact parameter types, then passed by address.
    std::tuple<KArgs...> converted{static_cast<KArgs>(args)...};
    auto argv = std::apply([](auto&... a) { return std::array<void*, sizeof...(KArgs)>{(void*)&a...}; }, converted);
    cudaError_t e = cudaLaunchKernel((const void*)kernel, grid, block, argv.data(), smem, stream());
    if (e != cudaSuccess) fail_cuda(std::string("kernel ") + name + " " + launch_config(grid, block, smem), e);
    check_launch(name, grid, block, smem);
#endif
}

// Threads per block for elementwise kernels, and the number of blocks covering n elements
// (capped: the kernels loop with a grid stride beyond it).
// A warp's width, and the mask naming all of its lanes for the __*_sync intrinsics.
constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

// Whether n floats at each pointer can be moved as float4s: n a multiple of 4, every pointer 16-byte
// aligned (a null one is). The flat kernels then take their float4 twins: a quarter of the loads,
// stores and index computations, the same math element by element.
inline bool float4_ok(int64_t n, std::initializer_list<const void*> pointers) {
    uintptr_t bits = 0;
    for (const void* p : pointers) bits |= reinterpret_cast<uintptr_t>(p);
    return n % 4 == 0 && bits % 16 == 0;
}

// Device scratch freed on scope exit (stream-ordered, so after the kernels queued before it).
template <typename T = float>
struct Scratch {
    T* p = nullptr;
    explicit Scratch(int64_t count) {
        if (count > 0) p = static_cast<T*>(alloc(sizeof(T) * (size_t)count));
    }
    ~Scratch() {
        if (p) free(p);
    }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
};

constexpr int kBlockSize = 256;
inline unsigned blocks_for(int64_t n, int threads = kBlockSize) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    return (unsigned)(b < 65536 * 8 ? b : 65536 * 8);
}

}  // namespace engine::cuda

#define KERNEL_LAUNCH(kernel, grid, block, smem, ...) ::engine::cuda::launch(#kernel, kernel, grid, block, smem, __VA_ARGS__)

#ifdef ENGINE_CUDA_EMU
#define SHARED_ARRAY(T, name, n) \
    T* name = static_cast<T*>(::emu::shared_array([] { static const char site = 0; return (const void*)&site; }(), sizeof(T) * (n)))
#define DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::emu::dynamic_shared())
#else
#define SHARED_ARRAY(T, name, n) __shared__ T name[n]
#define DYNAMIC_SHARED(T, name)                               \
    extern __shared__ __align__(16) unsigned char name##_raw[]; \
    T* name = reinterpret_cast<T*>(name##_raw)
#endif

// `UNROLL for (...)`: a fully unrolled loop over a small fixed-size array, which nvcc then keeps in
// registers (indexed by constants) instead of local memory. g++ (the emulated build) does not know
// the pragma and would warn.
#ifdef __CUDACC__
#define UNROLL _Pragma("unroll")
#else
#define UNROLL
#endif

// A grid-stride loop over [0, n) with 64-bit indices (tensors may pass 2^31 elements).
#define GRID_STRIDE_LOOP(i, n)                                                                     \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (int64_t)(n); \
         i += (int64_t)blockDim.x * gridDim.x)
