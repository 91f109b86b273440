// tests/cuda/test_cuda_emulator.cpp: the CUDA emulator (engine/cuda/emu/) catches what a GPU
// punishes. Each test plants one bug a GPU would punish (a launch it refuses, a missing or
// divergent barrier, a warp op with an absent lane, a read of memory never written, a copy in the
// wrong direction, a bad cuBLAS argument) and checks that the emulator reports it, naming the
// kernel; and the correct versions (warp-shuffle reductions, ballots, atomics, shared memory,
// the thread indices of a 3-D grid) give the right answers.
//
// Only in the emulated build (make emu): the kernels here are compiled by g++ against the
// emulator; in the nvcc build this file is empty.
//
// Out-of-bounds accesses are AddressSanitizer's job (make emu-sanitize): the [asan] tests at the
// end run only in that build, and the hidden one writes one past the end of a device buffer on
// purpose, so that ASan aborts with a heap-buffer-overflow report naming the kernel's line:
//     make emu-sanitize BUILD_ROOT=build/x   (builds, then runs the [cuda] suite under ASan)
//     ASAN_OPTIONS=detect_leaks=0 build/x/emu-sanitize/tests/run_tests "[.oob]"
// (The hidden tests carry no [cuda] tag: Catch2 runs a hidden test whenever a tag filter names one
// of its tags, and "[cuda]" must not run them.) The emulator's cost per thread and per fiber
// switch: build/x/emu/tests/run_tests "[.emubench]".
#ifdef ENGINE_CUDA_EMU

#include <catch2/catch.hpp>
#include <cublas_v2.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>
#include "engine/cuda/kernel.h"
#include "engine/cuda/runtime.h"
#include "engine/tensor.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

using Catch::Matchers::Contains;
using engine::cuda::blocks_for;

namespace {

// A device buffer for the tests (engine::cuda::alloc: fresh memory holds the poison pattern).
template <typename T>
struct DeviceBuffer {
    T* p = nullptr;
    size_t n = 0;
    explicit DeviceBuffer(size_t n_) : p(static_cast<T*>(engine::cuda::alloc(n_ * sizeof(T)))), n(n_) {}
    explicit DeviceBuffer(const std::vector<T>& v) : DeviceBuffer(v.size()) {
        engine::cuda::copy_to_device(p, v.data(), n * sizeof(T));
    }
    ~DeviceBuffer() { engine::cuda::free(p); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    std::vector<T> host() const {
        std::vector<T> v(n);
        engine::cuda::copy_to_host(v.data(), p, n * sizeof(T));
        return v;
    }
};

// ---------------------------------------------------------------------------------------------
// Kernels. Each planted bug has a kernel of its own, so the error must name that one.

__global__ void write_index_kernel(int* out, int64_t n) {
    GRID_STRIDE_LOOP(i, n) out[i] = (int)i;
}

// Dynamic shared memory: every thread writes its slots, the block reads them back reversed.
// Tag only makes distinct kernels (the shared-memory opt-in is per kernel).
template <int Tag>
__global__ void dynamic_shared_reverse_kernel(const float* x, float* y, int per_thread) {
    DYNAMIC_SHARED(float, tile);
    int n = per_thread * (int)blockDim.x;
    for (int j = threadIdx.x; j < n; j += blockDim.x) tile[j] = x[(int64_t)blockIdx.x * n + j];
    __syncthreads();
    for (int j = threadIdx.x; j < n; j += blockDim.x) y[(int64_t)blockIdx.x * n + j] = tile[n - 1 - j];
}

// 48 KiB + 4 bytes of static shared memory: over the limit of a block.
__global__ void oversized_static_shared_kernel(float* out) {
    SHARED_ARRAY(float, big, 12289);
    big[threadIdx.x] = 1.f;
    out[threadIdx.x] = big[threadIdx.x];
}

// A block reduction in shared memory (256 threads, one block per 256 inputs). With Sync = false
// the barrier inside the tree is missing: a thread adds a neighbour's partial sum before or
// after the neighbour has updated it, depending on the order the threads run in.
template <bool Sync>
__global__ void block_sum_kernel(const float* x, float* out) {
    SHARED_ARRAY(float, partial, 256);
    unsigned t = threadIdx.x;
    partial[t] = x[blockIdx.x * 256 + t];
    __syncthreads();
    for (unsigned stride = 128; stride > 0; stride /= 2) {
        if (t < stride) partial[t] += partial[t + stride];
        if (Sync) __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = partial[0];
}

// Every thread stores one element of a shared tile, then reads an element another warp stored.
// With Barrier = false only a __syncwarp() stands between: a warp that gets past it before a slow
// warp has run reads that warp's element unwritten (flash_tc_dq_kernel's staging-tile race).
template <bool Barrier>
__global__ void read_other_warp_kernel(const float* x, float* out) {
    SHARED_ARRAY(float, tile, 128);
    unsigned t = threadIdx.x;
    tile[t] = x[blockIdx.x * 128 + t];
    if (Barrier) __syncthreads();
    else __syncwarp();
    out[blockIdx.x * 128 + t] = tile[(t + 32) % 128];
}

// __syncthreads() in a branch only half the block takes; the others go on to the next barrier.
__global__ void divergent_barrier_kernel(float* out) {
    if (threadIdx.x < 16) __syncthreads();
    __syncthreads();
    out[threadIdx.x] = 1.f;
}

// The same, but the other threads go on to a warp shuffle that needs the waiting lanes.
__global__ void barrier_vs_shuffle_kernel(float* out) {
    float v = (float)threadIdx.x;
    if (threadIdx.x < 16) __syncthreads();
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}

// Half the warp exits, the other half shuffles with a full mask naming the exited lanes.
__global__ void shuffle_exited_lane_kernel(float* out) {
    if (threadIdx.x >= 16) return;
    float v = (float)threadIdx.x;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, v, 1);
}

// A copy (the input may be memory nobody wrote).
__global__ void copy_f32_kernel(const float* x, float* y, int64_t n) {
    GRID_STRIDE_LOOP(i, n) y[i] = x[i];
}
__global__ void copy_i32_kernel(const int32_t* x, int32_t* y, int64_t n) {
    GRID_STRIDE_LOOP(i, n) y[i] = x[i];
}

// Reads its shared array before anyone wrote it (only thread 0 writes slot 0).
__global__ void uninitialized_shared_kernel(float* out) {
    SHARED_ARRAY(float, s, 64);
    if (threadIdx.x == 0) s[0] = 5.f;
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];
}

// Warp reductions both ways, a broadcast, a scan step and a ballot, one warp per 32 inputs.
__global__ void warp_ops_kernel(const float* x, float* all_sum, float* lane0_sum, float* broadcast, float* up,
                                unsigned* ballots) {
    int i = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x % 32, warp = i / 32;
    float v = x[i];
    float a = v;  // butterfly: every lane ends with the warp's sum
    for (int offset = 16; offset > 0; offset /= 2) a += __shfl_xor_sync(0xffffffffu, a, offset);
    float b = v;  // tree: lane 0 ends with the warp's sum
    for (int offset = 16; offset > 0; offset /= 2) b += __shfl_down_sync(0xffffffffu, b, offset);
    all_sum[i] = a;
    broadcast[i] = __shfl_sync(0xffffffffu, v, 7);
    up[i] = __shfl_up_sync(0xffffffffu, v, 1);
    unsigned ballot = __ballot_sync(0xffffffffu, v > 0.f);
    if (lane == 0) {
        lane0_sum[warp] = b;
        ballots[warp] = ballot;
    }
}

// Every thread of every block adds to the same counters.
__global__ void atomic_count_kernel(float* fsum, int* icount, const float* x) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(fsum, x[i]);
    atomicAdd(icount, 1);
}

