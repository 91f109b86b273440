// engine/cuda/flash_attention.cu: fused ("flash") attention, fp32, forward and backward
// (engine/cuda/flash_attention.h says what each entry point computes).
//
// Why: the unfused path (engine/cuda/nn.cu) writes the scores and the probabilities P [BH, T, S]
// to device memory, rewrites them in the softmax, keeps P for the backward and reads it (and dP,
// dS of the same size) there: at T = 256 that traffic dominates attention (docs/ROOFLINE.md).
// Here P only ever exists as a tile in shared memory: the forward uses the online softmax (a
// running row max m and sum l, the partial output rescaled by exp(m_old − m_new) when the max
// grows) and saves lse = m + log l per query; the backward recomputes P = exp(scale·q·kᵀ − lse)
// tile by tile.
//
// Kernels (one block = 128 threads = 16 row groups of 8 consecutive lanes):
//   flash_forward_kernel<D>  a block owns a tile of queries of one head, keeps q in shared memory
//                            and streams the head's keys and values through it in tiles.
//   flash_delta_kernel       Δ_i = rowsum(dout ⊙ out), one warp per row (the softmax backward's
//                            rowsum(dP ⊙ P) without P: the two are equal).
//   flash_dkdv_kernel<D>     a block owns a tile of keys, keeps k and v, streams q and dout; dk and
//                            dv accumulate in registers (dv = Pᵀ·dout, dk = dSᵀ·q·scale).
//   flash_dq_kernel<D>       a block owns a tile of queries, keeps q and dout, streams k and v
//                            (dq = dS·k·scale).
// Two backward kernels instead of one with atomics on dq: every output element is written by one
// thread with a sum in a fixed order, so the results are the same bits on every run. The price:
// both recompute the scores and dP, so the backward is 14·T·S·D FLOPs per head, against 8·T·S·D
// for the unfused GEMMs and 10·T·S·D for one kernel with atomics.
//
// Inside a block, the thread with row group g (threadIdx / 8) and lane l (threadIdx % 8) owns:
//   - of a score tile [rows × cols]: rows g·RPT .. g·RPT + RPT − 1 and columns l, l + 8, l + 16, ...
//     (RPT = rows / 16): the 8 lanes of a group hold one row between them, so the row max and sum
//     of the online softmax are three xor shuffles within the group;
//   - of an output tile [rows × D]: the same rows and head dims l, l + 8, ...: the rescale factor of
//     a row is in the registers of the threads that hold that row's outputs.
// A thread multiplies only its own rows of a score tile into the output (tile_accumulate), and those
// rows were written by the 8 lanes of its group, in its own warp: between writing a score tile and
// using it a __syncwarp() (which also orders the shared-memory accesses) is enough; the block
// barriers are around the loads of the shared k/v (q/dout) tiles that every warp reads.
// Shared tiles have a row stride of D + 1 (cols + 1 for score tiles): the rows a warp reads in one
// step then fall in different banks. Tiles are sized per D so that every kernel stays within
// 48 KiB of static shared memory (asserted below) with 128 threads per block.
//
// Masking: a key j is seen by query i when j < S and, causal, j <= i + S − T. Unseen scores are −inf
// in the forward (exp gives 0) and P = 0 in the backward. Rows and columns past T or S are loaded as
// zeros (never unwritten memory) and masked. With causal attention a block skips the key tiles its
// last query cannot see (forward, dq) and the query tiles before the first query that sees its first
// key (dk, dv). A query that sees no key ends with l = 0: its output row is 0 and its lse +inf, so
// its recomputed P is 0 and its gradients are 0.
//
// Math as the unfused path: accurate expf/logf, the scale applied to the raw dot product; sums in
// a different order (online softmax, per-tile accumulation), so results agree to fp32 rounding.
#include "engine/cuda/flash_attention.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string>
#include "engine/cuda/kernel.h"
#include "engine/profile.h"

// nvcc must unroll the loops over a thread's rows and columns to keep those arrays in registers
// (not local memory); g++ (the emulated build) does not know the pragma and would warn.
#ifdef ENGINE_CUDA_EMU
#define FLASH_UNROLL
#else
#define FLASH_UNROLL _Pragma("unroll")
#endif

