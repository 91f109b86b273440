// engine/cuda/reduce.cu: sum and max over the middle dim of [outer, n, inner] (engine/cuda/reduce.h).
//
// One set of kernels, templated on a reducer (the sum's double accumulator, or the max's value and
// index), covers both layouts:
//   - inner == 1 (each output reduces a contiguous row): one warp per row for rows up to
//     kWarpRowMax elements, one 256-thread block per row beyond; each thread strides the row by
//     the warp's or block's width (coalesced), then warp shuffles (and, for a block, the warps'
//     results through shared memory) combine the threads' partial results;
//   - inner > 1 (outputs are columns): a 32x8 block covers 32 neighbouring columns of one outer
//     index: the 32 threads of a warp read 32 consecutive floats of a row (coalesced), the 8 warps
//     take every 8th row, and the 8 partial results per column are combined through shared memory.
// A long sum with few outputs (e.g. the bias gradient of [65536, 3], or the sum of one big vector)
// would leave most of the GPU idle, so its rows are cut into chunks: a first pass writes one
// double per (output, chunk), a second sums the chunks.
//
// Every output's tree depends only on the shape (never on the grid size, no atomics): the results
// are the same bits on every run.
#include "engine/cuda/kernel.h"
#include "engine/cuda/reduce.h"

namespace engine::cuda {

constexpr int kReduceThreads = 256;    // rows kernels; a multiple of 32 so every warp is full
constexpr int kColTile = 32, kColRows = 8;  // cols kernel: 32 columns x 8 row slices
constexpr int64_t kWarpRowMax = 1024;  // rows up to this long get one warp, longer ones a block
// Chunking of long sums: only when there are fewer than kTargetUnits independent outputs (or
// column tiles) and rows are longer than kChunkMin; chunks are then at least kChunkMin / 2 long.
constexpr int64_t kTargetUnits = 256, kChunkMin = 4096;

// ---------------------------------------------------------------------------------------------
// Reducers. State is what one thread carries; start() gives a thread's initial state from the
// first element of its row or column (its index-0 element), add() takes element j, merge(a, b)
// combines two states, identity() merges as a no-op.

template <typename TIn, typename TOut>
struct SumReducer {
    using In = TIn;
    struct State { double s; };
    TOut* out;

    __device__ State start(const TIn*) const { return {0.0}; }
    __device__ static State identity() { return {0.0}; }
    __device__ static void add(State& st, TIn v, int64_t) { st.s += (double)v; }
    __device__ static State merge(State a, State b) { return {a.s + b.s}; }
    __device__ static State shfl_down(State a, unsigned off) { return {__shfl_down_sync(kFullMask, a.s, off)}; }
    __device__ void write(int64_t k, State st) const { out[k] = (TOut)st.s; }
};

// The CPU's serial loop keeps x[0] and replaces it only by a strictly greater element: the first
// maximum wins, a NaN at index 0 stays, later NaNs are skipped. Every thread starts from x[0] (so a
// NaN there makes every state NaN at index 0, and otherwise no state ever holds a NaN) and takes
// its elements, in increasing order, only when strictly greater; merge keeps the greater value
// and, on a tie, the smaller index: together the first index of the maximum, as on the CPU.
struct MaxReducer {
    using In = float;
    struct State { float v; int32_t i; };
    float* out;
    int32_t* argmax;