// Each thread of a 3-D grid of 3-D blocks counts itself at its global linear index and records
// the dimensions it sees.
__global__ void index_cover_kernel(int* hits, int* bad_dims, dim3 want_grid, dim3 want_block) {
    uint64_t block = blockIdx.x + (uint64_t)gridDim.x * (blockIdx.y + (uint64_t)gridDim.y * blockIdx.z);
    uint64_t thread = threadIdx.x + (uint64_t)blockDim.x * (threadIdx.y + (uint64_t)blockDim.y * threadIdx.z);
    uint64_t per_block = (uint64_t)blockDim.x * blockDim.y * blockDim.z;
    atomicAdd(&hits[block * per_block + thread], 1);
    bool dims_ok = gridDim.x == want_grid.x && gridDim.y == want_grid.y && gridDim.z == want_grid.z &&
                   blockDim.x == want_block.x && blockDim.y == want_block.y && blockDim.z == want_block.z &&
                   blockIdx.x < gridDim.x && blockIdx.y < gridDim.y && blockIdx.z < gridDim.z &&
                   threadIdx.x < blockDim.x && threadIdx.y < blockDim.y && threadIdx.z < blockDim.z;
    if (!dims_ok) atomicAdd(bad_dims, 1);
}

// One barrier: each thread runs twice as a fiber (before and after it).
__global__ void one_barrier_kernel(float* out) {
    SHARED_ARRAY(float, s, 1024);
    s[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];
}

std::vector<float> small_ints(size_t n, int seed) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = (float)((int)((i * 7919 + seed * 104729) % 17) - 8);
    return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Launch configurations a GPU refuses.