namespace engine::cuda {
namespace {

constexpr int kThreads = 128;    // threads per block of the tiled kernels (4 warps)
constexpr int kGroupLanes = 8;   // consecutive lanes that share one row of a tile
constexpr int kGroups = kThreads / kGroupLanes;  // 16 row groups
constexpr int kMaxSharedFloats = (48 << 10) / 4;  // the static shared-memory limit of a block

// Tile sizes per head dim. Rows: what a block owns (queries in the forward and dq, keys in dk/dv);
// cols: what it streams. D = 128 needs smaller tiles to keep four [tile × (D + 1)] arrays in 48 KiB.
template <int D>
struct Tiles {
    static_assert(D == 32 || D == 64 || D == 128, "flash attention is compiled for head dims 32, 64, 128");
    static constexpr int kFwdRows = 32;
    static constexpr int kFwdCols = D <= 64 ? 32 : 16;
    static constexpr int kBwdRows = D <= 64 ? 32 : 16;
    static constexpr int kBwdCols = D <= 64 ? 32 : 16;
    static_assert(kFwdRows % kGroups == 0 && kBwdRows % kGroups == 0, "rows: a multiple of the row groups");
    static_assert(kFwdCols % kGroupLanes == 0 && kBwdCols % kGroupLanes == 0, "cols: a multiple of a group's lanes");
    // Shared floats: forward q, k, v tiles and P; dq: q, dout, k, v and dS; dk/dv: k, v, q, dout, P and dS.
    static constexpr int kFwdShared = (kFwdRows + 2 * kFwdCols) * (D + 1) + kFwdRows * (kFwdCols + 1);
    static constexpr int kBwdShared = 2 * (kBwdRows + kBwdCols) * (D + 1) + 2 * kBwdRows * (kBwdCols + 1);
    static_assert(kFwdShared <= kMaxSharedFloats && kBwdShared <= kMaxSharedFloats, "over 48 KiB of shared memory");
};

// Does query i see key j (both in range)?
__device__ __forceinline__ bool sees(int64_t i, int64_t j, int64_t T, int64_t S, bool causal) {
    return i < T && j < S && (!causal || j <= i + S - T);
}

// The keys [0, end) that at least one query of [q0, q0 + rows) sees.
__device__ __forceinline__ int64_t keys_seen_by(int64_t q0, int rows, int64_t T, int64_t S, bool causal) {
    if (!causal) return S;
    int64_t last = (q0 + rows < T ? q0 + rows : T) - 1;
    int64_t end = last + S - T + 1;
    return end < 0 ? 0 : (end > S ? S : end);
}

// Max and sum over the 8 lanes of a row group (lanes 8g .. 8g + 7 of a warp): xor butterflies that
// stay inside the group, so every lane of it ends with the same bits. All 32 lanes take part.
__device__ __forceinline__ float group_max(float v) {
    for (int off = kGroupLanes / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, off));
    return v;
}
__device__ __forceinline__ float group_sum(float v) {
    for (int off = kGroupLanes / 2; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
    return v;
}

// Rows [row0, row0 + ROWS) of a row-major [n, D] matrix into a shared tile of row stride D + 1;
// rows past n are zeros. Consecutive threads read consecutive floats (coalesced).
template <int D, int ROWS>
__device__ __forceinline__ void load_rows(float* tile, const float* src, int64_t row0, int64_t n) {
    for (int e = (int)threadIdx.x; e < ROWS * D; e += kThreads) {
        int r = e / D, c = e % D;
        tile[r * (D + 1) + c] = row0 + r < n ? src[(row0 + r) * D + c] : 0.f;
    }
}

// acc[r][c] = Σ_d A[g·RPT + r][d]·B[l + 8c][d]: the thread's block of A·Bᵀ for shared tiles A and B
// of row stride D + 1 (within a warp, the A rows are 4 addresses read by 8 lanes each, the B rows
// 8 addresses in 8 different banks).
template <int D, int RPT, int CPT>
__device__ __forceinline__ void tile_dots(const float* A, const float* B, int g, int l, float (&acc)[RPT][CPT]) {
    FLASH_UNROLL
    for (int r = 0; r < RPT; r++) {
        FLASH_UNROLL
        for (int c = 0; c < CPT; c++) acc[r][c] = 0.f;
    }
    const float* a = A + g * RPT * (D + 1);
    const float* b = B + l * (D + 1);
    for (int d = 0; d < D; d++) {
        float av[RPT], bv[CPT];
        FLASH_UNROLL
        for (int r = 0; r < RPT; r++) av[r] = a[r * (D + 1) + d];
        FLASH_UNROLL
        for (int c = 0; c < CPT; c++) bv[c] = b[c * kGroupLanes * (D + 1) + d];
        FLASH_UNROLL
        for (int r = 0; r < RPT; r++) {
            FLASH_UNROLL
            for (int c = 0; c < CPT; c++) acc[r][c] = fmaf(av[r], bv[c], acc[r][c]);
        }
    }
}

// acc[r][e] += Σ_j W[g·RPT + r][j]·X[j][l + 8e], j < COLS: the thread's rows of W·X at its head dims,
// for a score tile W of row stride COLS + 1 and a shared tile X of row stride D + 1.
template <int D, int COLS, int RPT>
__device__ __forceinline__ void tile_accumulate(const float* W, const float* X, int g, int l,
                                                float (&acc)[RPT][D / kGroupLanes]) {
    const float* w = W + g * RPT * (COLS + 1);
    const float* x = X + l;
    for (int j = 0; j < COLS; j++) {
        float wv[RPT];
        FLASH_UNROLL
        for (int r = 0; r < RPT; r++) wv[r] = w[r * (COLS + 1) + j];
        FLASH_UNROLL
        for (int e = 0; e < D / kGroupLanes; e++) {
            const float xv = x[j * (D + 1) + e * kGroupLanes];
            FLASH_UNROLL
            for (int r = 0; r < RPT; r++) acc[r][e] = fmaf(wv[r], xv, acc[r][e]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Forward. Grid: BH · q_tiles blocks, the tiles of one head adjacent (they read the same k and v,
// which then come from L2).

template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(const float* q, const float* k, const float* v, float* out, float* lse, int64_t T,
                         int64_t S, bool causal, float scale, int64_t q_tiles) {
    constexpr int R = Tiles<D>::kFwdRows, C = Tiles<D>::kFwdCols;
    constexpr int RPT = R / kGroups, CPT = C / kGroupLanes, DPT = D / kGroupLanes;
    SHARED_ARRAY(float, q_s, R * (D + 1));
    SHARED_ARRAY(float, k_s, C * (D + 1));
    SHARED_ARRAY(float, v_s, C * (D + 1));
    SHARED_ARRAY(float, p_s, R * (C + 1));
    const int64_t bh = (int64_t)blockIdx.x / q_tiles, q0 = (int64_t)blockIdx.x % q_tiles * R;
    const int g = (int)threadIdx.x / kGroupLanes, l = (int)threadIdx.x % kGroupLanes;
    q += bh * T * D;
    out += bh * T * D;
    lse += bh * T;
    k += bh * S * D;
    v += bh * S * D;

    load_rows<D, R>(q_s, q, q0, T);
    float m[RPT], sum[RPT], o[RPT][DPT];
    FLASH_UNROLL
    for (int r = 0; r < RPT; r++) {
        m[r] = -INFINITY;
        sum[r] = 0.f;
        FLASH_UNROLL
        for (int e = 0; e < DPT; e++) o[r][e] = 0.f;
    }
    const int64_t k_end = keys_seen_by(q0, R, T, S, causal);
    for (int64_t k0 = 0; k0 < k_end; k0 += C) {
        __syncthreads();  // the previous tile's k, v and P are no longer read (first time: q is in place)
        load_rows<D, C>(k_s, k, k0, S);
        load_rows<D, C>(v_s, v, k0, S);
        __syncthreads();
        float s[RPT][CPT];
        tile_dots<D, RPT, CPT>(q_s, k_s, g, l, s);
        FLASH_UNROLL
        for (int r = 0; r < RPT; r++) {
            const int64_t i = q0 + g * RPT + r;
            float tile_max = -INFINITY;
            FLASH_UNROLL
            for (int c = 0; c < CPT; c++) {
                s[r][c] = sees(i, k0 + l + c * kGroupLanes, T, S, causal) ? s[r][c] * scale : -INFINITY;
                tile_max = fmaxf(tile_max, s[r][c]);
            }
            const float m_new = fmaxf(m[r], group_max(tile_max));
            // A row that has seen no key yet keeps m = −inf; exponents relative to 0 then give
            // exp(−inf) = 0 instead of exp(−inf + inf) = NaN.
            const float base = m_new == -INFINITY ? 0.f : m_new;
            const float alpha = expf(m[r] - base);  // rescales what was summed against the old max
            float tile_sum = 0.f;
            FLASH_UNROLL
            for (int c = 0; c < CPT; c++) {
                const float p = expf(s[r][c] - base);
                p_s[(g * RPT + r) * (C + 1) + l + c * kGroupLanes] = p;
                tile_sum += p;
            }
            sum[r] = sum[r] * alpha + group_sum(tile_sum);
            m[r] = m_new;
            FLASH_UNROLL
            for (int e = 0; e < DPT; e++) o[r][e] *= alpha;
        }
        __syncwarp();  // this thread's P rows are written (by its group's lanes, in its own warp)
        tile_accumulate<D, C, RPT>(p_s, v_s, g, l, o);
    }

    FLASH_UNROLL
    for (int r = 0; r < RPT; r++) {
        const int64_t i = q0 + g * RPT + r;
        if (i >= T) continue;
        // sum >= 1 once a key is seen (the max contributes exp(0)); 0 means none was.
        const float inv = sum[r] > 0.f ? 1.f / sum[r] : 0.f;
        FLASH_UNROLL
        for (int e = 0; e < DPT; e++) out[i * D + l + e * kGroupLanes] = o[r][e] * inv;
        if (l == 0) lse[i] = sum[r] > 0.f ? m[r] + logf(sum[r]) : INFINITY;
    }
}

// ---------------------------------------------------------------------------------------------
// Backward.

// delta[r] = Σ_d out[r, d]·dout[r, d], one warp per row (lanes stride the row, xor-butterfly sum).
__global__ void flash_delta_kernel(const float* out, const float* dout, float* delta, int64_t rows, int64_t D) {
    const int lane = (int)threadIdx.x % 32;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; r < rows; r += warps) {
        float s = 0.f;
        for (int64_t d = lane; d < D; d += 32) s = fmaf(out[r * D + d], dout[r * D + d], s);
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(kFullMask, s, off);
        if (lane == 0) delta[r] = s;
    }
}

// dk and dv of a tile of keys. Grid: BH · k_tiles blocks. Rows of its tiles are keys, columns queries.
template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_dkdv_kernel(const float* q, const float* k, const float* v, const float* dout, const float* lse,
                      const float* delta, float* dk, float* dv, int64_t T, int64_t S, bool causal, float scale,
                      int64_t k_tiles) {
    constexpr int R = Tiles<D>::kBwdRows, C = Tiles<D>::kBwdCols;
    constexpr int RPT = R / kGroups, CPT = C / kGroupLanes, DPT = D / kGroupLanes;
    SHARED_ARRAY(float, k_s, R * (D + 1));
    SHARED_ARRAY(float, v_s, R * (D + 1));
    SHARED_ARRAY(float, q_s, C * (D + 1));
    SHARED_ARRAY(float, do_s, C * (D + 1));
    SHARED_ARRAY(float, p_s, R * (C + 1));   // Pᵀ tile: [key][query]
    SHARED_ARRAY(float, ds_s, R * (C + 1));  // dSᵀ tile
    const int64_t bh = (int64_t)blockIdx.x / k_tiles, k0 = (int64_t)blockIdx.x % k_tiles * R;
    const int g = (int)threadIdx.x / kGroupLanes, l = (int)threadIdx.x % kGroupLanes;
    q += bh * T * D;
    dout += bh * T * D;
    lse += bh * T;
    delta += bh * T;
    k += bh * S * D;
    v += bh * S * D;

    load_rows<D, R>(k_s, k, k0, S);
    load_rows<D, R>(v_s, v, k0, S);
    float dk_acc[RPT][DPT], dv_acc[RPT][DPT];
    FLASH_UNROLL
    for (int r = 0; r < RPT; r++) {
        FLASH_UNROLL
        for (int e = 0; e < DPT; e++) dk_acc[r][e] = dv_acc[r][e] = 0.f;
    }
    // The first query that sees key k0 (the block's smallest); causal, earlier queries see none of the tile.
    int64_t i_begin = causal ? k0 - (S - T) : 0;
    if (i_begin < 0) i_begin = 0;
    for (int64_t i0 = i_begin; i0 < T; i0 += C) {
        __syncthreads();  // the previous tile's q, dout, P and dS are no longer read
        load_rows<D, C>(q_s, q, i0, T);
        load_rows<D, C>(do_s, dout, i0, T);
        __syncthreads();
        float s[RPT][CPT], dp[RPT][CPT], col_lse[CPT], col_delta[CPT];
        tile_dots<D, RPT, CPT>(k_s, q_s, g, l, s);    // (k·qᵀ)[key][query]
        tile_dots<D, RPT, CPT>(v_s, do_s, g, l, dp);  // (v·doutᵀ)[key][query] = dPᵀ
        FLASH_UNROLL
        for (int c = 0; c < CPT; c++) {
            const int64_t i = i0 + l + c * kGroupLanes;
            col_lse[c] = i < T ? lse[i] : INFINITY;
            col_delta[c] = i < T ? delta[i] : 0.f;
        }
        FLASH_UNROLL
        for (int r = 0; r < RPT; r++) {
            FLASH_UNROLL
            for (int c = 0; c < CPT; c++) {
                const bool seen = sees(i0 + l + c * kGroupLanes, k0 + g * RPT + r, T, S, causal);
                const float p = seen ? expf(s[r][c] * scale - col_lse[c]) : 0.f;
                const int at = (g * RPT + r) * (C + 1) + l + c * kGroupLanes;
                p_s[at] = p;
                ds_s[at] = p * (dp[r][c] - col_delta[c]);
            }
        }
        __syncwarp();  // this thread's Pᵀ and dSᵀ rows are written (by its group, in its warp)
        tile_accumulate<D, C, RPT>(p_s, do_s, g, l, dv_acc);   // dv += Pᵀ·dout
        tile_accumulate<D, C, RPT>(ds_s, q_s, g, l, dk_acc);   // dk += dSᵀ·q
    }

    FLASH_UNROLL
    for (int r = 0; r < RPT; r++) {
        const int64_t j = k0 + g * RPT + r;
        if (j >= S) continue;
        FLASH_UNROLL
        for (int e = 0; e < DPT; e++) {
            const int64_t at = (bh * S + j) * D + l + e * kGroupLanes;
            if (dv) dv[at] = dv_acc[r][e];
            if (dk) dk[at] = dk_acc[r][e] * scale;
        }
    }
}

// dq of a tile of queries. Grid: BH · q_tiles blocks. Rows of its tiles are queries, columns keys.
template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_dq_kernel(const float* q, const float* k, const float* v, const float* dout, const float* lse,
                    const float* delta, float* dq, int64_t T, int64_t S, bool causal, float scale, int64_t q_tiles) {
    constexpr int R = Tiles<D>::kBwdRows, C = Tiles<D>::kBwdCols;
    constexpr int RPT = R / kGroups, CPT = C / kGroupLanes, DPT = D / kGroupLanes;
    SHARED_ARRAY(float, q_s, R * (D + 1));
    SHARED_ARRAY(float, do_s, R * (D + 1));
    SHARED_ARRAY(float, k_s, C * (D + 1));
    SHARED_ARRAY(float, v_s, C * (D + 1));
    SHARED_ARRAY(float, ds_s, R * (C + 1));
    const int64_t bh = (int64_t)blockIdx.x / q_tiles, q0 = (int64_t)blockIdx.x % q_tiles * R;
    const int g = (int)threadIdx.x / kGroupLanes, l = (int)threadIdx.x % kGroupLanes;
    q += bh * T * D;
    dout += bh * T * D;
    dq += bh * T * D;
    lse += bh * T;
    delta += bh * T;
    k += bh * S * D;
    v += bh * S * D;

    load_rows<D, R>(q_s, q, q0, T);
    load_rows<D, R>(do_s, dout, q0, T);
    float row_lse[RPT], row_delta[RPT], acc[RPT][DPT];
    FLASH_UNROLL
    for (int r = 0; r < RPT; r++) {
        const int64_t i = q0 + g * RPT + r;
        row_lse[r] = i < T ? lse[i] : INFINITY;
        row_delta[r] = i < T ? delta[i] : 0.f;
        FLASH_UNROLL
        for (int e = 0; e < DPT; e++) acc[r][e] = 0.f;
    }
    const int64_t k_end = keys_seen_by(q0, R, T, S, causal);
    for (int64_t k0 = 0; k0 < k_end; k0 += C) {
        __syncthreads();  // the previous tile's k, v and dS are no longer read
        load_rows<D, C>(k_s, k, k0, S);
        load_rows<D, C>(v_s, v, k0, S);
        __syncthreads();
        float s[RPT][CPT], dp[RPT][CPT];
        tile_dots<D, RPT, CPT>(q_s, k_s, g, l, s);    // q·kᵀ
        tile_dots<D, RPT, CPT>(do_s, v_s, g, l, dp);  // dP = dout·vᵀ
        FLASH_UNROLL
        for (int r = 0; r < RPT; r++) {
            FLASH_UNROLL
            for (int c = 0; c < CPT; c++) {
                const bool seen = sees(q0 + g * RPT + r, k0 + l + c * kGroupLanes, T, S, causal);
                const float p = seen ? expf(s[r][c] * scale - row_lse[r]) : 0.f;
                ds_s[(g * RPT + r) * (C + 1) + l + c * kGroupLanes] = p * (dp[r][c] - row_delta[r]);
            }
        }
        __syncwarp();  // this thread's dS rows are written (by its group, in its warp)
        tile_accumulate<D, C, RPT>(ds_s, k_s, g, l, acc);  // dq += dS·k
    }

    FLASH_UNROLL
    for (int r = 0; r < RPT; r++) {
        const int64_t i = q0 + g * RPT + r;
        if (i >= T) continue;
        FLASH_UNROLL
        for (int e = 0; e < DPT; e++) dq[i * D + l + e * kGroupLanes] = acc[r][e] * scale;
    }
}

// ---------------------------------------------------------------------------------------------
// Host side.

std::atomic<uint64_t> g_forward_calls{0}, g_backward_calls{0};
std::atomic<int> g_fused{-1};  // -1: not decided yet (the environment is read at the first question)

// Blocks of a [BH × tiles] grid, as one grid dimension (x allows 2^31 − 1; y and z only 65535).
dim3 grid_of(int64_t BH, int64_t tiles, const char* what) {
    int64_t blocks = BH * tiles;
    if (blocks > 2147483647)
        fail(std::string(what) + ": " + std::to_string(blocks) + " blocks, more than a grid holds");
    return dim3((unsigned)blocks);
}

template <int D>
void forward_for(const float* q, const float* k, const float* v, float* out, float* lse, int64_t BH, int64_t T,
                 int64_t S, bool causal, float scale) {
    const int64_t tiles = (T + Tiles<D>::kFwdRows - 1) / Tiles<D>::kFwdRows;
    KERNEL_LAUNCH(flash_forward_kernel<D>, grid_of(BH, tiles, "flash attention forward"), kThreads, 0, q, k, v, out,
                  lse, T, S, causal, scale, tiles);
}

template <int D>
void backward_for(const float* q, const float* k, const float* v, const float* dout, const float* lse,
                  const float* delta, float* dq, float* dk, float* dv, int64_t BH, int64_t T, int64_t S, bool causal,
                  float scale) {
    if (dk || dv) {
        const int64_t tiles = (S + Tiles<D>::kBwdRows - 1) / Tiles<D>::kBwdRows;
        KERNEL_LAUNCH(flash_dkdv_kernel<D>, grid_of(BH, tiles, "flash attention dk/dv"), kThreads, 0, q, k, v, dout,
                      lse, delta, dk, dv, T, S, causal, scale, tiles);
    }
    if (dq) {
        const int64_t tiles = (T + Tiles<D>::kBwdRows - 1) / Tiles<D>::kBwdRows;
        KERNEL_LAUNCH(flash_dq_kernel<D>, grid_of(BH, tiles, "flash attention dq"), kThreads, 0, q, k, v, dout, lse,
                      delta, dq, T, S, causal, scale, tiles);
    }
}

[[noreturn]] void unsupported(int64_t D) {
    fail("flash attention: head dim " + std::to_string(D) + " has no kernel (32, 64 or 128; attention falls back " +
         "to the unfused path for the others)");
}

}  // namespace

bool flash_attention_supports(int64_t D) { return D == 32 || D == 64 || D == 128; }

bool fused_attention_enabled() {
    int on = g_fused.load(std::memory_order_relaxed);
    if (on < 0) {
        const char* env = std::getenv("INITLAB_FUSED_ATTENTION");
        int want = env && env[0] == '1' ? 1 : 0;
        g_fused.compare_exchange_strong(on, want);  // a concurrent set_fused_attention wins
        on = g_fused.load(std::memory_order_relaxed);
    }
    return on == 1;
}

void set_fused_attention(bool on) { g_fused.store(on ? 1 : 0, std::memory_order_relaxed); }

FlashAttentionCalls flash_attention_calls() {
    FlashAttentionCalls c;
    c.forward = g_forward_calls.load(std::memory_order_relaxed);
    c.backward = g_backward_calls.load(std::memory_order_relaxed);
    return c;
}

void flash_attention_forward(const float* q, const float* k, const float* v, float* out, float* lse, int64_t BH,
                             int64_t T, int64_t S, int64_t D, bool causal, float scale) {
    if (!flash_attention_supports(D)) unsupported(D);
    g_forward_calls.fetch_add(1, std::memory_order_relaxed);
    if (BH * T == 0) return;
    if (S == 0) {  // no keys: every query sees none
        memset_zero(out, sizeof(float) * (size_t)(BH * T * D));
        fill_f32(lse, INFINITY, BH * T);
        return;
    }
    // The FLOPs of the unfused path's two GEMMs (scores, P·v): the work the model asks for.
    profile::note_flops(4.0 * (double)BH * (double)T * (double)S * (double)D);
    switch (D) {
        case 32: forward_for<32>(q, k, v, out, lse, BH, T, S, causal, scale); break;
        case 64: forward_for<64>(q, k, v, out, lse, BH, T, S, causal, scale); break;
        default: forward_for<128>(q, k, v, out, lse, BH, T, S, causal, scale); break;
    }
}

void flash_attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                              const float* dout, float* dq, float* dk, float* dv, int64_t BH, int64_t T, int64_t S,
                              int64_t D, bool causal, float scale) {
    if (!flash_attention_supports(D)) unsupported(D);
    g_backward_calls.fetch_add(1, std::memory_order_relaxed);
    if (BH == 0 || S == 0) return;
    if (T == 0) {  // no queries: dk and dv are empty sums
        if (dk) memset_zero(dk, sizeof(float) * (size_t)(BH * S * D));
        if (dv) memset_zero(dv, sizeof(float) * (size_t)(BH * S * D));
        return;
    }
    if (!dq && !dk && !dv) return;
    // The FLOPs of the GEMMs the unfused backward would run for the same outputs (dv = Pᵀ·dout;
    // dP = dout·vᵀ; dq = dS·k; dk = dSᵀ·q), not the recomputation: MFU stays comparable.
    const double gemm = 2.0 * (double)BH * (double)T * (double)S * (double)D;
    profile::note_flops(gemm * ((dv ? 1 : 0) + (dq || dk ? 1 : 0) + (dq ? 1 : 0) + (dk ? 1 : 0)));

    const int64_t rows = BH * T;
    float* delta = static_cast<float*>(alloc(sizeof(float) * (size_t)rows));
    try {
        KERNEL_LAUNCH(flash_delta_kernel, blocks_for(rows * 32), kBlockSize, 0, out, dout, delta, rows, D);
        switch (D) {
            case 32: backward_for<32>(q, k, v, dout, lse, delta, dq, dk, dv, BH, T, S, causal, scale); break;
            case 64: backward_for<64>(q, k, v, dout, lse, delta, dq, dk, dv, BH, T, S, causal, scale); break;
            default: backward_for<128>(q, k, v, dout, lse, delta, dq, dk, dv, BH, T, S, causal, scale); break;
        }
    } catch (...) {
        free(delta);
        throw;
    }
    free(delta);  // stream-ordered: after the kernels that read it
}

}  // namespace engine::cuda