    __device__ State start(const float* first) const { return {first[0], 0}; }
    __device__ static State identity() { return {-INFINITY, 2147483647}; }
    __device__ static void add(State& st, float v, int64_t j) {
        if (v > st.v) { st.v = v; st.i = (int32_t)j; }
    }
    __device__ static State merge(State a, State b) {
        if (b.v > a.v || (!(a.v > b.v) && b.i < a.i)) return b;
        return a;
    }
    __device__ static State shfl_down(State a, unsigned off) {
        return {__shfl_down_sync(kFullMask, a.v, off), __shfl_down_sync(kFullMask, a.i, off)};
    }
    __device__ void write(int64_t k, State st) const {
        out[k] = st.v;
        argmax[k] = st.i;
    }
};

// Lane 0 ends with the merge of the warp's 32 states (a fixed tree).
template <typename R>
__device__ __forceinline__ typename R::State warp_merge(typename R::State st) {
    for (unsigned off = kWarp / 2; off > 0; off >>= 1) st = R::merge(st, R::shfl_down(st, off));
    return st;
}

// ---------------------------------------------------------------------------------------------
// Kernels. A "unit" is one (output, chunk) pair; without chunking (chunks == 1) it is one output.
// Unit u = o * chunks + c covers elements [c * chunk_len, min(n, (c + 1) * chunk_len)) of row o,
// and its result goes to out[u] (rows) or out[(o * chunks + c) * inner + i] (columns).

// inner == 1, one warp per unit. All lanes of a warp run the same iterations (u depends on the
// warp only), so the shuffles always have the full warp.
template <typename R>
__global__ void rows_warp_kernel(const typename R::In* x, R r, int64_t units, int64_t n, int64_t chunk_len,
                                 int64_t chunks) {
    int lane = threadIdx.x & (kWarp - 1);
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / kWarp;
    int64_t warps = ((int64_t)gridDim.x * blockDim.x) / kWarp;
    for (int64_t u = warp; u < units; u += warps) {
        int64_t o = u / chunks, begin = (u % chunks) * chunk_len;
        int64_t end = begin + chunk_len < n ? begin + chunk_len : n;
        const typename R::In* row = x + o * n;
        typename R::State st = r.start(row);
        for (int64_t j = begin + lane; j < end; j += kWarp) R::add(st, row[j], j);
        st = warp_merge<R>(st);
        if (lane == 0) r.write(u, st);
    }
}

// inner == 1, one block per unit (long rows). u depends on the block only, so every thread reaches
// the barriers.
template <typename R>
__global__ void rows_block_kernel(const typename R::In* x, R r, int64_t units, int64_t n, int64_t chunk_len,
                                  int64_t chunks) {
    SHARED_ARRAY(typename R::State, warp_states, kReduceThreads / kWarp);
    int lane = threadIdx.x & (kWarp - 1), warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
    for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
        int64_t o = u / chunks, begin = (u % chunks) * chunk_len;
        int64_t end = begin + chunk_len < n ? begin + chunk_len : n;
        const typename R::In* row = x + o * n;
        typename R::State st = r.start(row);
        for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) R::add(st, row[j], j);
        st = warp_merge<R>(st);
        if (lane == 0) warp_states[warp] = st;
        __syncthreads();
        if (warp == 0) {
            st = lane < warps ? warp_states[lane] : R::identity();
            st = warp_merge<R>(st);
            if (lane == 0) r.write(u, st);
        }
        __syncthreads();  // warp_states is reused by the next unit
    }
}

// inner > 1: block (32, 8) per (unit, tile of 32 columns).
template <typename R>
__global__ void cols_kernel(const typename R::In* x, R r, int64_t outer, int64_t n, int64_t inner,
                            int64_t chunk_len, int64_t chunks) {
    SHARED_ARRAY(typename R::State, part, kColTile * kColRows);
    int64_t tiles = (inner + kColTile - 1) / kColTile;
    int64_t total = outer * chunks * tiles;
    for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
        int64_t tile = t % tiles, u = t / tiles;  // u = o * chunks + c
        int64_t o = u / chunks, begin = (u % chunks) * chunk_len;
        int64_t end = begin + chunk_len < n ? begin + chunk_len : n;
        int64_t i = tile * kColTile + threadIdx.x;
        typename R::State st = R::identity();
        if (i < inner) {  // columns past the end still reach the barriers below
            const typename R::In* col = x + o * n * inner + i;
            st = r.start(col);
            for (int64_t j = begin + threadIdx.y; j < end; j += kColRows) R::add(st, col[j * inner], j);
        }
        part[threadIdx.y * kColTile + threadIdx.x] = st;
        __syncthreads();
        if (threadIdx.y == 0 && i < inner) {
            for (int k = 1; k < kColRows; k++) st = R::merge(st, part[k * kColTile + threadIdx.x]);
            r.write(u * inner + i, st);
        }
        __syncthreads();  // part is reused by the next tile
    }
}