TEST_CASE("emulator: launch limits a GPU enforces are errors naming the kernel", "[cuda][emulator]") {
    DeviceBuffer<int> out(4096);
    SECTION("1025 threads per block") {
        REQUIRE_THROWS_WITH(KERNEL_LAUNCH(write_index_kernel, 1, 1025, 0, out.p, (int64_t)1025),
                            Contains("write_index_kernel") && Contains("1025 threads, more than 1024"));
        REQUIRE_THROWS_WITH(KERNEL_LAUNCH(write_index_kernel, 1, dim3(32, 33), 0, out.p, (int64_t)1056),
                            Contains("write_index_kernel") && Contains("more than 1024"));
        REQUIRE_THROWS_WITH(KERNEL_LAUNCH(write_index_kernel, 1, dim3(1, 1, 65), 0, out.p, (int64_t)65),
                            Contains("write_index_kernel") && Contains("exceeds (1024,1024,64)"));
    }
    SECTION("grid.y = 65536 and grid.z = 65536") {
        REQUIRE_THROWS_WITH(KERNEL_LAUNCH(write_index_kernel, dim3(1, 65536), 32, 0, out.p, (int64_t)32),
                            Contains("write_index_kernel") && Contains("grid (1,65536,1) exceeds"));
        REQUIRE_THROWS_WITH(KERNEL_LAUNCH(write_index_kernel, dim3(1, 1, 65536), 32, 0, out.p, (int64_t)32),
                            Contains("write_index_kernel") && Contains("exceeds"));
    }
    SECTION("0 blocks or 0 threads") {
        REQUIRE_THROWS_WITH(KERNEL_LAUNCH(write_index_kernel, 0, 256, 0, out.p, (int64_t)0),
                            Contains("write_index_kernel") && Contains("empty launch"));
        REQUIRE_THROWS_WITH(KERNEL_LAUNCH(write_index_kernel, dim3(4, 0), 256, 0, out.p, (int64_t)0),
                            Contains("write_index_kernel") && Contains("empty launch"));
        REQUIRE_THROWS_WITH(KERNEL_LAUNCH(write_index_kernel, 4, 0, 0, out.p, (int64_t)0),
                            Contains("write_index_kernel") && Contains("empty launch"));
    }
    SECTION("the limits themselves are fine") {
        KERNEL_LAUNCH(write_index_kernel, 4, 1024, 0, out.p, (int64_t)4096);
        std::vector<int> h = out.host();
        for (int i = 0; i < 4096; i++) REQUIRE(h[i] == i);
        KERNEL_LAUNCH(write_index_kernel, dim3(1, 65535), 1, 0, out.p, (int64_t)1);
        REQUIRE(out.host()[0] == 0);
    }
}

TEST_CASE("emulator: over 48 KiB of shared memory needs the opt-in", "[cuda][emulator]") {
    const int threads = 128, per_thread = 98;  // 128 * 98 floats = 49 KiB
    const size_t bytes = (size_t)threads * per_thread * sizeof(float);
    REQUIRE(bytes == 49 * 1024);
    std::vector<float> x(2 * threads * per_thread);
    std::iota(x.begin(), x.end(), 0.f);
    DeviceBuffer<float> dx(x), dy(x.size());

    SECTION("49 KiB of dynamic shared memory without cudaFuncSetAttribute") {
        REQUIRE_THROWS_WITH(KERNEL_LAUNCH(dynamic_shared_reverse_kernel<0>, 2, threads, bytes, dx.p, dy.p, per_thread),
                            Contains("dynamic_shared_reverse_kernel<0>") && Contains("50176 bytes of dynamic shared") &&
                                Contains("cudaFuncSetAttribute"));
    }
    SECTION("49 KiB with the opt-in works") {
        engine::cuda::check_cuda(cudaFuncSetAttribute(dynamic_shared_reverse_kernel<1>,
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
                                 "cudaFuncSetAttribute");
        KERNEL_LAUNCH(dynamic_shared_reverse_kernel<1>, 2, threads, bytes, dx.p, dy.p, per_thread);
        std::vector<float> y = dy.host();
        const int n = threads * per_thread;
        for (int b = 0; b < 2; b++)
            for (int j = 0; j < n; j++) REQUIRE(y[b * n + j] == x[b * n + n - 1 - j]);
        // More than the opt-in allows is still an error.
        REQUIRE_THROWS_WITH(KERNEL_LAUNCH(dynamic_shared_reverse_kernel<1>, 2, threads, bytes + 4, dx.p, dy.p, per_thread),
                            Contains("dynamic_shared_reverse_kernel<1>") && Contains("more than the 50176 allowed"));
    }
    SECTION("static shared arrays over 48 KiB") {
        DeviceBuffer<float> out(32);
        REQUIRE_THROWS_WITH(KERNEL_LAUNCH(oversized_static_shared_kernel, 1, 32, 0, out.p),
                            Contains("oversized_static_shared_kernel") && Contains("49156 bytes of shared memory") &&
                                Contains("more than the 49152 allowed"));
    }
    SECTION("static + dynamic together over 48 KiB") {
        DeviceBuffer<float> out(1024);
        // one_barrier_kernel has 4 KiB of static shared memory; 45 KiB dynamic on top is too much.
        REQUIRE_THROWS_WITH(KERNEL_LAUNCH(one_barrier_kernel, 1, 32, 45 * 1024, out.p),
                            Contains("one_barrier_kernel") && Contains("(static + dynamic)"));
    }
}

TEST_CASE("emulator: dynamic shared memory works", "[cuda][emulator]") {
    for (int threads : {32, 96, 256}) {
        const int per_thread = 3, n = threads * per_thread, blocks = 5;
        std::vector<float> x = small_ints((size_t)blocks * n, threads);
        DeviceBuffer<float> dx(x), dy(x.size());
        KERNEL_LAUNCH(dynamic_shared_reverse_kernel<2>, blocks, threads, n * sizeof(float), dx.p, dy.p, per_thread);
        std::vector<float> y = dy.host();
        for (int b = 0; b < blocks; b++)
            for (int j = 0; j < n; j++) REQUIRE(y[b * n + j] == x[b * n + n - 1 - j]);
    }
    // A kernel that uses dynamic shared memory but is launched with none.
    DeviceBuffer<float> d(32);
    REQUIRE_THROWS_WITH(KERNEL_LAUNCH(dynamic_shared_reverse_kernel<2>, 1, 32, 0, d.p, d.p, 1),
                        Contains("dynamic_shared_reverse_kernel<2>") && Contains("0 bytes of it"));
}

// ---------------------------------------------------------------------------------------------
// Barriers and warp ops.

TEST_CASE("emulator: a missing __syncthreads() gives a wrong sum for some seed", "[cuda][emulator]") {
    const int blocks = 3;
    std::vector<float> x = small_ints(blocks * 256, 1);
    std::vector<float> want(blocks, 0.f);
    for (int b = 0; b < blocks; b++)
        for (int t = 0; t < 256; t++) want[b] += x[b * 256 + t];  // small integers: every order is exact
    DeviceBuffer<float> dx(x), out(blocks);
    int wrong_seeds = 0;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        emu::set_seed(seed);
        KERNEL_LAUNCH(block_sum_kernel<true>, blocks, 256, 0, dx.p, out.p);
        std::vector<float> good = out.host();
        for (int b = 0; b < blocks; b++) REQUIRE(good[b] == want[b]);  // with the barrier: right for every seed
        KERNEL_LAUNCH(block_sum_kernel<false>, blocks, 256, 0, dx.p, out.p);
        std::vector<float> bad = out.host();
        bool wrong = false;
        for (int b = 0; b < blocks; b++) wrong = wrong || bad[b] != want[b];
        wrong_seeds += wrong;
    }
    emu::set_seed(0x5eed);
    INFO("seeds (of 8) where the kernel without the barrier was wrong: " << wrong_seeds);
    REQUIRE(wrong_seeds > 0);
}

