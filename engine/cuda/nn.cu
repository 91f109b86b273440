// engine/cuda/nn.cu: the fused neural-network kernels (engine/cuda/nn.h), the GPU twins of
// engine/cpu/nn.cpp.
//
// Row ops (softmax, log_softmax, layer_norm, cross_entropy, attention's masked softmax and its
// backward) give each row to one warp when it has at most kWarpRowMax elements, else to one
// 256-thread block: the threads stride the row (coalesced), and row reductions are warp shuffles
// (xor butterflies: every lane ends with the same bits) combined, for a block, through shared
// memory. Each thread then writes the elements it read, so no barrier is needed between passes.
// Math as the CPU's: the row max is subtracted before expf, accurate expf/logf (not the
// intrinsics).
//
// Sums that leave a row are deterministic, never float atomics: layer_norm's dweight/dbias are
// summed per chunk of rows into a [chunks, 2, n] scratch, then over the chunks in order; the
// losses are per-row (or per-chunk) doubles summed by one block with a fixed tree. Trees depend on
// the shape only, so the same input gives the same bits on every run.
//
// Attention: the scores and the two products are batched cuBLAS GEMMs (engine/cuda/matmul.h); one
// fused kernel scales, masks (causal) and normalizes the scores and applies the dropout mask, and
// another is the softmax backward. gemm_batched has no alpha, so `scale` is applied in those
// kernels (to the scores; to dS before dq and dk).
//
// Dropout's uniforms come from uniform_fill, Philox4x32-10 (engine/cuda/philox.h) on the counter
// blocks the op reserved from the global generator: bitwise the CPU's mask.
#include <atomic>
#include <cstdint>

#include "engine/attention_layout.h"
#include "engine/cuda/kernel.h"
#include "engine/cuda/matmul.h"
#include "engine/cuda/nn.h"
#include "engine/cuda/philox.h"