// Runs reducer r over [outer, n, inner] cut into `chunks` chunks of chunk_len along n.
template <typename R>
static void launch_reduce(const typename R::In* x, R r, int64_t outer, int64_t n, int64_t inner, int64_t chunk_len,
                          int64_t chunks) {
    if (inner == 1) {
        int64_t units = outer * chunks;
        if (chunk_len <= kWarpRowMax)
            KERNEL_LAUNCH(rows_warp_kernel<R>, blocks_for(units * kWarp, kReduceThreads), kReduceThreads, 0, x, r,
                          units, n, chunk_len, chunks);
        else
            KERNEL_LAUNCH(rows_block_kernel<R>, blocks_for(units, 1), kReduceThreads, 0, x, r, units, n, chunk_len,
                          chunks);
        return;
    }
    int64_t tiles = (inner + kColTile - 1) / kColTile;
    KERNEL_LAUNCH(cols_kernel<R>, blocks_for(outer * chunks * tiles, 1), dim3(kColTile, kColRows), 0, x, r, outer, n,
                  inner, chunk_len, chunks);
}

// ---------------------------------------------------------------------------------------------

void sum_dim(const float* x, float* out, int64_t outer, int64_t n, int64_t inner) {
    if (outer == 0 || inner == 0) return;
    if (n == 0) {  // an empty sum is 0
        memset_zero(out, sizeof(float) * outer * inner);
        return;
    }
    int64_t units = inner == 1 ? outer : outer * ((inner + kColTile - 1) / kColTile);
    int64_t chunks = 1;
    if (n > kChunkMin && units < kTargetUnits) {
        chunks = (kTargetUnits + units - 1) / units;
        int64_t most = n / (kChunkMin / 2);  // chunks at least kChunkMin / 2 long
        if (chunks > most) chunks = most;
    }
    if (chunks <= 1) {
        launch_reduce(x, SumReducer<float, float>{out}, outer, n, inner, n, 1);
        return;
    }
    int64_t chunk_len = (n + chunks - 1) / chunks;
    chunks = (n + chunk_len - 1) / chunk_len;
    // Pass 1: [outer, chunks, inner] doubles (scratch from the stream-ordered pool, freed in stream
    // order); pass 2: their sum over the chunks (chunks <= kTargetUnits: never chunked again).
    double* partial = static_cast<double*>(alloc(sizeof(double) * outer * chunks * inner));
    launch_reduce(x, SumReducer<float, double>{partial}, outer, n, inner, chunk_len, chunks);
    launch_reduce(static_cast<const double*>(partial), SumReducer<double, float>{out}, outer, chunks, inner, chunks, 1);
    free(partial);
}

void max_dim(const float* x, float* out, int32_t* argmax, int64_t outer, int64_t n, int64_t inner) {
    if (outer == 0 || inner == 0 || n == 0) return;  // the op refuses n == 0
    launch_reduce(x, MaxReducer{out, argmax}, outer, n, inner, n, 1);
}

// One pass over dx (no memset first): each element is g where it was the argmax, else 0.
__global__ void max_dim_backward_kernel(const float* g, const int32_t* argmax, float* dx, int64_t n, int64_t inner,
                                        int64_t total) {
    GRID_STRIDE_LOOP(e, total) {
        int64_t i = e % inner, rest = e / inner;
        int64_t j = rest % n, o = rest / n;
        int64_t k = o * inner + i;
        dx[e] = argmax[k] == j ? g[k] : 0.f;
    }
}

void max_dim_backward(const float* g, const int32_t* argmax, float* dx, int64_t outer, int64_t n, int64_t inner) {
    int64_t total = outer * n * inner;
    if (total == 0) return;
    KERNEL_LAUNCH(max_dim_backward_kernel, blocks_for(total), kBlockSize, 0, g, argmax, dx, n, inner, total);
}

}  // namespace engine::cuda