TEST_CASE("emulator: a warp that reads another warp's store after only a __syncwarp() is wrong for some seed",
          "[cuda][emulator]") {
    // A warp op completes as soon as its warp is there, at times before other warps have run, as
    // on a GPU where warps drift apart. (Until 2026-11-28 every warp op waited for every thread of
    // the block to stop, so each thread's first store always came first and this passed.)
    const int blocks = 3;
    std::vector<float> x = small_ints(blocks * 128, 2);
    DeviceBuffer<float> dx(x), out(blocks * 128);
    int wrong_seeds = 0;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        emu::set_seed(seed);
        KERNEL_LAUNCH(read_other_warp_kernel<true>, blocks, 128, 0, dx.p, out.p);
        std::vector<float> good = out.host();
        for (int b = 0; b < blocks; b++)
            for (int t = 0; t < 128; t++) REQUIRE(good[b * 128 + t] == x[b * 128 + (t + 32) % 128]);
        KERNEL_LAUNCH(read_other_warp_kernel<false>, blocks, 128, 0, dx.p, out.p);
        std::vector<float> bad = out.host();
        bool wrong = false;
        for (int i = 0; i < blocks * 128; i++) wrong = wrong || !(bad[i] == x[i / 128 * 128 + (i % 128 + 32) % 128]);
        wrong_seeds += wrong;
    }
    emu::set_seed(0x5eed);
    INFO("seeds (of 8) where the kernel with only a __syncwarp() was wrong: " << wrong_seeds);
    REQUIRE(wrong_seeds > 0);
}

TEST_CASE("emulator: __syncthreads() in a branch only some threads take is a deadlock", "[cuda][emulator]") {
    DeviceBuffer<float> out(64);
    SECTION("the others reach another barrier") {
        REQUIRE_THROWS_WITH(KERNEL_LAUNCH(divergent_barrier_kernel, 1, 64, 0, out.p),
                            Contains("divergent_barrier_kernel") && Contains("deadlock") &&
                                Contains("test_cuda_emulator.cpp"));
    }
    SECTION("the others wait at a warp shuffle") {
        REQUIRE_THROWS_WITH(KERNEL_LAUNCH(barrier_vs_shuffle_kernel, 1, 32, 0, out.p),
                            Contains("barrier_vs_shuffle_kernel") && Contains("deadlock"));
    }
}

TEST_CASE("emulator: a warp shuffle whose mask names an exited lane is an error", "[cuda][emulator]") {
    DeviceBuffer<float> out(32);
    REQUIRE_THROWS_WITH(KERNEL_LAUNCH(shuffle_exited_lane_kernel, 1, 32, 0, out.p),
                        Contains("shuffle_exited_lane_kernel") && Contains("__shfl_xor_sync") &&
                            Contains("has exited"));
}