namespace engine::cuda {
namespace {

constexpr int kRowThreads = 256;      // block size of every row kernel (a multiple of 32)
constexpr int64_t kWarpRowMax = 1024;  // rows up to this long get one warp, longer ones a block

// ---------------------------------------------------------------------------------------------
// Reductions within a row group (a warp, or the whole block). Every thread gets the result.

__device__ __forceinline__ float warp_sum(float v) {
    for (int off = kWarp / 2; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int off = kWarp / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, off));
    return v;
}
__device__ __forceinline__ double warp_sum_double(double v) {
    for (int off = kWarp / 2; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
    return v;
}

// The rows a thread works on and its place in its row group.
struct RowGroup {
    int64_t first, stride;  // rows first, first + stride, ...
    int tid, width;         // index in the group, group size
};

template <bool kBlock>
__device__ __forceinline__ RowGroup row_group() {
    if (kBlock) return {(int64_t)blockIdx.x, (int64_t)gridDim.x, (int)threadIdx.x, (int)blockDim.x};
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / kWarp;
    return {warp, (int64_t)gridDim.x * blockDim.x / kWarp, (int)(threadIdx.x & (kWarp - 1)), kWarp};
}

// Sum (kMax: max) over the row group. Block mode: the warps' results meet in `scratch`
// (kRowThreads / 32 floats of shared memory); the first barrier keeps a previous call's readers
// from seeing the new values. All threads of a block share a row, so all reach the barriers.
template <bool kBlock, bool kMax>
__device__ __forceinline__ float group_reduce(float v, float* scratch) {
    v = kMax ? warp_max(v) : warp_sum(v);
    if (kBlock) {
        int lane = threadIdx.x & (kWarp - 1), warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
        __syncthreads();
        if (lane == 0) scratch[warp] = v;
        __syncthreads();
        v = lane < warps ? scratch[lane] : (kMax ? -INFINITY : 0.f);
        v = kMax ? warp_max(v) : warp_sum(v);
    }
    return v;
}
template <bool kBlock>
__device__ __forceinline__ float group_sum(float v, float* scratch) {
    return group_reduce<kBlock, false>(v, scratch);
}
template <bool kBlock>
__device__ __forceinline__ float group_max(float v, float* scratch) {
    return group_reduce<kBlock, true>(v, scratch);
}

// Sum of one value per thread over a kRowThreads block, in double; every thread gets it.
__device__ __forceinline__ double block_sum_double(double v, double* scratch) {
    v = warp_sum_double(v);
    int lane = threadIdx.x & (kWarp - 1), warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < warps ? scratch[lane] : 0.0;
    return warp_sum_double(v);
}

// Launches kernel<false> (a warp per row) or kernel<true> (a block per row) over `rows` rows of n.
#define ROWS_LAUNCH(kernel, rows, n, ...)                                                              \
    do {                                                                                               \
        if ((n) <= kWarpRowMax)                                                                        \
            KERNEL_LAUNCH(kernel<false>, blocks_for((rows) * kWarp, kRowThreads), kRowThreads, 0, __VA_ARGS__); \
        else                                                                                           \
            KERNEL_LAUNCH(kernel<true>, blocks_for((rows), 1), kRowThreads, 0, __VA_ARGS__);           \
    } while (0)

// A row kernel for rows of n <= kRegsRowMax that keeps its row in registers, a warp per row, lane
// l holding columns l, l + 32, ...: the instantiation with the fewest registers a lane that hold
// the row. Longer rows keep the row-group kernels (ROWS_LAUNCH): 32 values a lane took 95-136
// registers, few warps an SM for a memory-bound pass.
constexpr int64_t kRegsRowMax = 512;
#define REGS_LAUNCH(kernel, rows, n, ...)                                                              \
    do {                                                                                               \
        const unsigned blocks_ = blocks_for((rows) * kWarp, kRowThreads);                              \
        if ((n) <= 4 * kWarp) KERNEL_LAUNCH(kernel<4>, blocks_, kRowThreads, 0, __VA_ARGS__);          \
        else if ((n) <= 8 * kWarp) KERNEL_LAUNCH(kernel<8>, blocks_, kRowThreads, 0, __VA_ARGS__);     \
        else KERNEL_LAUNCH(kernel<16>, blocks_, kRowThreads, 0, __VA_ARGS__);                          \
    } while (0)
static_assert(kRegsRowMax == 16 * kWarp, "REGS_LAUNCH's widest instantiation");

// ---------------------------------------------------------------------------------------------
// softmax / log_softmax

template <bool kBlock>
__global__ void softmax_forward_kernel(const float* x, float* y, int64_t rows, int64_t n) {
    SHARED_ARRAY(float, scratch, kRowThreads / kWarp);
    RowGroup g = row_group<kBlock>();
    for (int64_t r = g.first; r < rows; r += g.stride) {
        const float* xr = x + r * n;
        float* yr = y + r * n;
        float m = -INFINITY;
        for (int64_t j = g.tid; j < n; j += g.width) m = fmaxf(m, xr[j]);
        m = group_max<kBlock>(m, scratch);
        float s = 0.f;
        for (int64_t j = g.tid; j < n; j += g.width) {
            float e = expf(xr[j] - m);
            yr[j] = e;
            s += e;
        }
        float inv = 1.f / group_sum<kBlock>(s, scratch);
        for (int64_t j = g.tid; j < n; j += g.width) yr[j] *= inv;
    }
}

// dx = y·(dy − Σ dy·y)
template <bool kBlock>
__global__ void softmax_backward_kernel(const float* y, const float* dy, float* dx, int64_t rows, int64_t n) {
    SHARED_ARRAY(float, scratch, kRowThreads / kWarp);
    RowGroup g = row_group<kBlock>();
    for (int64_t r = g.first; r < rows; r += g.stride) {
        const float *yr = y + r * n, *gr = dy + r * n;
        float* dr = dx + r * n;
        float dot = 0.f;
        for (int64_t j = g.tid; j < n; j += g.width) dot += gr[j] * yr[j];
        dot = group_sum<kBlock>(dot, scratch);
        for (int64_t j = g.tid; j < n; j += g.width) dr[j] = yr[j] * (gr[j] - dot);
    }
}

template <bool kBlock>
__global__ void log_softmax_forward_kernel(const float* x, float* y, int64_t rows, int64_t n) {
    SHARED_ARRAY(float, scratch, kRowThreads / kWarp);
    RowGroup g = row_group<kBlock>();
    for (int64_t r = g.first; r < rows; r += g.stride) {
        const float* xr = x + r * n;
        float* yr = y + r * n;
        float m = -INFINITY;
        for (int64_t j = g.tid; j < n; j += g.width) m = fmaxf(m, xr[j]);
        m = group_max<kBlock>(m, scratch);
        float s = 0.f;
        for (int64_t j = g.tid; j < n; j += g.width) s += expf(xr[j] - m);
        float lse = m + logf(group_sum<kBlock>(s, scratch));
        for (int64_t j = g.tid; j < n; j += g.width) yr[j] = xr[j] - lse;
    }
}

// dx = dy − exp(y)·Σ dy
template <bool kBlock>
__global__ void log_softmax_backward_kernel(const float* y, const float* dy, float* dx, int64_t rows, int64_t n) {
    SHARED_ARRAY(float, scratch, kRowThreads / kWarp);
    RowGroup g = row_group<kBlock>();
    for (int64_t r = g.first; r < rows; r += g.stride) {
        const float *yr = y + r * n, *gr = dy + r * n;
        float* dr = dx + r * n;
        float gsum = 0.f;
        for (int64_t j = g.tid; j < n; j += g.width) gsum += gr[j];
        gsum = group_sum<kBlock>(gsum, scratch);
        for (int64_t j = g.tid; j < n; j += g.width) dr[j] = gr[j] - expf(yr[j]) * gsum;
    }
}

// ---------------------------------------------------------------------------------------------
// layer_norm

// Row r of the group's LayerNorm, given the thread's partial sum s of its elements of xr: two passes
// over the row (mean, then squared deviations) as the CPU: no E[x²] − E[x]² cancellation. Each
// thread reads only the elements it summed (and, in add_layer_norm, wrote): no barrier needed.
template <bool kBlock>
__device__ __forceinline__ void layer_norm_row(const float* xr, float s, const float* weight, const float* bias,
                                               float* yr, float* mean, float* rstd, int64_t r, int64_t n, float eps,
                                               RowGroup g, float* scratch) {
    float mu = group_sum<kBlock>(s, scratch) / (float)n;
    float var = 0.f;
    for (int64_t j = g.tid; j < n; j += g.width) var += (xr[j] - mu) * (xr[j] - mu);
    float rs = 1.f / sqrtf(group_sum<kBlock>(var, scratch) / (float)n + eps);
    for (int64_t j = g.tid; j < n; j += g.width) {
        float v = (xr[j] - mu) * rs;
        if (weight) v *= weight[j];
        if (bias) v += bias[j];
        yr[j] = v;
    }
    if (g.tid == 0) {
        mean[r] = mu;
        rstd[r] = rs;
    }
}

template <bool kBlock>
__global__ void layer_norm_forward_kernel(const float* x, const float* weight, const float* bias, float* y,
                                          float* mean, float* rstd, int64_t rows, int64_t n, float eps) {
    SHARED_ARRAY(float, scratch, kRowThreads / kWarp);
    RowGroup g = row_group<kBlock>();
    for (int64_t r = g.first; r < rows; r += g.stride) {
        const float* xr = x + r * n;
        float s = 0.f;
        for (int64_t j = g.tid; j < n; j += g.width) s += xr[j];
        layer_norm_row<kBlock>(xr, s, weight, bias, y + r * n, mean, rstd, r, n, eps, g, scratch);
    }
}

// add_layer_norm: the first pass writes sum = x + residual and adds it up; the row's other passes
// read sum back (the thread's own writes, from cache) instead of a separate add kernel's output.
template <bool kBlock>
__global__ void add_layer_norm_forward_kernel(const float* x, const float* residual, const float* weight,
                                              const float* bias, float* sum, float* y, float* mean, float* rstd,
                                              int64_t rows, int64_t n, float eps) {
    SHARED_ARRAY(float, scratch, kRowThreads / kWarp);
    RowGroup g = row_group<kBlock>();
    for (int64_t r = g.first; r < rows; r += g.stride) {
        const float *xr = x + r * n, *rr = residual + r * n;
        float* sr = sum + r * n;
        float s = 0.f;
        for (int64_t j = g.tid; j < n; j += g.width) {
            float v = xr[j] + rr[j];
            sr[j] = v;
            s += v;
        }
        layer_norm_row<kBlock>(sr, s, weight, bias, y + r * n, mean, rstd, r, n, eps, g, scratch);
    }
}

// The register kernel of the two forward kernels above, for rows of at most 32·kPerLane
// (REGS_LAUNCH): the row is read once, into registers, instead of once a pass (from cache). Lane
// `tid` holds columns tid, tid + 32, ... of the row in v and their sum in s; layer_norm_row_regs
// does the same operations in the same order as layer_norm_row's warp path.
template <int kPerLane>
__device__ __forceinline__ void layer_norm_row_regs(const float (&v)[kPerLane], float s, const float* weight,
                                                    const float* bias, float* yr, float* mean, float* rstd, int64_t r,
                                                    int64_t n, float eps, int tid) {
    const float mu = warp_sum(s) / (float)n;
    float var = 0.f;
    UNROLL
    for (int i = 0; i < kPerLane; i++)
        if (tid + (int64_t)kWarp * i < n) var += (v[i] - mu) * (v[i] - mu);
    const float rs = 1.f / sqrtf(warp_sum(var) / (float)n + eps);
    UNROLL
    for (int i = 0; i < kPerLane; i++) {
        const int64_t j = tid + (int64_t)kWarp * i;
        if (j >= n) break;
        float o = (v[i] - mu) * rs;
        if (weight) o *= weight[j];
        if (bias) o += bias[j];
        yr[j] = o;
    }
    if (tid == 0) {
        mean[r] = mu;
        rstd[r] = rs;
    }
}

// residual null: layer_norm of x. Else add_layer_norm: the row is x + residual, written to sum.
template <int kPerLane>
__global__ void layer_norm_forward_regs_kernel(const float* x, const float* residual, const float* weight,
                                               const float* bias, float* sum, float* y, float* mean, float* rstd,
                                               int64_t rows, int64_t n, float eps) {
    const RowGroup g = row_group<false>();
    for (int64_t r = g.first; r < rows; r += g.stride) {
        float v[kPerLane], s = 0.f;
        UNROLL
        for (int i = 0; i < kPerLane; i++) {
            const int64_t j = g.tid + (int64_t)kWarp * i;
            v[i] = j < n ? (residual ? x[r * n + j] + residual[r * n + j] : x[r * n + j]) : 0.f;
            if (j >= n) continue;
            if (residual) sum[r * n + j] = v[i];
            s += v[i];
        }
        layer_norm_row_regs<kPerLane>(v, s, weight, bias, y + r * n, mean, rstd, r, n, eps, g.tid);
    }
}

// dx = rstd·(dx̂ − mean(dx̂) − x̂·mean(dx̂·x̂)), with dx̂ = dy·weight.
template <bool kBlock>
__global__ void layer_norm_backward_dx_kernel(const float* x, const float* weight, const float* mean,
                                              const float* rstd, const float* dy, float* dx, bool add_dx,
                                              int64_t rows, int64_t n) {
    SHARED_ARRAY(float, scratch, kRowThreads / kWarp);
    RowGroup g = row_group<kBlock>();
    for (int64_t r = g.first; r < rows; r += g.stride) {
        const float *xr = x + r * n, *gr = dy + r * n;
        float* dr = dx + r * n;
        float mu = mean[r], rs = rstd[r];
        float a = 0.f, b = 0.f;  // Σ dx̂, Σ dx̂·x̂
        for (int64_t j = g.tid; j < n; j += g.width) {
            float xhat = (xr[j] - mu) * rs;
            float dxhat = weight ? gr[j] * weight[j] : gr[j];
            a += dxhat;
            b += dxhat * xhat;
        }
        float mean_dxhat = group_sum<kBlock>(a, scratch) / (float)n;
        float mean_dxhat_xhat = group_sum<kBlock>(b, scratch) / (float)n;
        for (int64_t j = g.tid; j < n; j += g.width) {
            float xhat = (xr[j] - mu) * rs;
            float dxhat = weight ? gr[j] * weight[j] : gr[j];
            float v = rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
            dr[j] = add_dx ? dr[j] + v : v;
        }
    }
}

// dx and the dweight/dbias chunk sums in one pass, for rows of n <= 32·kCols <= 256 (the two
// kernels below read x and dy a second time: 2/5 of the backward's traffic). Block c (256 threads,
// 8 warps) takes chunk c of the rows; warp w its rows w, w + 8, ...; lane l the columns l + 32·i,
// whose x and dy stay in registers for the row's two passes, and whose Σ dy·x̂ and Σ dy it adds up
// over the warp's rows. The 8 warps' sums then meet in shared memory in warp order and go to
// partial [chunks, 2, n] as the two-kernel path writes it: fixed orders, the same bits every run.
// Up to 8 columns a lane (ViT-Tiny's 192 take 6): 44-80 registers and no spills under launch
// bounds that ask for two blocks an SM (without that minimum nvcc took up to 128). 16 columns took
// 121-143 registers, one block (8 warps) an SM: too few loads in flight for a memory-bound pass,
// so wider rows keep the two-kernel path (make cuda-check has the figures).
constexpr int64_t kLnFusedMax = 8 * kWarp;
template <int kCols>
__global__ void __launch_bounds__(kRowThreads, 2)
    layer_norm_backward_fused_kernel(const float* x, const float* weight, const float* mean, const float* rstd,
                                     const float* dy, float* dx, bool add_dx, float* partial, int64_t rows,
                                     int n, int64_t chunk_rows) {
    constexpr int kWarps = kRowThreads / kWarp;
    SHARED_ARRAY(float, sums, kWarps * 2 * kWarp * kCols);  // [warp][Σ dy·x̂ | Σ dy][column]
    const int lane = (int)threadIdx.x % kWarp, warp = (int)threadIdx.x / kWarp;
    const int64_t begin = (int64_t)blockIdx.x * chunk_rows;
    const int64_t end = begin + chunk_rows < rows ? begin + chunk_rows : rows;
    float w[kCols], sw[kCols], sb[kCols];
    UNROLL
    for (int i = 0; i < kCols; i++) {
        const int j = lane + i * kWarp;
        w[i] = j < n ? (weight ? weight[j] : 1.f) : 0.f;
        sw[i] = sb[i] = 0.f;
    }
    for (int64_t r = begin + warp; r < end; r += kWarps) {
        const float mu = mean[r], rs = rstd[r];
        // With add_dx, the old dx is loaded with x and dy (this lane writes those elements only
        // later): one trip to memory a row instead of a second one after the sums. Up to 6 columns
        // a lane (80 registers); at 8 it would take 96, two blocks an SM instead of three.
        constexpr bool kEarlyOld = kCols <= 6;
        float xhat[kCols], g[kCols], old[kEarlyOld ? kCols : 1], a = 0.f, b = 0.f;  // a = Σ dx̂, b = Σ dx̂·x̂
        UNROLL
        for (int i = 0; i < kCols; i++) {
            const int j = lane + i * kWarp;
            xhat[i] = j < n ? (x[r * n + j] - mu) * rs : 0.f;
            g[i] = j < n ? dy[r * n + j] : 0.f;
            if constexpr (kEarlyOld) old[i] = add_dx && j < n ? dx[r * n + j] : 0.f;
            a += g[i] * w[i];
            b += g[i] * w[i] * xhat[i];
            sw[i] += g[i] * xhat[i];
            sb[i] += g[i];
        }
        const float mean_dxhat = warp_sum(a) / (float)n, mean_dxhat_xhat = warp_sum(b) / (float)n;
        UNROLL
        for (int i = 0; i < kCols; i++) {
            const int j = lane + i * kWarp;
            if (j >= n) continue;
            const float v = rs * (g[i] * w[i] - mean_dxhat - xhat[i] * mean_dxhat_xhat);
            if constexpr (kEarlyOld) dx[r * n + j] = add_dx ? old[i] + v : v;
            else dx[r * n + j] = add_dx ? dx[r * n + j] + v : v;
        }
    }
    UNROLL
    for (int i = 0; i < kCols; i++) {
        sums[(warp * 2 + 0) * kWarp * kCols + lane + i * kWarp] = sw[i];
        sums[(warp * 2 + 1) * kWarp * kCols + lane + i * kWarp] = sb[i];
    }
    __syncthreads();
    for (int e = (int)threadIdx.x; e < 2 * n; e += kRowThreads) {
        const int which = e / n, j = e % n;
        float total = 0.f;
        for (int k = 0; k < kWarps; k++) total += sums[(k * 2 + which) * kWarp * kCols + j];
        partial[(int64_t)blockIdx.x * 2 * n + e] = total;
    }
}

template <int kCols>
void layer_norm_backward_fused(const float* x, const float* weight, const float* mean, const float* rstd,
                               const float* dy, float* dx, bool add_dx, float* partial, int64_t rows, int64_t n,
                               int64_t chunk_rows, int64_t chunks) {
    KERNEL_LAUNCH(layer_norm_backward_fused_kernel<kCols>, dim3((unsigned)chunks), kRowThreads, 0, x, weight, mean,
                  rstd, dy, dx, add_dx, partial, rows, (int)n, chunk_rows);
}

// dweight/dbias, pass 1: block (32, 8) per (chunk of rows, tile of 32 columns). The 32 threads of a
// warp read 32 consecutive columns of a row (coalesced), the 8 warps take every 8th row of the
// chunk; the 8 partial sums per column meet in shared memory, in order. partial is [chunks, 2, n]:
// Σ dy·x̂, then Σ dy.
constexpr int kLnTile = 32, kLnRowsPerBlock = 8;
__global__ void layer_norm_params_partial_kernel(const float* x, const float* mean, const float* rstd,
                                                 const float* dy, float* partial, int64_t rows, int64_t n,
                                                 int64_t chunk_rows, int64_t chunks) {
    SHARED_ARRAY(float, part_w, kLnTile * kLnRowsPerBlock);
    SHARED_ARRAY(float, part_b, kLnTile * kLnRowsPerBlock);
    int64_t tiles = (n + kLnTile - 1) / kLnTile;
    for (int64_t u = blockIdx.x; u < tiles * chunks; u += gridDim.x) {  // u depends on the block only
        int64_t tile = u % tiles, c = u / tiles;
        int64_t j = tile * kLnTile + threadIdx.x;
        int64_t begin = c * chunk_rows, end = begin + chunk_rows < rows ? begin + chunk_rows : rows;
        float sw = 0.f, sb = 0.f;
        if (j < n)
            for (int64_t r = begin + threadIdx.y; r < end; r += kLnRowsPerBlock) {
                float gv = dy[r * n + j];
                sw += gv * ((x[r * n + j] - mean[r]) * rstd[r]);
                sb += gv;
            }
        part_w[threadIdx.y * kLnTile + threadIdx.x] = sw;
        part_b[threadIdx.y * kLnTile + threadIdx.x] = sb;
        __syncthreads();
        if (threadIdx.y == 0 && j < n) {
            for (int k = 1; k < kLnRowsPerBlock; k++) {
                sw += part_w[k * kLnTile + threadIdx.x];
                sb += part_b[k * kLnTile + threadIdx.x];
            }
            partial[c * 2 * n + j] = sw;
            partial[c * 2 * n + n + j] = sb;
        }
        __syncthreads();  // the shared arrays are reused by the next unit
    }
}

// Pass 2: a warp per column (row_group<false>: its rows are the columns here). Lane l sums chunks
// l, l + 32, ... in order, then the 32 partial sums meet in warp_sum's fixed xor tree: the same
// order on every run. (One thread per column summing every chunk left a ViT's 192 columns to 192
// threads: 68 µs a call on an H200 for a few hundred KB.)
__global__ void layer_norm_params_final_kernel(const float* partial, float* dweight, float* dbias, int64_t n,
                                               int64_t chunks) {
    RowGroup g = row_group<false>();
    for (int64_t j = g.first; j < n; j += g.stride) {  // the same j for the whole warp
        float sw = 0.f, sb = 0.f;
        for (int64_t c = g.tid; c < chunks; c += kWarp) {
            sw += partial[c * 2 * n + j];
            sb += partial[c * 2 * n + n + j];
        }
        sw = warp_sum(sw);
        sb = warp_sum(sb);
        if (g.tid == 0) {
            if (dweight) dweight[j] = sw;
            if (dbias) dbias[j] = sb;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// dropout

// Thread b computes Philox block base + b and writes its 4 values (rng.cpp's uniform layout).
// With `base_shift` (a captured step: nn/graph_step.h) the first block is base + *base_shift.
__global__ void uniform_fill_kernel(float* out, int64_t n, uint64_t seed, uint64_t base, const uint64_t* base_shift) {
    if (base_shift) base += *base_shift;
    GRID_STRIDE_LOOP(b, (n + 3) / 4) {
        uint32_t w[4];
        philox4x32_10(seed, base + (uint64_t)b, w);
        for (int j = 0; j < 4 && b * 4 + j < n; j++) out[b * 4 + j] = philox_unit(w[j]);
    }
}

// mask: uniforms in, scaled keep mask out; y = x·mask (y null: mask only).
__global__ void dropout_forward_kernel(const float* x, float* mask, float* y, int64_t n, float p, float scale) {
    GRID_STRIDE_LOOP(i, n) {
        float m = mask[i] >= p ? scale : 0.f;
        mask[i] = m;
        if (y) y[i] = x[i] * m;
    }
}

__global__ void mul_kernel(const float* a, const float* b, float* out, int64_t n) {
    GRID_STRIDE_LOOP(i, n) out[i] = a[i] * b[i];
}

// ---------------------------------------------------------------------------------------------
// Losses. The mean is a double sum of per-row (cross_entropy) or per-chunk (mse) doubles by one
// block, strided then a fixed tree: deterministic, and as the CPU's double total.

// divisor_dev: the divisor from device memory (a count made on the device), else `divisor`.
__global__ void mean_kernel(const double* part, int64_t parts, float* out, double divisor, const int64_t* divisor_dev) {
    SHARED_ARRAY(double, scratch, kRowThreads / kWarp);
    if (divisor_dev) divisor = (double)*divisor_dev;
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < parts; i += blockDim.x) s += part[i];
    s = block_sum_double(s, scratch);
    if (threadIdx.x == 0) out[0] = divisor > 0 ? (float)(s / divisor) : 0.f;
}

// Calls f(x, c) for each logit x (column c) of the row xr that this thread of its row group owns:
// as float4 loads when vec4 (C a multiple of 4, the rows 16-byte aligned; four times fewer loads
// and index computations on a 10 000-word vocabulary's rows), else one float at a time.
template <typename F>
__device__ __forceinline__ void for_each_logit(const float* xr, int64_t C, const RowGroup& g, bool vec4, F f) {
    if (vec4) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        for (int64_t c4 = g.tid; c4 < C / 4; c4 += g.width) {
            const float4 v = x4[c4];
            f(v.x, 4 * c4);
            f(v.y, 4 * c4 + 1);
            f(v.z, 4 * c4 + 2);
            f(v.w, 4 * c4 + 3);
        }
    } else {
        for (int64_t c = g.tid; c < C; c += g.width) f(xr[c], c);
    }
}

// −log p_c = lse − x_c, so a row needs its lse, its target logit and (smoothing) its mean logit.
template <bool kBlock>
__global__ void cross_entropy_forward_kernel(const float* logits, const int32_t* targets, double* row_loss,
                                             float* lse, int64_t rows, int64_t C, int32_t ignore_index,
                                             float smoothing, bool vec4) {
    SHARED_ARRAY(float, scratch, kRowThreads / kWarp);
    RowGroup g = row_group<kBlock>();
    for (int64_t r = g.first; r < rows; r += g.stride) {
        const float* xr = logits + r * C;
        float m = -INFINITY;
        for_each_logit(xr, C, g, vec4, [&](float x, int64_t) { m = fmaxf(m, x); });
        m = group_max<kBlock>(m, scratch);
        float s = 0.f, xs = 0.f;
        for_each_logit(xr, C, g, vec4, [&](float x, int64_t) {
            s += expf(x - m);
            xs += x;
        });
        s = group_sum<kBlock>(s, scratch);
        xs = group_sum<kBlock>(xs, scratch);
        if (g.tid == 0) {
            float l = m + logf(s);
            lse[r] = l;
            const int32_t t = targets[r];  // out of range: check_indices reports it; the row counts 0
            row_loss[r] = t == ignore_index || t < 0 || t >= C
                              ? 0.0
                              : (double)((1.f - smoothing) * (l - xr[t]) + smoothing * (l - xs / (float)C));
        }
    }
}

// (softmax − target distribution)·dloss/count, 0 on ignored rows; a row group per row (its target,
// lse and scale read once), float4 loads and stores when vec4.
template <bool kBlock>
__global__ void cross_entropy_backward_kernel(const float* logits, const int32_t* targets, const float* lse,
                                              const float* dloss, float* dlogits, int64_t rows, int64_t C,
                                              const int64_t* count_dev, int32_t ignore_index, float smoothing,
                                              bool vec4) {
    const int64_t count = *count_dev;
    const float g = count > 0 ? dloss[0] / (float)count : 0.f;
    const float uniform = smoothing / (float)C;
    RowGroup rg = row_group<kBlock>();
    for (int64_t r = rg.first; r < rows; r += rg.stride) {
        const int32_t t = targets[r];
        const bool ignored = t == ignore_index || t < 0 || t >= C;  // out of range: check_indices reports it
        const float l = lse[r];
        auto grad = [&](float x, int64_t c) {
            float d = 0.f;
            if (!ignored) {
                d = (expf(x - l) - uniform) * g;
                if (c == t) d -= (1.f - smoothing) * g;
            }
            return d;
        };
        const float* xr = logits + r * C;
        float* dr = dlogits + r * C;
        if (vec4) {
            const float4* x4 = reinterpret_cast<const float4*>(xr);
            float4* d4 = reinterpret_cast<float4*>(dr);
            for (int64_t c4 = rg.tid; c4 < C / 4; c4 += rg.width) {
                const float4 v = x4[c4];
                const int64_t c = 4 * c4;
                d4[c4] = float4{grad(v.x, c), grad(v.y, c + 1), grad(v.z, c + 2), grad(v.w, c + 3)};
            }
        } else {
            for (int64_t c = rg.tid; c < C; c += rg.width) dr[c] = grad(xr[c], c);
        }
    }
}

// mse pass 1: block b sums (pred − target)² over elements [b·kMseChunk, (b+1)·kMseChunk) in double.
constexpr int64_t kMseChunk = 8192;
__global__ void mse_partial_kernel(const float* pred, const float* target, double* partial, int64_t n,
                                   int64_t chunks) {
    SHARED_ARRAY(double, scratch, kRowThreads / kWarp);
    for (int64_t b = blockIdx.x; b < chunks; b += gridDim.x) {  // b depends on the block only
        int64_t end = (b + 1) * kMseChunk < n ? (b + 1) * kMseChunk : n;
        double s = 0.0;
        for (int64_t i = b * kMseChunk + threadIdx.x; i < end; i += blockDim.x) {
            double d = (double)pred[i] - (double)target[i];
            s += d * d;
        }
        s = block_sum_double(s, scratch);
        if (threadIdx.x == 0) partial[b] = s;
    }
}

__global__ void mse_backward_kernel(const float* pred, const float* target, const float* dloss, float* dpred,
                                    float* dtarget, int64_t n) {
    float scale = 2.f * dloss[0] / (float)n;
    GRID_STRIDE_LOOP(i, n) {
        float d = (pred[i] - target[i]) * scale;
        if (dpred) dpred[i] = d;
        if (dtarget) dtarget[i] = -d;
    }
}

// ---------------------------------------------------------------------------------------------
// attention

// Row r = (head, query i) of p holds the raw scores q·kᵀ. Scaled, softmax over the visible keys
// [0, visible), exactly 0 beyond (a query that sees no key: all 0); with dropout, also
// dropped = P ⊙ mask, the operand of the value product. These row-group kernels take rows longer
// than kRegsRowMax; shorter rows take the register kernels below.
template <bool kBlock>
__global__ void attention_softmax_kernel(float* p, const float* mask, float* dropped, int64_t rows, int64_t T,
                                         int64_t S, int64_t ldp, bool causal, float scale) {
    SHARED_ARRAY(float, scratch, kRowThreads / kWarp);
    RowGroup g = row_group<kBlock>();
    for (int64_t r = g.first; r < rows; r += g.stride) {
        float* pr = p + r * ldp;
        const int64_t visible = visible_keys(r % T, T, S, causal);
        float m = -INFINITY;
        for (int64_t j = g.tid; j < visible; j += g.width) m = fmaxf(m, pr[j] * scale);
        m = group_max<kBlock>(m, scratch);
        float s = 0.f;
        for (int64_t j = g.tid; j < visible; j += g.width) {
            float e = expf(pr[j] * scale - m);
            pr[j] = e;
            s += e;
        }
        s = group_sum<kBlock>(s, scratch);
        float inv = visible > 0 ? 1.f / s : 0.f;
        for (int64_t j = g.tid; j < S; j += g.width) {
            float v = j < visible ? pr[j] * inv : 0.f;
            pr[j] = v;
            if (mask) dropped[r * ldp + j] = v * mask[r * S + j];
        }
    }
}

// ds holds dP = dout·vᵀ on entry: dP ⊙= mask, then dS = P ⊙ (dP − Σ dP·P), times scale (the alpha
// of the dq and dk GEMMs on the CPU).
template <bool kBlock>
__global__ void attention_softmax_backward_kernel(const float* p, const float* mask, float* ds, int64_t rows,
                                                  int64_t S, int64_t ldp, float scale) {
    SHARED_ARRAY(float, scratch, kRowThreads / kWarp);
    RowGroup g = row_group<kBlock>();
    for (int64_t r = g.first; r < rows; r += g.stride) {
        const float* pr = p + r * ldp;
        float* dr = ds + r * ldp;
        float dot = 0.f;
        for (int64_t j = g.tid; j < S; j += g.width) {
            float d = mask ? dr[j] * mask[r * S + j] : dr[j];
            dr[j] = d;
            dot += d * pr[j];
        }
        dot = group_sum<kBlock>(dot, scratch);
        for (int64_t j = g.tid; j < S; j += g.width) dr[j] = pr[j] * (dr[j] - dot) * scale;
    }
}

// Edge keys. cuBLAS takes its fast tensor-core GEMMs only where the extent along each operand's
// contiguous dimension is a multiple of 16 bytes as well as its row stride: with S = 257 keys (ViT-
// Tiny's patch-2 tokens) every attention GEMM has 257 there (the key count is P's row length, the
// scores' row length, the rows of dk and dv) and an H100 ran all six in align1 kernels, which moved
// their P-sized operand at under 1 TB/s (8.3 of the step's 28.5 ms; P's padded rows did not help). So where
// S is not a multiple of 4 (16 bytes of fp32; 8 where the GEMMs read bf16 copies) the GEMMs take the
// keys [0, first), first = S rounded down to that, and the register row kernels take the edge
// [first, S), at most 7 keys, lane l key
// first + l in a register of its own: their scores (forward: q·k; backward: dP = dout·v) as warp
// dot products, and their share of the row's product (forward: out = Σ P·v over the edge, then the
// GEMM adds the rest with beta = 1; backward: dq the same with dS·k); attention_edge_backward_kernel
// gives dk's and dv's edge rows. e.y null: no product wanted (dq not needed); first == S: no edge.
struct EdgeKeys {
    int64_t first, S, T, D;  // edge keys [first, S); T queries; head dim D (a multiple of 32, <= 128)
    const float* rows;       // the queries' operand: q (forward) or dout (backward), T rows a head
    AttentionHeads rows_at;  // its layout
    const float* keys;       // the scored key rows: k (forward) or v (backward), layout in, S a head
    const float* mix;        // the mixed key rows: v (forward) or k (backward), layout in
    float* y;                // the mixture: out (forward, layout y_at) or dq (backward, layout in)
    AttentionHeads y_at, in;
};
constexpr int kEdgeChunks = 4;  // D / 32 at most (D <= 128)

// Lane l's edge score of row r (head r / T, query r % T): key first + l's, as the GEMM would give
// it, times scale; `none` for lanes past the edge and keys at or past `visible`.
__device__ float edge_score(const EdgeKeys& e, int64_t r, int64_t visible, float scale, float none) {
    const int64_t head = r / e.T, t = r % e.T, lane = threadIdx.x % kWarp;
    const float* a = e.rows + e.rows_at.offset(head, e.T) + t * e.rows_at.ld;
    const float* keys = e.keys + e.in.offset(head, e.S);
    float mine = none;
    for (int64_t j = e.first; j < e.S && j < visible; j++) {
        const float* b = keys + j * e.in.ld;
        float s = 0.f;
        for (int64_t d = lane; d < e.D; d += kWarp) s += a[d] * b[d];
        s = warp_sum(s) * scale;
        if (lane == j - e.first) mine = s;
    }
    return mine;
}

// Row r of e.y = Σ over the edge keys of w_j · mix_j, lane l holding w of key first + l. Every row
// is written, 0 where no edge key is visible, since the GEMM then adds to it.
__device__ void edge_mix(const EdgeKeys& e, int64_t r, float w) {
    if (!e.y) return;
    const int64_t head = r / e.T, t = r % e.T, lane = threadIdx.x % kWarp;
    const float* mix = e.mix + e.in.offset(head, e.S);
    float acc[kEdgeChunks] = {};
    for (int64_t j = e.first; j < e.S; j++) {
        const float wj = __shfl_sync(kFullMask, w, (int)(j - e.first));
        UNROLL
        for (int c = 0; c < kEdgeChunks; c++)
            if (c * kWarp < e.D) acc[c] += wj * mix[j * e.in.ld + c * kWarp + lane];
    }
    float* y = e.y + e.y_at.offset(head, e.T) + t * e.y_at.ld;
    UNROLL
    for (int c = 0; c < kEdgeChunks; c++)
        if (c * kWarp < e.D) y[c * kWarp + lane] = acc[c];
}

// The two kernels above for rows of at most 32·kPerLane keys (REGS_LAUNCH, up to kRegsRowMax), a
// warp per row with the row in registers: lane l keeps columns l, l + 32, ... So P is read once and
// written once (the kernels above pass over the row three and two times), and every load of a row
// is in flight at once: on an H100 the forward moved 1.9 TB/s and the backward 2.6 at ViT-Tiny's
// 257 keys (session 12), with the row kernels above a warp a row. Each element gets the same
// operations as there. The array holds the GEMMs' keys [0, e.first); the edge keys (EdgeKeys) are
// one more register a lane, so REGS_LAUNCH sizes the array for e.first (256 of ViT-Tiny's 257).
// kEdge: the *_edge_regs_kernel instantiations; without it the edge code is compiled out (it
// costs 16-26 registers a lane at 8 slots, two of the six blocks an SM they get without it).
template <int kPerLane, bool kEdge>
__device__ __forceinline__ void attention_softmax_regs(float* p, const float* mask, float* dropped, int64_t rows,
                                                       int64_t T, int64_t S, int64_t ldp, bool causal, float scale,
                                                       const EdgeKeys& e) {
    const RowGroup g = row_group<false>();
    const int64_t end = kEdge ? e.first : S;  // the keys in the array, [0, end)
    const int64_t je = kEdge ? e.first + g.tid : S;  // this lane's edge key (if < S)
    for (int64_t r = g.first; r < rows; r += g.stride) {
        float* pr = p + r * ldp;
        const int64_t visible = visible_keys(r % T, T, S, causal);
        float x[kPerLane];
        UNROLL
        for (int i = 0; i < kPerLane; i++) {
            const int64_t j = g.tid + (int64_t)kWarp * i;
            x[i] = j < visible && j < end ? pr[j] * scale : -INFINITY;
        }
        float xe = kEdge ? edge_score(e, r, visible, scale, -INFINITY) : -INFINITY, m = xe;  // (after the loads)
        UNROLL
        for (int i = 0; i < kPerLane; i++) m = fmaxf(m, x[i]);
        m = warp_max(m);
        float s = 0.f;
        UNROLL
        for (int i = 0; i < kPerLane; i++) {
            if (g.tid + (int64_t)kWarp * i >= visible) continue;
            x[i] = expf(x[i] - m);
            s += x[i];
        }
        if (je < visible) {
            xe = expf(xe - m);
            s += xe;
        }
        s = warp_sum(s);
        const float inv = visible > 0 ? 1.f / s : 0.f;
        UNROLL
        for (int i = 0; i < kPerLane; i++) {
            const int64_t j = g.tid + (int64_t)kWarp * i;
            if (j >= end) break;
            const float v = j < visible ? x[i] * inv : 0.f;
            pr[j] = v;
            if (mask) dropped[r * ldp + j] = v * mask[r * S + j];
        }
        if (!kEdge) continue;
        float we = 0.f;  // the edge key's weight in the value product
        if (je < S) {
            const float v = je < visible ? xe * inv : 0.f;
            pr[je] = v;
            we = mask ? v * mask[r * S + je] : v;
            if (mask) dropped[r * ldp + je] = we;
        }
        edge_mix(e, r, we);
    }
}

template <int kPerLane, bool kEdge>
__device__ __forceinline__ void attention_softmax_backward_regs(const float* p, const float* mask, float* ds,
                                                                int64_t rows, int64_t S, int64_t ldp, float scale,
                                                                const EdgeKeys& e) {
    const RowGroup g = row_group<false>();
    const int64_t end = kEdge ? e.first : S;  // the keys in the arrays, [0, end)
    const int64_t je = kEdge ? e.first + g.tid : S;  // this lane's edge key (if < S)
    for (int64_t r = g.first; r < rows; r += g.stride) {
        const float* pr = p + r * ldp;
        float* dr = ds + r * ldp;
        float pv[kPerLane], d[kPerLane], dot = 0.f;
        UNROLL
        for (int i = 0; i < kPerLane; i++) {
            const int64_t j = g.tid + (int64_t)kWarp * i;
            pv[i] = j < end ? pr[j] : 0.f;
            d[i] = j < end ? (mask ? dr[j] * mask[r * S + j] : dr[j]) : 0.f;
        }
        float de = kEdge ? edge_score(e, r, S, 1.f, 0.f) : 0.f;  // dP's edge: dout·v
        const float pe = je < S ? pr[je] : 0.f;
        if (mask && je < S) de *= mask[r * S + je];
        UNROLL
        for (int i = 0; i < kPerLane; i++)
            if (g.tid + (int64_t)kWarp * i < end) dot += d[i] * pv[i];
        if (je < S) dot += de * pe;
        dot = warp_sum(dot);
        UNROLL
        for (int i = 0; i < kPerLane; i++) {
            const int64_t j = g.tid + (int64_t)kWarp * i;
            if (j < end) dr[j] = pv[i] * (d[i] - dot) * scale;
        }
        if (!kEdge) continue;
        de = je < S ? pe * (de - dot) * scale : 0.f;
        if (je < S) dr[je] = de;
        edge_mix(e, r, de);  // dq's edge share, dS·k
    }
}

template <int kPerLane>
__global__ void attention_softmax_regs_kernel(float* p, const float* mask, float* dropped, int64_t rows, int64_t T,
                                              int64_t S, int64_t ldp, bool causal, float scale, EdgeKeys e) {
    attention_softmax_regs<kPerLane, false>(p, mask, dropped, rows, T, S, ldp, causal, scale, e);
}
template <int kPerLane>
__global__ void attention_softmax_edge_regs_kernel(float* p, const float* mask, float* dropped, int64_t rows,
                                                   int64_t T, int64_t S, int64_t ldp, bool causal, float scale,
                                                   EdgeKeys e) {
    attention_softmax_regs<kPerLane, true>(p, mask, dropped, rows, T, S, ldp, causal, scale, e);
}
template <int kPerLane>
__global__ void attention_softmax_backward_regs_kernel(const float* p, const float* mask, float* ds, int64_t rows,
                                                       int64_t S, int64_t ldp, float scale, EdgeKeys e) {
    attention_softmax_backward_regs<kPerLane, false>(p, mask, ds, rows, S, ldp, scale, e);
}
template <int kPerLane>
__global__ void attention_softmax_backward_edge_regs_kernel(const float* p, const float* mask, float* ds,
                                                            int64_t rows, int64_t S, int64_t ldp, float scale,
                                                            EdgeKeys e) {
    attention_softmax_backward_regs<kPerLane, true>(p, mask, ds, rows, S, ldp, scale, e);
}

// dv's and dk's edge rows j in [first, S): dv_j = Σ_t (P ⊙ mask)[t, j]·dout_t and dk_j =
// Σ_t dS[t, j]·q_t (ds, dk null: dv only; dv null: dk only). A block per (head, edge key): its 8
// warps take every 8th query, lane l the columns l, l + 32, ... of D, then the warps' sums are
// added in shared memory in a fixed order.
constexpr int kEdgeWarps = kRowThreads / kWarp;
__global__ void attention_edge_backward_kernel(const float* p, const float* mask, const float* ds, const float* q,
                                               const float* dout, float* dk, float* dv, int64_t BH, int64_t T,
                                               int64_t S, int64_t first, int64_t ldp, int64_t D, AttentionHeads in,
                                               AttentionHeads out_layout) {
    SHARED_ARRAY(float, partial, 2 * kEdgeWarps * kEdgeChunks * kWarp);
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int64_t edge = S - first;
    for (int64_t b = blockIdx.x; b < BH * edge; b += gridDim.x) {  // b depends on the block only
        const int64_t head = b / edge, j = first + b % edge;
        float acc_v[kEdgeChunks] = {}, acc_k[kEdgeChunks] = {};
        for (int64_t t = warp; t < T; t += kEdgeWarps) {
            const int64_t pt = (head * T + t) * ldp + j;
            const float* dout_t = dout + out_layout.offset(head, T) + t * out_layout.ld;
            const float* q_t = q + in.offset(head, T) + t * in.ld;
            const float pd = mask ? p[pt] * mask[(head * T + t) * S + j] : p[pt];
            const float dst = ds ? ds[pt] : 0.f;
            UNROLL
            for (int c = 0; c < kEdgeChunks; c++) {
                if (c * kWarp >= D) break;
                if (dv) acc_v[c] += pd * dout_t[c * kWarp + lane];
                if (dk) acc_k[c] += dst * q_t[c * kWarp + lane];
            }
        }
        float* mine = partial + warp * 2 * kEdgeChunks * kWarp;
        UNROLL
        for (int c = 0; c < kEdgeChunks; c++) {
            mine[c * kWarp + lane] = acc_v[c];
            mine[(kEdgeChunks + c) * kWarp + lane] = acc_k[c];
        }
        __syncthreads();
        for (int64_t i = threadIdx.x; i < 2 * D; i += blockDim.x) {  // i < D: dv column i; else dk column i − D
            const bool is_v = i < D;
            const int64_t col = is_v ? i : i - D;
            float* out = is_v ? dv : dk;
            if (!out) continue;
            const int64_t at = (is_v ? 0 : kEdgeChunks * kWarp) + col;
            float sum = 0.f;
            for (int w = 0; w < kEdgeWarps; w++) sum += partial[w * 2 * kEdgeChunks * kWarp + at];
            out[in.offset(head, S) + j * in.ld + col] = sum;
        }
        __syncthreads();  // the next key's partial sums overwrite these
    }
}

// ---------------------------------------------------------------------------------------------
// rope. A [T, D/2] table of cos and sign·sin computed in double as the CPU's (positions can be
// large), then one thread per (row, pair): consecutive threads take consecutive pairs (coalesced).

__global__ void rope_table_kernel(float* cos_t, float* sin_t, int64_t T, int64_t D, double base, int64_t start_pos,
                                  float sign) {
    int64_t half = D / 2;
    GRID_STRIDE_LOOP(k, T * half) {
        int64_t t = k / half, i = k % half;
        double angle = (double)(start_pos + t) * pow(base, -2.0 * (double)i / (double)D);
        cos_t[k] = (float)cos(angle);
        sin_t[k] = sign * (float)sin(angle);
    }
}

__global__ void rope_apply_kernel(const float* x, float* y, const float* cos_t, const float* sin_t, int64_t outer,
                                  int64_t T, int64_t D) {
    int64_t half = D / 2;
    GRID_STRIDE_LOOP(k, outer * T * half) {
        int64_t row = k / half, i = k % half;
        int64_t ti = (row % T) * half + i;
        float c = cos_t[ti], s = sin_t[ti];
        const float* xr = x + row * D;
        float* yr = y + row * D;
        float a = xr[i], b = xr[i + half];
        yr[i] = a * c - b * s;
        yr[i + half] = b * c + a * s;
    }
}

void rope_apply(const float* x, float* y, int64_t outer, int64_t T, int64_t D, float base, int64_t start_pos,
                float sign) {
    int64_t half = D / 2;
    if (outer * T * half == 0) return;
    Scratch<float> table(2 * T * half);
    float *cos_t = table.p, *sin_t = table.p + T * half;
    KERNEL_LAUNCH(rope_table_kernel, blocks_for(T * half), kBlockSize, 0, cos_t, sin_t, T, D, (double)base,
                  start_pos, sign);
    KERNEL_LAUNCH(rope_apply_kernel, blocks_for(outer * T * half), kBlockSize, 0, x, y, cos_t, sin_t, outer, T, D);
}

// ---------------------------------------------------------------------------------------------
// scale_shift_rope: h = fma(x, gamma, beta) (the CPU's bits), then rope's rotation of h (kRotate)
// or h itself. A unit is a pair (i, i + D/2) where there is a rotation, else one column. Forward:
// a thread per (row, unit).

template <bool kRotate>
__global__ void scale_shift_rope_forward_kernel(const float* x, const float* gamma, const float* beta, float* y,
                                                const float* cos_t, const float* sin_t, int64_t rows, int64_t T,
                                                int64_t D) {
    const int64_t units = kRotate ? D / 2 : D;
    GRID_STRIDE_LOOP(k, rows * units) {
        const int64_t row = k / units, i = k % units;
        const float* xr = x + row * D;
        float* yr = y + row * D;
        const float a = fmaf(xr[i], gamma[i], beta[i]);
        if (!kRotate) {
            yr[i] = a;
            continue;
        }
        const int64_t half = units, ti = (row % T) * half + i;
        const float c = cos_t[ti], s = sin_t[ti], b = fmaf(xr[i + half], gamma[i + half], beta[i + half]);
        yr[i] = a * c - b * s;
        yr[i + half] = b * c + a * s;
    }
}

// Backward: layer_norm_params_partial_kernel's layout, a block (32, 8) per (chunk of rows, tile of
// 32 units), dx written as the rows pass and the column sums of dh·x and dh met in shared memory
// in order: partial [chunks, 2, D] (Σ dh·x, then Σ dh), which layer_norm_params_final_kernel sums.
// cos_t/sin_t: the table of the negative angles (rope's backward rotation).
template <bool kRotate>
__global__ void scale_shift_rope_backward_kernel(const float* x, const float* gamma, const float* dy, float* dx,
                                                 bool accumulate, const float* cos_t, const float* sin_t,
                                                 float* partial, int64_t rows, int64_t T, int64_t D,
                                                 int64_t chunk_rows, int64_t chunks) {
    constexpr int kSums = kRotate ? 4 : 2;  // Σ dh·x and Σ dh of column i (and of i + D/2)
    SHARED_ARRAY(float, part, kSums * kLnTile * kLnRowsPerBlock);
    const int64_t units = kRotate ? D / 2 : D, tiles = (units + kLnTile - 1) / kLnTile, half = units;
    for (int64_t u = blockIdx.x; u < tiles * chunks; u += gridDim.x) {  // u depends on the block only
        const int64_t tile = u % tiles, c = u / tiles, i = tile * kLnTile + threadIdx.x;
        const int64_t begin = c * chunk_rows, end = begin + chunk_rows < rows ? begin + chunk_rows : rows;
        float sum[kSums] = {};
        if (i < units)
            for (int64_t r = begin + threadIdx.y; r < end; r += kLnRowsPerBlock) {
                const float* gr = dy + r * D;
                float dh[2] = {gr[i], 0.f};
                if (kRotate) {
                    const int64_t ti = (r % T) * half + i;
                    const float cs = cos_t[ti], sn = sin_t[ti], ga = gr[i], gb = gr[i + half];
                    dh[0] = ga * cs - gb * sn;
                    dh[1] = gb * cs + ga * sn;
                }
                for (int h = 0; h < kSums / 2; h++) {
                    const int64_t col = i + h * half;
                    if (dx) dx[r * D + col] = accumulate ? dx[r * D + col] + dh[h] * gamma[col] : dh[h] * gamma[col];
                    sum[2 * h] += dh[h] * x[r * D + col];
                    sum[2 * h + 1] += dh[h];
                }
            }
        if (partial) {
            const int at = threadIdx.y * kLnTile + threadIdx.x, stride = kLnTile * kLnRowsPerBlock;
            for (int k = 0; k < kSums; k++) part[k * stride + at] = sum[k];
            __syncthreads();
            if (threadIdx.y == 0 && i < units) {
                for (int w = 1; w < kLnRowsPerBlock; w++)
                    for (int k = 0; k < kSums; k++) sum[k] += part[k * stride + w * kLnTile + threadIdx.x];
                for (int h = 0; h < kSums / 2; h++) {
                    partial[c * 2 * D + i + h * half] = sum[2 * h];
                    partial[c * 2 * D + D + i + h * half] = sum[2 * h + 1];
                }
            }
            __syncthreads();  // the shared array is reused by the next unit
        }
    }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Host entry points.

void softmax_forward(const float* x, float* y, int64_t rows, int64_t n) {
    if (rows * n == 0) return;
    ROWS_LAUNCH(softmax_forward_kernel, rows, n, x, y, rows, n);
}

void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t n) {
    if (rows * n == 0) return;
    ROWS_LAUNCH(softmax_backward_kernel, rows, n, y, dy, dx, rows, n);
}

void log_softmax_forward(const float* x, float* y, int64_t rows, int64_t n) {
    if (rows * n == 0) return;
    ROWS_LAUNCH(log_softmax_forward_kernel, rows, n, x, y, rows, n);
}

void log_softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t n) {
    if (rows * n == 0) return;
    ROWS_LAUNCH(log_softmax_backward_kernel, rows, n, y, dy, dx, rows, n);
}

void layer_norm_forward(const float* x, const float* weight, const float* bias, float* y, float* mean,
                        float* rstd, int64_t rows, int64_t n, float eps) {
    if (rows == 0) return;
    if (n == 0) {  // as the CPU: mean 0/0 and rstd of it, NaN (y is empty)
        fill_f32(mean, NAN, rows);
        fill_f32(rstd, NAN, rows);
        return;
    }
    if (n <= kRegsRowMax)
        REGS_LAUNCH(layer_norm_forward_regs_kernel, rows, n, x, nullptr, weight, bias, nullptr, y, mean, rstd, rows, n,
                    eps);
    else
        ROWS_LAUNCH(layer_norm_forward_kernel, rows, n, x, weight, bias, y, mean, rstd, rows, n, eps);
}

void add_layer_norm_forward(const float* x, const float* residual, const float* weight, const float* bias,
                            float* sum, float* y, float* mean, float* rstd, int64_t rows, int64_t n, float eps) {
    if (rows == 0) return;
    if (n == 0) {  // as layer_norm_forward
        fill_f32(mean, NAN, rows);
        fill_f32(rstd, NAN, rows);
        return;
    }
    if (n <= kRegsRowMax)
        REGS_LAUNCH(layer_norm_forward_regs_kernel, rows, n, x, residual, weight, bias, sum, y, mean, rstd, rows, n,
                    eps);
    else
        ROWS_LAUNCH(add_layer_norm_forward_kernel, rows, n, x, residual, weight, bias, sum, y, mean, rstd, rows, n, eps);
}

// The rows a chunk of a parameter gradient's partial sums takes (layer_norm_backward's,
// scale_shift_rope_backward's): at least 64, and at most 1024 chunks, a count fixed by `rows` alone.
static int64_t param_chunk_rows(int64_t rows) {
    const int64_t chunk_rows = (rows + 1023) / 1024;
    return chunk_rows < 64 ? 64 : chunk_rows;
}

void layer_norm_backward(const float* x, const float* weight, const float* mean, const float* rstd,
                         const float* dy, float* dx, bool add_dx, float* dweight, float* dbias, int64_t rows,
                         int64_t n) {
    if (n == 0) return;
    // dx with the parameters' gradients in one pass where the row fits a warp's registers.
    const bool fused = dx && (dweight || dbias) && rows > 0 && n <= kLnFusedMax;
    if (dx && rows > 0 && !fused)
        ROWS_LAUNCH(layer_norm_backward_dx_kernel, rows, n, x, weight, mean, rstd, dy, dx, add_dx, rows, n);
    if (!dweight && !dbias) return;
    if (rows == 0) {  // empty sums
        if (dweight) memset_zero(dweight, sizeof(float) * n);
        if (dbias) memset_zero(dbias, sizeof(float) * n);
        return;
    }
    const int64_t chunk_rows = param_chunk_rows(rows), chunks = (rows + chunk_rows - 1) / chunk_rows;
    int64_t tiles = (n + kLnTile - 1) / kLnTile;
    Scratch<float> partial(chunks * 2 * n);
    if (fused) {
        // The fewest registers a lane needs for its columns: 32·kCols >= n.
        auto run = [&](auto launch_cols) {
            launch_cols(x, weight, mean, rstd, dy, dx, add_dx, partial.p, rows, n, chunk_rows, chunks);
        };
        if (n <= 32) run(layer_norm_backward_fused<1>);
        else if (n <= 64) run(layer_norm_backward_fused<2>);
        else if (n <= 128) run(layer_norm_backward_fused<4>);
        else if (n <= 192) run(layer_norm_backward_fused<6>);  // ViT-Tiny, DeiT-S's 384 / 2, ...
        else run(layer_norm_backward_fused<8>);
    } else {
        KERNEL_LAUNCH(layer_norm_params_partial_kernel, blocks_for(tiles * chunks, 1), dim3(kLnTile, kLnRowsPerBlock),
                      0, x, mean, rstd, dy, partial.p, rows, n, chunk_rows, chunks);
    }
    KERNEL_LAUNCH(layer_norm_params_final_kernel, blocks_for(n * kWarp), kBlockSize, 0, partial.p, dweight, dbias, n,
                  chunks);
}

void uniform_fill(float* out, int64_t n, uint64_t seed, uint64_t base, const uint64_t* base_shift) {
    if (n <= 0) return;
    KERNEL_LAUNCH(uniform_fill_kernel, blocks_for((n + 3) / 4), kBlockSize, 0, out, n, seed, base, base_shift);
}

void dropout_forward(const float* x, float* mask, float* y, int64_t n, float p) {
    if (n == 0) return;
    // p == 1 keeps nothing (u < 1 always); scale 0 there avoids 0·inf = NaN. Host-computed as the CPU.
    float scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
    KERNEL_LAUNCH(dropout_forward_kernel, blocks_for(n), kBlockSize, 0, x, mask, y, n, p, scale);
}

void dropout_backward(const float* mask, const float* dy, float* dx, int64_t n) {
    if (n == 0) return;
    KERNEL_LAUNCH(mul_kernel, blocks_for(n), kBlockSize, 0, dy, mask, dx, n);
}

// count: the targets that are not ignored, in device memory (count_targets writes it).
void cross_entropy_forward_counted(const float* logits, const int32_t* targets, float* loss, float* lse, int64_t rows,
                                   int64_t C, int32_t ignore_index, float smoothing, const int64_t* count) {
    Scratch<double> row_loss(rows);
    if (rows > 0)
        ROWS_LAUNCH(cross_entropy_forward_kernel, rows, C, logits, targets, row_loss.p, lse, rows, C, ignore_index,
                    smoothing, float4_ok(C, {logits}));
    KERNEL_LAUNCH(mean_kernel, 1, kRowThreads, 0, (const double*)row_loss.p, rows, loss, 0.0, count);
}

void cross_entropy_backward_counted(const float* logits, const int32_t* targets, const float* lse, const float* dloss,
                                    float* dlogits, int64_t rows, int64_t C, int32_t ignore_index, float smoothing,
                                    const int64_t* count) {
    if (rows * C == 0) return;
    ROWS_LAUNCH(cross_entropy_backward_kernel, rows, C, logits, targets, lse, dloss, dlogits, rows, C, count,
                ignore_index, smoothing, float4_ok(C, {logits, dlogits}));
}

// One block: the targets that are not ignore_index (a fixed tree: the same count every run).
__global__ void count_targets_kernel(const int32_t* targets, int64_t rows, int32_t ignore_index, int64_t* count) {
    SHARED_ARRAY(double, scratch, kRowThreads / kWarp);
    double c = 0.0;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) c += targets[r] != ignore_index ? 1.0 : 0.0;
    c = block_sum_double(c, scratch);
    if (threadIdx.x == 0) *count = (int64_t)c;
}

void count_targets(const int32_t* targets, int64_t rows, int32_t ignore_index, int64_t* count) {
    KERNEL_LAUNCH(count_targets_kernel, 1, kRowThreads, 0, targets, rows, ignore_index, count);
}

void mse_forward(const float* pred, const float* target, float* loss, int64_t n) {
    int64_t chunks = (n + kMseChunk - 1) / kMseChunk;
    Scratch<double> partial(chunks);
    if (chunks > 0)
        KERNEL_LAUNCH(mse_partial_kernel, blocks_for(chunks, 1), kRowThreads, 0, pred, target, partial.p, n, chunks);
    KERNEL_LAUNCH(mean_kernel, 1, kRowThreads, 0, (const double*)partial.p, chunks, loss, (double)n, (const int64_t*)nullptr);
}

void mse_backward(const float* pred, const float* target, const float* dloss, float* dpred, float* dtarget,
                  int64_t n) {
    if (n == 0 || (!dpred && !dtarget)) return;
    KERNEL_LAUNCH(mse_backward_kernel, blocks_for(n), kBlockSize, 0, pred, target, dloss, dpred, dtarget, n);
}

int64_t attention_p_stride(int64_t S) { return (S + 3) / 4 * 4; }

// P (and the dropped P and dS of the same shape) with rows of ldp = S rounded up to 4 floats: then
// every row and every head's matrix starts 16-byte aligned whatever S is (257 for ViT-Tiny's
// patch-2 tokens), which cuBLAS's fastest TF32 tensor-core kernels require of all operands (with
// extents to match: the edge keys above); the padding columns are never written nor read (each
// GEMM's K or N is at most S, its leading dimension ldp).
// dropped[r, j] = P[r, j]·mask[r, j] for the dv GEMM of the backward (mask rows unpadded).
__global__ void mask_rows_kernel(const float* p, const float* mask, float* dropped, int64_t rows, int64_t S,
                                 int64_t ldp) {
    GRID_STRIDE_LOOP(e, rows * S) {
        const int64_t r = e / S, j = e % S;
        dropped[r * ldp + j] = p[r * ldp + j] * mask[e];
    }
}

// The attention GEMMs, each one gemm_batched_layout over the BH heads (engine/cuda/matmul.h): q, k,
// v and their gradients where `in` says, out and dout where `out` says (engine/attention_layout.h),
// P and dS head-major [BH, T, ldp]. Token-major heads are groups of H matrices D apart, which
// cuBLAS takes as one call per head batched over b (or one call from address arrays).
namespace {
BatchLayout heads_at(const AttentionHeads& L, int64_t rows) {
    return L.heads ? BatchLayout{L.ld, L.D, L.heads, rows * L.ld} : BatchLayout{L.ld, rows * L.ld};
}

// Where the GEMMs' keys end ([0, first)) and the edge keys begin (EdgeKeys): S rounded down to the
// keys a 16-byte vector holds in the GEMMs' operands (8 where they are bf16 copies, else 4), where
// S is not a multiple of that and the register kernels take the rows (S <= kRegsRowMax), with D a
// multiple of 32 up to 128 (the edge kernels' lanes); else S, no edge.
int64_t gemm_keys(int64_t S, int64_t D) {
    const int64_t vector = gemm_precision() == GemmPrecision::bf16 && !bf16_fast_gemm_enabled() ? 8 : 4;
    if (S % vector == 0 || S < 8 || S > kRegsRowMax || D % kWarp || D > kEdgeChunks * kWarp) return S;
    if (!attention_edge_keys_enabled()) return S;
    return S / vector * vector;
}

std::atomic<int> g_edge_keys{-1};
std::atomic<uint64_t> g_edge_calls{0};
}  // namespace

bool attention_edge_keys_enabled() { return env_switch(g_edge_keys, "INITLAB_ATTENTION_EDGE_KEYS", true); }
void set_attention_edge_keys(bool on) { g_edge_keys.store(on ? 1 : 0, std::memory_order_relaxed); }
uint64_t attention_edge_key_calls() { return g_edge_calls.load(std::memory_order_relaxed); }

void attention_forward(const float* q, const float* k, const float* v, const float* mask, float* p, float* out,
                       int64_t BH, int64_t T, int64_t S, int64_t D, bool causal, float scale, AttentionHeads in,
                       AttentionHeads out_layout) {
    if (BH * T == 0 || D == 0) return;
    if (S == 0) {  // no keys: an empty product (out is packed: [B, T, H·D] or head-major)
        memset_zero(out, sizeof(float) * BH * T * D);
        return;
    }
    const int64_t ldp = attention_p_stride(S), first = gemm_keys(S, D);
    const AttentionHeads& L = in;
    const AttentionHeads& O = out_layout;
    const BatchLayout q_at = heads_at(L, T), kv_at = heads_at(L, S), out_at = heads_at(O, T), p_at{ldp, T * ldp};
    if (first < S) g_edge_calls.fetch_add(1, std::memory_order_relaxed);
    gemm_batched_layout(false, true, BH, T, first, D, q, q_at, k, kv_at, p, p_at);  // raw scores q·kᵀ
    Scratch<float> dropped(mask ? BH * T * ldp : 0);
    const EdgeKeys edge{first, S, T, D, q, L, k, v, first < S ? out : nullptr, O, L};
    if (first < S)
        REGS_LAUNCH(attention_softmax_edge_regs_kernel, BH * T, first, p, mask, dropped.p, BH * T, T, S, ldp, causal,
                    scale, edge);
    else if (S <= kRegsRowMax)
        REGS_LAUNCH(attention_softmax_regs_kernel, BH * T, S, p, mask, dropped.p, BH * T, T, S, ldp, causal, scale,
                    edge);
    else
        ROWS_LAUNCH(attention_softmax_kernel, BH * T, S, p, mask, dropped.p, BH * T, T, S, ldp, causal, scale);
    // out = P·v (plus the edge's share, written above)
    gemm_batched_layout(false, false, BH, T, D, first, mask ? dropped.p : p, p_at, v, kv_at, out, out_at,
                        first < S ? 1.f : 0.f);
}

void attention_backward(const float* q, const float* k, const float* v, const float* mask, const float* p,
                        const float* dout, float* dq, float* dk, float* dv, int64_t BH, int64_t T, int64_t S,
                        int64_t D, bool causal, float scale, AttentionHeads in, AttentionHeads out_layout) {
    if (BH == 0 || S == 0 || D == 0) return;
    if (T == 0) {  // no queries: dk and dv are empty sums (packed: with T == 0 < S, k and v are no
                   // column blocks of one projection with q)
        if (dk) memset_zero(dk, sizeof(float) * BH * S * D);
        if (dv) memset_zero(dv, sizeof(float) * BH * S * D);
        return;
    }
    const int64_t ldp = attention_p_stride(S), first = gemm_keys(S, D);
    const AttentionHeads& L = in;
    const AttentionHeads& O = out_layout;
    const BatchLayout q_at = heads_at(L, T), kv_at = heads_at(L, S), out_at = heads_at(O, T), p_at{ldp, T * ldp};
    // dk's and dv's edge rows (after dS, where dk is wanted)
    auto edge_rows = [&](const float* ds, float* dk_edge, float* dv_edge) {
        if (first == S || (!dk_edge && !dv_edge)) return;
        KERNEL_LAUNCH(attention_edge_backward_kernel, blocks_for(BH * (S - first), 1), kRowThreads, 0, p, mask, ds, q,
                      dout, dk_edge, dv_edge, BH, T, S, first, ldp, D, L, O);
    };
    if (dv) {  // dv = (P ⊙ mask)ᵀ·dout
        Scratch<float> dropped(mask ? BH * T * ldp : 0);
        if (mask) KERNEL_LAUNCH(mask_rows_kernel, blocks_for(BH * T * S), kBlockSize, 0, p, mask, dropped.p, BH * T, S, ldp);
        gemm_batched_layout(true, false, BH, first, D, T, mask ? dropped.p : p, p_at, dout, out_at, dv, kv_at);
    }
    if (!dq && !dk) {
        edge_rows(nullptr, nullptr, dv);
        return;
    }
    Scratch<float> ds(BH * T * ldp);
    gemm_batched_layout(false, true, BH, T, first, D, dout, out_at, v, kv_at, ds.p, p_at);  // dP = dout·vᵀ
    const EdgeKeys edge{first, S, T, D, dout, O, v, k, first < S ? dq : nullptr, L, L};
    if (first < S)
        REGS_LAUNCH(attention_softmax_backward_edge_regs_kernel, BH * T, first, p, mask, ds.p, BH * T, S, ldp, scale,
                    edge);
    else if (S <= kRegsRowMax)
        REGS_LAUNCH(attention_softmax_backward_regs_kernel, BH * T, S, p, mask, ds.p, BH * T, S, ldp, scale, edge);
    else
        ROWS_LAUNCH(attention_softmax_backward_kernel, BH * T, S, p, mask, ds.p, BH * T, S, ldp, scale);
    if (dq)  // dq = dS·k (plus the edge's share, written above)
        gemm_batched_layout(false, false, BH, T, D, first, ds.p, p_at, k, kv_at, dq, q_at, first < S ? 1.f : 0.f);
    if (dk)  // dk = dSᵀ·q
        gemm_batched_layout(true, false, BH, first, D, T, ds.p, p_at, q, q_at, dk, kv_at);
    edge_rows(ds.p, dk, dv);
}

void rope_forward(const float* x, float* y, int64_t outer, int64_t T, int64_t D, float base, int64_t start_pos) {
    rope_apply(x, y, outer, T, D, base, start_pos, 1.f);
}

void rope_backward(const float* dy, float* dx, int64_t outer, int64_t T, int64_t D, float base, int64_t start_pos) {
    rope_apply(dy, dx, outer, T, D, base, start_pos, -1.f);
}

// The rotation's [T, D/2] tables (sign −1: the backward's), or none (null) without a rotation.
static void affine_rope_table(Scratch<float>& table, int64_t T, int64_t D, float base, float sign) {
    if (base <= 0.f) return;
    const int64_t half = D / 2;
    KERNEL_LAUNCH(rope_table_kernel, blocks_for(T * half), kBlockSize, 0, table.p, table.p + T * half, T, D,
                  (double)base, (int64_t)0, sign);
}

void scale_shift_rope_forward(const float* x, const float* gamma, const float* beta, float* y, int64_t outer,
                              int64_t T, int64_t D, float base) {
    const int64_t rows = outer * T;
    if (rows * D == 0) return;
    const bool rotate = base > 0.f;
    Scratch<float> table(rotate ? T * D : 0);
    affine_rope_table(table, T, D, base, 1.f);
    const float *cos_t = table.p, *sin_t = rotate ? table.p + T * (D / 2) : nullptr;
    const unsigned grid = blocks_for(rows * (rotate ? D / 2 : D));
    if (rotate)
        KERNEL_LAUNCH(scale_shift_rope_forward_kernel<true>, grid, kBlockSize, 0, x, gamma, beta, y, cos_t, sin_t,
                      rows, T, D);
    else
        KERNEL_LAUNCH(scale_shift_rope_forward_kernel<false>, grid, kBlockSize, 0, x, gamma, beta, y, cos_t, sin_t,
                      rows, T, D);
}

void scale_shift_rope_backward(const float* x, const float* gamma, const float* dy, float* dx, bool accumulate,
                               float* dgamma, float* dbeta, int64_t outer, int64_t T, int64_t D, float base) {
    const int64_t rows = outer * T;
    if (D == 0) return;
    const bool sums = dgamma || dbeta;
    if (rows == 0) {  // empty sums
        if (dgamma) memset_zero(dgamma, sizeof(float) * D);
        if (dbeta) memset_zero(dbeta, sizeof(float) * D);
        return;
    }
    const bool rotate = base > 0.f;
    Scratch<float> table(rotate ? T * D : 0);
    affine_rope_table(table, T, D, base, -1.f);
    const float *cos_t = table.p, *sin_t = rotate ? table.p + T * (D / 2) : nullptr;
    const int64_t chunk_rows = param_chunk_rows(rows), chunks = (rows + chunk_rows - 1) / chunk_rows;
    const int64_t tiles = ((rotate ? D / 2 : D) + kLnTile - 1) / kLnTile;
    Scratch<float> partial(sums ? chunks * 2 * D : 0);
    const unsigned grid = blocks_for(tiles * chunks, 1);
    const dim3 block(kLnTile, kLnRowsPerBlock);
    if (rotate)
        KERNEL_LAUNCH(scale_shift_rope_backward_kernel<true>, grid, block, 0, x, gamma, dy, dx, accumulate, cos_t,
                      sin_t, partial.p, rows, T, D, chunk_rows, chunks);
    else
        KERNEL_LAUNCH(scale_shift_rope_backward_kernel<false>, grid, block, 0, x, gamma, dy, dx, accumulate, cos_t,
                      sin_t, partial.p, rows, T, D, chunk_rows, chunks);
    if (sums)
        KERNEL_LAUNCH(layer_norm_params_final_kernel, blocks_for(D * kWarp), kBlockSize, 0, partial.p, dgamma, dbeta,
                      D, chunks);
}

}  // namespace engine::cuda