TEST_CASE("emulator: warp shuffles and ballots give the right answers", "[cuda][emulator]") {
    const int blocks = 3, threads = 128, n = blocks * threads, warps = n / 32;
    std::vector<float> x = small_ints(n, 3);
    DeviceBuffer<float> dx(x), all_sum(n), lane0_sum(warps), broadcast(n), up(n);
    DeviceBuffer<unsigned> ballots(warps);
    KERNEL_LAUNCH(warp_ops_kernel, blocks, threads, 0, dx.p, all_sum.p, lane0_sum.p, broadcast.p, up.p, ballots.p);
    std::vector<float> a = all_sum.host(), b = lane0_sum.host(), c = broadcast.host(), u = up.host();
    std::vector<unsigned> bal = ballots.host();
    for (int w = 0; w < warps; w++) {
        float sum = 0.f;
        unsigned want_ballot = 0;
        for (int l = 0; l < 32; l++) {
            sum += x[w * 32 + l];
            if (x[w * 32 + l] > 0.f) want_ballot |= 1u << l;
        }
        REQUIRE(b[w] == sum);
        REQUIRE(bal[w] == want_ballot);
        for (int l = 0; l < 32; l++) {
            REQUIRE(a[w * 32 + l] == sum);
            REQUIRE(c[w * 32 + l] == x[w * 32 + 7]);
            REQUIRE(u[w * 32 + l] == x[w * 32 + (l == 0 ? 0 : l - 1)]);  // lane 0 keeps its own
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Memory.

TEST_CASE("emulator: memory never written reads as NaN / 2142952365", "[cuda][emulator]") {
    const int64_t n = 77;
    SECTION("float from a fresh cudaMalloc") {
        float* fresh = nullptr;
        engine::cuda::check_cuda(cudaMalloc((void**)&fresh, n * sizeof(float)), "cudaMalloc");
        DeviceBuffer<float> y(n);
        KERNEL_LAUNCH(copy_f32_kernel, blocks_for(n), 256, 0, fresh, y.p, n);
        for (float v : y.host()) REQUIRE(std::isnan(v));
        engine::cuda::check_cuda(cudaFree(fresh), "cudaFree");
    }
    SECTION("int32 from a fresh allocation") {
        DeviceBuffer<int32_t> fresh(n), y(n);
        KERNEL_LAUNCH(copy_i32_kernel, blocks_for(n), 256, 0, fresh.p, y.p, n);
        for (int32_t v : y.host()) REQUIRE(v == 2142952365);
    }
    SECTION("shared memory nobody wrote") {
        DeviceBuffer<float> out(64);
        KERNEL_LAUNCH(uninitialized_shared_kernel, 1, 64, 0, out.p);
        std::vector<float> h = out.host();
        REQUIRE(h[0] == 5.f);
        for (int i = 1; i < 64; i++) REQUIRE(std::isnan(h[i]));
    }
}

TEST_CASE("emulator: host code touching device memory is an error", "[cuda][emulator]") {
    engine::Tensor t = engine::Tensor::zeros({3}, engine::DType::F32, engine::Device::CUDA);
    REQUIRE_THROWS_WITH(t.data_f32(), Contains("CUDA"));
    engine::Tensor ti = engine::Tensor::zeros({3}, engine::DType::I32, engine::Device::CUDA);
    REQUIRE_THROWS_WITH(ti.data_i32(), Contains("CUDA"));
    REQUIRE(emu::is_device_pointer(t.raw_f32()));
}

TEST_CASE("emulator: a host pointer as a kernel argument is an error", "[cuda][emulator]") {
    // (The check the launch helper makes before an emulated launch: engine/cuda/kernel.h.)
    DeviceBuffer<float> dev(8);
    std::vector<float> host(8);
    const float* nothing = nullptr;
    emu::check_kernel_args("copy_f32_kernel", (const float*)dev.p, dev.p + 3, (int64_t)8);
    emu::check_kernel_args("copy_f32_kernel", nothing, dev.p + 8, 0);  // null, one past the end
    REQUIRE_THROWS_WITH(emu::check_kernel_args("copy_f32_kernel", (const float*)host.data(), dev.p, (int64_t)8),
                        Contains("copy_f32_kernel") && Contains("argument 0") && Contains("not device memory"));
    REQUIRE_THROWS_WITH(emu::check_kernel_args("copy_f32_kernel", (const float*)dev.p, dev.p + 9, (int64_t)8),
                        Contains("argument 1"));
}

TEST_CASE("emulator: cudaMemcpy in the wrong direction is an error", "[cuda][emulator]") {
    std::vector<float> host_a(16, 1.f), host_b(16, 2.f);
    DeviceBuffer<float> dev(16), dev2(16);
    const size_t bytes = 16 * sizeof(float);
    // A host pointer as the device source, or as the device destination.
    REQUIRE_THROWS_WITH(cudaMemcpy(host_b.data(), host_a.data(), bytes, cudaMemcpyDeviceToHost),
                        Contains("cudaMemcpy(DeviceToHost") && Contains("source") && Contains("not (all) inside device memory"));
    REQUIRE_THROWS_WITH(cudaMemcpy(host_b.data(), host_a.data(), bytes, cudaMemcpyHostToDevice),
                        Contains("cudaMemcpy(HostToDevice") && Contains("destination"));
    // A device pointer where the direction says host.
    REQUIRE_THROWS_WITH(cudaMemcpy(dev.p, dev2.p, bytes, cudaMemcpyHostToDevice),
                        Contains("source") && Contains("is device memory"));
    REQUIRE_THROWS_WITH(cudaMemcpyAsync(host_b.data(), dev.p, bytes, cudaMemcpyDeviceToDevice, nullptr),
                        Contains("cudaMemcpyAsync(DeviceToDevice") && Contains("destination"));
    // A copy that runs past the end of the device allocation.
    REQUIRE_THROWS_WITH(cudaMemcpy(dev.p + 8, host_a.data(), bytes, cudaMemcpyHostToDevice),
                        Contains("destination") && Contains("not (all) inside device memory"));
    // The right directions work.
    REQUIRE(cudaMemcpy(dev.p, host_a.data(), bytes, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemcpy(host_b.data(), dev.p, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    REQUIRE(host_b == host_a);
}

TEST_CASE("emulator: the host writing pinned memory before a wait covers the copy from it is an error",
          "[cuda][emulator]") {
    DeviceBuffer<float> dev(16);
    const size_t bytes = 16 * sizeof(float);
    float* pinned = nullptr;
    REQUIRE(cudaHostAlloc((void**)&pinned, bytes, cudaHostAllocDefault) == cudaSuccess);
    for (int i = 0; i < 16; i++) pinned[i] = (float)i;
    cudaEvent_t before = nullptr, after = nullptr;
    REQUIRE(cudaEventCreate(&before) == cudaSuccess);
    REQUIRE(cudaEventCreate(&after) == cudaSuccess);
    auto copy = [&] { REQUIRE(cudaMemcpyAsync(dev.p, pinned, bytes, cudaMemcpyHostToDevice, nullptr) == cudaSuccess); };

    // Written before the stream is waited for: the GPU may have copied the new bytes.
    copy();
    pinned[3] = -1.f;
    REQUIRE_THROWS_WITH(cudaStreamSynchronize(nullptr),
                        Contains("pinned host memory") && Contains("64 bytes") && Contains("cudaStreamSynchronize"));
    // An event recorded before the copy does not cover it; one recorded after it does.
    REQUIRE(cudaEventRecord(before, nullptr) == cudaSuccess);
    copy();
    REQUIRE(cudaEventRecord(after, nullptr) == cudaSuccess);
    REQUIRE(cudaEventSynchronize(before) == cudaSuccess);
    pinned[4] = -1.f;
    REQUIRE_THROWS_WITH(cudaEventSynchronize(after), Contains("pinned host memory") && Contains("cudaEventSynchronize"));
    copy();
    REQUIRE(cudaEventRecord(after, nullptr) == cudaSuccess);
    REQUIRE(cudaEventSynchronize(after) == cudaSuccess);
    pinned[5] = -1.f;  // the copy is known done: the buffer is the host's again
    REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
    // cudaFreeHost waits for the copies, and reports the same mistake.
    copy();
    pinned[6] = -1.f;
    REQUIRE_THROWS_WITH(cudaFreeHost(pinned), Contains("pinned host memory") && Contains("cudaFreeHost"));
    // A pageable source is staged by the driver before the call returns: never checked.
    std::vector<float> pageable(16, 2.f);
    REQUIRE(cudaMemcpyAsync(dev.p, pageable.data(), bytes, cudaMemcpyHostToDevice, nullptr) == cudaSuccess);
    pageable[0] = 3.f;
    REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
    REQUIRE_THROWS_WITH(cudaFreeHost(pageable.data()), Contains("not the start of live pinned host memory"));
    cudaEventDestroy(before);
    cudaEventDestroy(after);
}

TEST_CASE("emulator: cublasSgemm checks its leading dimensions", "[cuda][emulator]") {
    cublasHandle_t h = nullptr;
    REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
    const int m = 4, n = 3, k = 5;
    std::vector<float> a(m * k), b(k * n);
    std::iota(a.begin(), a.end(), 1.f);
    std::iota(b.begin(), b.end(), -3.f);
    DeviceBuffer<float> da(a), db(b), dc(m * n);
    const float one = 1.f, zero = 0.f;
    // Column-major: A is m x k with lda >= m.
    REQUIRE(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da.p, m - 1, db.p, k, &zero, dc.p, m) ==
            CUBLAS_STATUS_INVALID_VALUE);
    REQUIRE(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da.p, m, db.p, k - 1, &zero, dc.p, m) ==
            CUBLAS_STATUS_INVALID_VALUE);
    REQUIRE(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da.p, m, db.p, k, &zero, dc.p, m - 1) ==
            CUBLAS_STATUS_INVALID_VALUE);
    // op(A) = A^T with A stored k x m: lda >= k.
    REQUIRE(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, da.p, k - 1, db.p, k, &zero, dc.p, m) ==
            CUBLAS_STATUS_INVALID_VALUE);
    REQUIRE(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, n, k, &one, da.p, m, db.p, k, &zero, dc.p, m) ==
            CUBLAS_STATUS_INVALID_VALUE);
    // The right call: C = A B, column-major.
    REQUIRE(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da.p, m, db.p, k, &zero, dc.p, m) ==
            CUBLAS_STATUS_SUCCESS);
    std::vector<float> c = dc.host();
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float want = 0.f;
            for (int p = 0; p < k; p++) want += a[p * m + i] * b[j * k + p];
            REQUIRE(c[j * m + i] == want);
        }
    // Host operands are refused.
    REQUIRE_THROWS_WITH(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a.data(), m, db.p, k, &zero, dc.p, m),
                        Contains("cublasSgemm") && Contains("operand A"));
    REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
}

// ---------------------------------------------------------------------------------------------
// Atomics and indices.

TEST_CASE("emulator: atomicAdd from many blocks sums correctly", "[cuda][emulator]") {
    const int blocks = 37, threads = 96;
    std::vector<float> x = small_ints(blocks * threads, 5);
    float want = std::accumulate(x.begin(), x.end(), 0.f);
    DeviceBuffer<float> dx(x), sum(1);
    DeviceBuffer<int> count(1);
    engine::cuda::memset_zero(sum.p, sizeof(float));
    engine::cuda::memset_zero(count.p, sizeof(int));
    KERNEL_LAUNCH(atomic_count_kernel, blocks, threads, 0, sum.p, count.p, dx.p);
    REQUIRE(sum.host()[0] == want);
    REQUIRE(count.host()[0] == blocks * threads);
}

TEST_CASE("emulator: block and thread indices cover a 3-D grid exactly once", "[cuda][emulator]") {
    for (auto [grid, block] : {std::pair{dim3(3, 2, 2), dim3(4, 3, 2)}, std::pair{dim3(1, 5, 1), dim3(32, 1, 3)},
                               std::pair{dim3(7, 1, 1), dim3(1, 1, 64)}}) {
        size_t n = (size_t)grid.x * grid.y * grid.z * block.x * block.y * block.z;
        DeviceBuffer<int> hits(n), bad(1);
        engine::cuda::memset_zero(hits.p, n * sizeof(int));
        engine::cuda::memset_zero(bad.p, sizeof(int));
        KERNEL_LAUNCH(index_cover_kernel, grid, block, 0, hits.p, bad.p, grid, block);
        std::vector<int> h = hits.host();
        for (size_t i = 0; i < n; i++) REQUIRE(h[i] == 1);
        REQUIRE(bad.host()[0] == 0);
    }
}

// ---------------------------------------------------------------------------------------------
// The emulator's counters, and its cost (the hidden [.bench] test prints it).

TEST_CASE("emulator: counters count launches, threads and fiber switches", "[cuda][emulator]") {
    DeviceBuffer<float> out(4 * 256);
    emu::Counters c0 = emu::counters();
    KERNEL_LAUNCH(one_barrier_kernel, 4, 256, 0, out.p);
    emu::Counters c1 = emu::counters();
    REQUIRE(c1.launches - c0.launches == 1);
    REQUIRE(c1.threads - c0.threads == 4 * 256);
    REQUIRE(c1.switches - c0.switches == 2 * 4 * 256);  // each thread runs up to the barrier, then to its end
    std::vector<float> h = out.host();
    for (int b = 0; b < 4; b++)
        for (int t = 0; t < 256; t++) REQUIRE(h[b * 256 + t] == (float)(255 - t));
    // A kernel without barriers: one switch per thread with the asm switch; with ucontext, plain
    // calls from its second launch on (unless INITLAB_EMU_FIBERS=1).
    DeviceBuffer<int> idx(1000);
    KERNEL_LAUNCH(write_index_kernel, 4, 256, 0, idx.p, (int64_t)1000);
    emu::Counters c2 = emu::counters();
    KERNEL_LAUNCH(write_index_kernel, 4, 256, 0, idx.p, (int64_t)1000);
    emu::Counters c3 = emu::counters();
    REQUIRE(c3.threads - c2.threads == 1024);
    const char* fibers = std::getenv("INITLAB_EMU_FIBERS");
    if (std::string(emu::context_switch()) == "asm" || (fibers && fibers[0] == '1'))
        REQUIRE(c3.switches - c2.switches == 1024);
    else
        REQUIRE(c3.switches == c2.switches);
}

TEST_CASE("emulator: both context switches (asm, ucontext) give the same results", "[cuda][emulator]") {
    const char* before = emu::context_switch();
    const int blocks = 2;
    std::vector<float> x = small_ints(blocks * 256, 9);
    DeviceBuffer<float> dx(x), sums(blocks), out(blocks * 256);
    std::vector<std::vector<float>> results;
    for (bool ucontext : {false, true}) {
        INFO("context switch " << emu::set_ucontext(ucontext));
        emu::set_seed(42);
        KERNEL_LAUNCH(block_sum_kernel<true>, blocks, 256, 0, dx.p, sums.p);
        KERNEL_LAUNCH(one_barrier_kernel, blocks, 256, 0, out.p);
        std::vector<float> r = sums.host(), o = out.host();
        r.insert(r.end(), o.begin(), o.end());
        results.push_back(r);
        // Errors raised inside a fiber still come out of the launch, and the next launch is clean.
        REQUIRE_THROWS_WITH(KERNEL_LAUNCH(divergent_barrier_kernel, 1, 64, 0, out.p), Contains("deadlock"));
        REQUIRE_THROWS_WITH(KERNEL_LAUNCH(oversized_static_shared_kernel, 1, 32, 0, out.p),
                            Contains("oversized_static_shared_kernel"));
    }
    REQUIRE(results[0] == results[1]);
    emu::set_ucontext(std::string(before) == "ucontext");
    emu::set_seed(0x5eed);
}

TEST_CASE("emulator: cost per fiber switch and per emulated thread", "[.emubench]") {
    auto seconds = [](auto t0) { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    const int blocks = 512, threads = 256;
    DeviceBuffer<float> out((size_t)blocks * threads);
    DeviceBuffer<int> idx((size_t)blocks * threads);
    KERNEL_LAUNCH(one_barrier_kernel, 1, threads, 0, out.p);  // warm up (stacks mapped)
    KERNEL_LAUNCH(write_index_kernel, 1, threads, 0, idx.p, (int64_t)threads);
    for (int rep = 0; rep < 3; rep++) {
        emu::Counters c0 = emu::counters();
        auto t0 = std::chrono::steady_clock::now();
        KERNEL_LAUNCH(one_barrier_kernel, blocks, threads, 0, out.p);
        double fiber_s = seconds(t0);
        emu::Counters c1 = emu::counters();
        t0 = std::chrono::steady_clock::now();
        KERNEL_LAUNCH(write_index_kernel, blocks, threads, 0, idx.p, (int64_t)blocks * threads);
        double plain_s = seconds(t0);
        emu::Counters c2 = emu::counters();
        double sw = (double)(c1.switches - c0.switches), th1 = (double)(c1.threads - c0.threads),
               th2 = (double)(c2.threads - c1.threads);
        std::printf("[emulator, %s switch] kernel with one barrier: %.0f threads, %.0f switches, %.1f ns per thread "
                    "(%.1f ns per switch, all costs included); kernel without barriers: %.1f ns per thread\n",
                    emu::context_switch(), th1, sw, fiber_s / th1 * 1e9, fiber_s / sw * 1e9, plain_s / th2 * 1e9);
    }
}

// ---------------------------------------------------------------------------------------------
// AddressSanitizer (make emu-sanitize): device memory is allocated with exactly the size asked,
// so ASan knows where each buffer ends.

#if defined(__SANITIZE_ADDRESS__)
namespace {
__global__ void write_last_kernel(float* x, int64_t n) {
    GRID_STRIDE_LOOP(i, n) x[i] = 1.f;
}
// Reports which bytes around the end of a shared array and of the dynamic shared memory ASan
// guards (33 floats each).
__global__ void shared_bounds_kernel(int* out) {
    SHARED_ARRAY(float, s, 33);
    DYNAMIC_SHARED(float, d);
    if (threadIdx.x == 0) {
        out[0] = __asan_address_is_poisoned(s + 32);
        out[1] = __asan_address_is_poisoned(s + 33);
        out[2] = __asan_address_is_poisoned(d + 32);
        out[3] = __asan_address_is_poisoned(d + 33);
    }
}
// The planted bug: one past the end (i <= n).
__global__ void write_one_past_end_kernel(float* x, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i <= n; i += (int64_t)blockDim.x * gridDim.x)
        x[i] = 1.f;
}
}  // namespace

TEST_CASE("emulator: ASan knows where device buffers and shared arrays end", "[cuda][emulator][asan]") {
    for (int64_t n : {1, 7, 33, 1025}) {
        DeviceBuffer<float> x(n);
        REQUIRE(!__asan_address_is_poisoned(x.p + n - 1));
        REQUIRE(__asan_address_is_poisoned(x.p + n));  // a write there is a heap-buffer-overflow report
        KERNEL_LAUNCH(write_last_kernel, blocks_for(n), 256, 0, x.p, n);  // in bounds: no report
        for (float v : x.host()) REQUIRE(v == 1.f);
    }
    // Shared memory: a buffer of exactly the size declared (one past the end is a report too).
    DeviceBuffer<int> flags(4);
    KERNEL_LAUNCH(shared_bounds_kernel, 1, 32, 33 * sizeof(float), flags.p);
    REQUIRE(flags.host() == std::vector<int>{0, 1, 0, 1});
    // Kernels with barriers (fibers on their own stacks) and shared memory run clean under ASan.
    DeviceBuffer<float> out(2 * 1024);
    KERNEL_LAUNCH(one_barrier_kernel, 2, 1024, 0, out.p);
    REQUIRE(out.host()[5] == 1018.f);
}

// Run by hand: must end in an ASan heap-buffer-overflow report in write_one_past_end_kernel.
TEST_CASE("emulator: ASan catches a kernel writing one past the end", "[.oob]") {
    const int64_t n = 33;
    DeviceBuffer<float> x(n);
    KERNEL_LAUNCH(write_one_past_end_kernel, 1, 64, 0, x.p, n);
    FAIL("AddressSanitizer did not report the write one past the end");
}
#endif

#endif  // ENGINE_CUDA_EMU
