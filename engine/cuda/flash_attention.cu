// engine/cuda/flash_attention.cu: fused ("flash") attention, forward and backward
// (engine/cuda/flash_attention.h says what each entry point computes). Two sets of kernels: the
// fp32-core ones described here (gemm_precision() fp32), and further down the tensor-core ones
// (flash_tc_*: wmma products with TF32 inputs under tf32, bf16 inputs under bf16).
//
// Why: the unfused path (engine/cuda/nn.cu) writes the scores and the probabilities P [BH, T, S]
// to device memory, rewrites them in the softmax, keeps P for the backward and reads it (and dP,
// dS of the same size) there: at T = 256 that traffic dominates attention (docs/ROOFLINE.md).
// Here P only ever exists as a tile in shared memory: the forward uses the online softmax (a
// running row max m and sum l, the partial output rescaled by exp(m_old − m_new) when the max
// grows) and saves lse = m + log l per query; the backward recomputes P = exp(scale·q·kᵀ − lse)
// tile by tile.
//
// Both sets address a head's rows through the layouts of engine/attention_layout.h (AttentionHeads:
// head-major [BH, rows, D], or token-major with rows ld floats apart), so q, k and v may be column
// blocks of one [B, T, 3·H·D] projection and out [B, T, H·D]: attention_qkv and attention_tokens
// call them with no permute on either side. lse and Δ are [BH, T] either way.
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

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cuda_bf16.h>
#include <cuda_pipeline_primitives.h>
#include <initializer_list>
#include <mma.h>
#include <string>
#include <type_traits>
#include "engine/cuda/kernel.h"
#include "engine/cuda/matmul.h"
#include "engine/profile.h"

// nvcc must unroll the loops over a thread's rows and columns to keep those arrays in registers
// (not local memory): UNROLL (engine/cuda/kernel.h).

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

// Rows [row0, row0 + ROWS) of a head (n rows, ld floats apart) into a shared tile of row stride
// D + 1; rows past n are zeros. Consecutive threads read consecutive floats (coalesced).
template <int D, int ROWS>
__device__ __forceinline__ void load_rows(float* tile, const float* head, int64_t ld, int64_t row0, int64_t n) {
    for (int e = (int)threadIdx.x; e < ROWS * D; e += kThreads) {
        int r = e / D, c = e % D;
        tile[r * (D + 1) + c] = row0 + r < n ? head[(row0 + r) * ld + c] : 0.f;
    }
}

// acc[r][c] = Σ_d A[g·RPT + r][d]·B[l + 8c][d]: the thread's block of A·Bᵀ for shared tiles A and B
// of row stride D + 1 (within a warp, the A rows are 4 addresses read by 8 lanes each, the B rows
// 8 addresses in 8 different banks).
template <int D, int RPT, int CPT>
__device__ __forceinline__ void tile_dots(const float* A, const float* B, int g, int l, float (&acc)[RPT][CPT]) {
    UNROLL
    for (int r = 0; r < RPT; r++) {
        UNROLL
        for (int c = 0; c < CPT; c++) acc[r][c] = 0.f;
    }
    const float* a = A + g * RPT * (D + 1);
    const float* b = B + l * (D + 1);
    for (int d = 0; d < D; d++) {
        float av[RPT], bv[CPT];
        UNROLL
        for (int r = 0; r < RPT; r++) av[r] = a[r * (D + 1) + d];
        UNROLL
        for (int c = 0; c < CPT; c++) bv[c] = b[c * kGroupLanes * (D + 1) + d];
        UNROLL
        for (int r = 0; r < RPT; r++) {
            UNROLL
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
        UNROLL
        for (int r = 0; r < RPT; r++) wv[r] = w[r * (COLS + 1) + j];
        UNROLL
        for (int e = 0; e < D / kGroupLanes; e++) {
            const float xv = x[j * (D + 1) + e * kGroupLanes];
            UNROLL
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
                         int64_t S, bool causal, float scale, int64_t q_tiles, AttentionHeads in,
                         AttentionHeads ol) {
    constexpr int R = Tiles<D>::kFwdRows, C = Tiles<D>::kFwdCols;
    constexpr int RPT = R / kGroups, CPT = C / kGroupLanes, DPT = D / kGroupLanes;
    SHARED_ARRAY(float, q_s, R * (D + 1));
    SHARED_ARRAY(float, k_s, C * (D + 1));
    SHARED_ARRAY(float, v_s, C * (D + 1));
    SHARED_ARRAY(float, p_s, R * (C + 1));
    const int64_t bh = (int64_t)blockIdx.x / q_tiles, q0 = (int64_t)blockIdx.x % q_tiles * R;
    const int g = (int)threadIdx.x / kGroupLanes, l = (int)threadIdx.x % kGroupLanes;
    q += in.offset(bh, T);
    out += ol.offset(bh, T);
    lse += bh * T;
    k += in.offset(bh, S);
    v += in.offset(bh, S);

    load_rows<D, R>(q_s, q, in.ld, q0, T);
    float m[RPT], sum[RPT], o[RPT][DPT];
    UNROLL
    for (int r = 0; r < RPT; r++) {
        m[r] = -INFINITY;
        sum[r] = 0.f;
        UNROLL
        for (int e = 0; e < DPT; e++) o[r][e] = 0.f;
    }
    const int64_t k_end = keys_seen_by(q0, R, T, S, causal);
    for (int64_t k0 = 0; k0 < k_end; k0 += C) {
        __syncthreads();  // the previous tile's k, v and P are no longer read (first time: q is in place)
        load_rows<D, C>(k_s, k, in.ld, k0, S);
        load_rows<D, C>(v_s, v, in.ld, k0, S);
        __syncthreads();
        float s[RPT][CPT];
        tile_dots<D, RPT, CPT>(q_s, k_s, g, l, s);
        UNROLL
        for (int r = 0; r < RPT; r++) {
            const int64_t i = q0 + g * RPT + r;
            float tile_max = -INFINITY;
            UNROLL
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
            UNROLL
            for (int c = 0; c < CPT; c++) {
                const float p = expf(s[r][c] - base);
                p_s[(g * RPT + r) * (C + 1) + l + c * kGroupLanes] = p;
                tile_sum += p;
            }
            sum[r] = sum[r] * alpha + group_sum(tile_sum);
            m[r] = m_new;
            UNROLL
            for (int e = 0; e < DPT; e++) o[r][e] *= alpha;
        }
        __syncwarp();  // this thread's P rows are written (by its group's lanes, in its own warp)
        tile_accumulate<D, C, RPT>(p_s, v_s, g, l, o);
    }

    UNROLL
    for (int r = 0; r < RPT; r++) {
        const int64_t i = q0 + g * RPT + r;
        if (i >= T) continue;
        // sum >= 1 once a key is seen (the max contributes exp(0)); 0 means none was.
        const float inv = sum[r] > 0.f ? 1.f / sum[r] : 0.f;
        UNROLL
        for (int e = 0; e < DPT; e++) out[i * ol.ld + l + e * kGroupLanes] = o[r][e] * inv;
        if (l == 0) lse[i] = sum[r] > 0.f ? m[r] + logf(sum[r]) : INFINITY;
    }
}

// ---------------------------------------------------------------------------------------------
// Backward.

// delta[r] = Σ_d out[r, d]·dout[r, d] for the rows r = bh·T + i of out and dout (layout ol), one
// warp per row (lanes stride the row, xor-butterfly sum).
__global__ void flash_delta_kernel(const float* out, const float* dout, float* delta, int64_t rows, int64_t T,
                                   AttentionHeads ol) {
    const int lane = (int)threadIdx.x % 32;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; r < rows; r += warps) {
        const int64_t at = ol.offset(r / T, T) + r % T * ol.ld;
        float s = 0.f;
        for (int64_t d = lane; d < ol.D; d += 32) s = fmaf(out[at + d], dout[at + d], s);
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(kFullMask, s, off);
        if (lane == 0) delta[r] = s;
    }
}

// dk and dv of a tile of keys. Grid: BH · k_tiles blocks. Rows of its tiles are keys, columns queries.
template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_dkdv_kernel(const float* q, const float* k, const float* v, const float* dout, const float* lse,
                      const float* delta, float* dk, float* dv, int64_t T, int64_t S, bool causal, float scale,
                      int64_t k_tiles, AttentionHeads in, AttentionHeads ol) {
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
    q += in.offset(bh, T);
    dout += ol.offset(bh, T);
    lse += bh * T;
    delta += bh * T;
    k += in.offset(bh, S);
    v += in.offset(bh, S);

    load_rows<D, R>(k_s, k, in.ld, k0, S);
    load_rows<D, R>(v_s, v, in.ld, k0, S);
    float dk_acc[RPT][DPT], dv_acc[RPT][DPT];
    UNROLL
    for (int r = 0; r < RPT; r++) {
        UNROLL
        for (int e = 0; e < DPT; e++) dk_acc[r][e] = dv_acc[r][e] = 0.f;
    }
    // The first query that sees key k0 (the block's smallest); causal, earlier queries see none of the tile.
    int64_t i_begin = causal ? k0 - (S - T) : 0;
    if (i_begin < 0) i_begin = 0;
    for (int64_t i0 = i_begin; i0 < T; i0 += C) {
        __syncthreads();  // the previous tile's q, dout, P and dS are no longer read
        load_rows<D, C>(q_s, q, in.ld, i0, T);
        load_rows<D, C>(do_s, dout, ol.ld, i0, T);
        __syncthreads();
        float s[RPT][CPT], dp[RPT][CPT], col_lse[CPT], col_delta[CPT];
        tile_dots<D, RPT, CPT>(k_s, q_s, g, l, s);    // (k·qᵀ)[key][query]
        tile_dots<D, RPT, CPT>(v_s, do_s, g, l, dp);  // (v·doutᵀ)[key][query] = dPᵀ
        UNROLL
        for (int c = 0; c < CPT; c++) {
            const int64_t i = i0 + l + c * kGroupLanes;
            col_lse[c] = i < T ? lse[i] : INFINITY;
            col_delta[c] = i < T ? delta[i] : 0.f;
        }
        UNROLL
        for (int r = 0; r < RPT; r++) {
            UNROLL
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

    if (dk) dk += in.offset(bh, S);
    if (dv) dv += in.offset(bh, S);
    UNROLL
    for (int r = 0; r < RPT; r++) {
        const int64_t j = k0 + g * RPT + r;
        if (j >= S) continue;
        UNROLL
        for (int e = 0; e < DPT; e++) {
            const int64_t at = j * in.ld + l + e * kGroupLanes;
            if (dv) dv[at] = dv_acc[r][e];
            if (dk) dk[at] = dk_acc[r][e] * scale;
        }
    }
}

// dq of a tile of queries. Grid: BH · q_tiles blocks. Rows of its tiles are queries, columns keys.
template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_dq_kernel(const float* q, const float* k, const float* v, const float* dout, const float* lse,
                    const float* delta, float* dq, int64_t T, int64_t S, bool causal, float scale, int64_t q_tiles,
                    AttentionHeads in, AttentionHeads ol) {
    constexpr int R = Tiles<D>::kBwdRows, C = Tiles<D>::kBwdCols;
    constexpr int RPT = R / kGroups, CPT = C / kGroupLanes, DPT = D / kGroupLanes;
    SHARED_ARRAY(float, q_s, R * (D + 1));
    SHARED_ARRAY(float, do_s, R * (D + 1));
    SHARED_ARRAY(float, k_s, C * (D + 1));
    SHARED_ARRAY(float, v_s, C * (D + 1));
    SHARED_ARRAY(float, ds_s, R * (C + 1));
    const int64_t bh = (int64_t)blockIdx.x / q_tiles, q0 = (int64_t)blockIdx.x % q_tiles * R;
    const int g = (int)threadIdx.x / kGroupLanes, l = (int)threadIdx.x % kGroupLanes;
    q += in.offset(bh, T);
    dout += ol.offset(bh, T);
    dq += in.offset(bh, T);
    lse += bh * T;
    delta += bh * T;
    k += in.offset(bh, S);
    v += in.offset(bh, S);

    load_rows<D, R>(q_s, q, in.ld, q0, T);
    load_rows<D, R>(do_s, dout, ol.ld, q0, T);
    float row_lse[RPT], row_delta[RPT], acc[RPT][DPT];
    UNROLL
    for (int r = 0; r < RPT; r++) {
        const int64_t i = q0 + g * RPT + r;
        row_lse[r] = i < T ? lse[i] : INFINITY;
        row_delta[r] = i < T ? delta[i] : 0.f;
        UNROLL
        for (int e = 0; e < DPT; e++) acc[r][e] = 0.f;
    }
    const int64_t k_end = keys_seen_by(q0, R, T, S, causal);
    for (int64_t k0 = 0; k0 < k_end; k0 += C) {
        __syncthreads();  // the previous tile's k, v and dS are no longer read
        load_rows<D, C>(k_s, k, in.ld, k0, S);
        load_rows<D, C>(v_s, v, in.ld, k0, S);
        __syncthreads();
        float s[RPT][CPT], dp[RPT][CPT];
        tile_dots<D, RPT, CPT>(q_s, k_s, g, l, s);    // q·kᵀ
        tile_dots<D, RPT, CPT>(do_s, v_s, g, l, dp);  // dP = dout·vᵀ
        UNROLL
        for (int r = 0; r < RPT; r++) {
            UNROLL
            for (int c = 0; c < CPT; c++) {
                const bool seen = sees(q0 + g * RPT + r, k0 + l + c * kGroupLanes, T, S, causal);
                const float p = seen ? expf(s[r][c] * scale - row_lse[r]) : 0.f;
                ds_s[(g * RPT + r) * (C + 1) + l + c * kGroupLanes] = p * (dp[r][c] - row_delta[r]);
            }
        }
        __syncwarp();  // this thread's dS rows are written (by its group, in its warp)
        tile_accumulate<D, C, RPT>(ds_s, k_s, g, l, acc);  // dq += dS·k
    }

    UNROLL
    for (int r = 0; r < RPT; r++) {
        const int64_t i = q0 + g * RPT + r;
        if (i >= T) continue;
        UNROLL
        for (int e = 0; e < DPT; e++) dq[i * in.ld + l + e * kGroupLanes] = acc[r][e] * scale;
    }
}

// ---------------------------------------------------------------------------------------------
// Tensor-core kernels (gemm_precision() tf32 or bf16). Same entry points, same semantics, same
// lse; every matrix product of a tile (q·kᵀ and P·v forward; k·qᵀ, v·doutᵀ, Pᵀ·dout, dSᵀ·q in dk/dv;
// q·kᵀ, dout·vᵀ, dS·k in dq) runs on the tensor cores through nvcuda::wmma with fp32 accumulators,
// the softmax, masks and exp on regular threads in fp32, with the exponents in log2 units
// (exp(x) = exp2(x·log2 e): one ex2 instruction each; lse stays natural). The inputs of the
// products are rounded once, when they are written to shared memory, to the precision in use
// (TcIn below): TF32 (m16n16k8, 10 mantissa bits, kept in floats) under tf32, bf16 (m16n16k16,
// 7 mantissa bits, two bytes: the tiles take half the shared memory) under bf16. P and dS are
// rounded the same way, as FlashAttention does with bf16.
// On an H200 (docs/results/gpu-h200-2026-11-26-second.md) the TF32 kernels' forward is about as
// fast as the unfused path's and their backward 1.8× slower: it recomputes the scores and dP in
// both of its kernels (14·T·S·D FLOPs against the unfused 8) at about 20 TFLOP/s, each step
// waiting at a barrier for its tiles to load. The bf16 kernels have not run on a GPU yet.
//
// Layout: a block of 4 warps owns 64 rows (queries in the forward and dq, keys in dk/dv), and each
// warp owns 16 of them from start to end: it multiplies its rows of the score tiles, does their
// softmax (or P and dS), and accumulates its rows of the output in wmma accumulator fragments,
// which stay in registers for the whole key (query) loop. Only the streamed k/v (q/dout) tiles are
// shared between warps, so the block barriers are the two around their load; inside a step a
// warp needs only __syncwarp() between writing its score rows and reading them.
//
// The forward's online softmax must rescale the rows of o by exp(m_old − m_new), and a fragment
// does not say which row an element is in (the mapping is unspecified). So each warp loads, once,
// an accumulator fragment from a 16×16 matrix whose element (r, c) is r: element e of that
// fragment is then the row of element e of every accumulator fragment (load and mma use the same
// mapping), and the rescale is o.x[e] *= alpha[row.x[e]]. A step where no row of the warp has a
// new max skips it.
//
// Shared memory (TcTiles): the input tiles (q, k, v, dout) have a row stride of D plus 16 bytes,
// the fp32 score tiles cols + 4 floats: wmma's ldm must be a multiple of 16 bytes, and the skew
// spreads a warp's rows over the banks. The P and dS tiles are of the input type: under TF32 they
// are the score tiles themselves (each element overwritten by the thread that read it), under bf16
// arrays of their own. The outputs leave through an fp32 staging tile of stride D + 4 at the start
// of shared memory (under TF32 it is exactly the warp's own rows of the first tile, so no block
// barrier is needed before it). Global rows are read and written as float4 (the host checks the
// alignment). The kernels take dynamic shared memory (over 48 KiB; tc_opt_in, once per kernel).
//
// Asynchronous copies (TF32, off by default since the H100 timed them: flash_async_enabled): the
// streamed tiles (k and v in the forward and dq; q, dout, lse and Δ in dk/dv) have two stages in
// shared memory, and step t + 1's are copied global to shared with cp.async
// (__pipeline_memcpy_async, no registers on the way) while step t computes: at step t a thread
// issues step t + 1's batch, waits for step t's (__pipeline_wait_prior(1)), and a barrier makes
// every thread's part visible; a barrier at the end of the step keeps its stage until every warp
// has read it (the stage is refilled at step t + 1). The copied floats are raw: the products round
// them to TF32 as they load the fragments (kRoundB), which gives the same values as rounding at the
// store, so the results are the same bits as the synchronous kernels'. bf16 tiles are converted on
// the way in, so the bf16 kernels load synchronously. The price: the streamed tiles' shared memory
// twice over (the D = 64 forward 106 KB a block, two blocks an SM, against 71 KB and three). On an
// H100 the lost blocks cost more than the overlap gains: the ViT-Tiny attention forward took
// 4.06 ms a step against 3.24 synchronous, the backward 10.62 against 8.11
// (docs/results/gpu-h100-2026-11-26.md).
//
// Deterministic: every output element is summed by one warp in a fixed order, no atomics.

namespace wmma = nvcuda::wmma;

// The k loops of the products two steps at a time: fully unrolled, ptxas hoists the fragment loads
// of every step and the D = 128 kernels spill (CUDA 13, sm_80 and sm_90).
#ifdef ENGINE_CUDA_EMU
#define TC_UNROLL_K
#define TC_UNROLL_ELEMENTS
#else
#define TC_UNROLL_K _Pragma("unroll 1")
#define TC_UNROLL_ELEMENTS _Pragma("unroll")
#endif

// The two input precisions: P is wmma's element type (precision::tf32 or __nv_bfloat16), T what a
// shared tile holds, K the k of one mma step, and round() what the tensor cores will read.
template <typename P>
struct TcIn;
template <>
struct TcIn<wmma::precision::tf32> {
    using T = float;
    static constexpr int K = 8;
    __device__ static float round(float x) { return wmma::__float_to_tf32(x); }
};
template <>
struct TcIn<__nv_bfloat16> {
    using T = __nv_bfloat16;
    static constexpr int K = 16;
    __device__ static __nv_bfloat16 round(float x) { return __float2bfloat16(x); }
};
template <typename P>
using AccFrag = wmma::fragment<wmma::accumulator, 16, 16, TcIn<P>::K, float>;

constexpr int kTcWarps = kThreads / kWarp;
constexpr int kTcRows = 16 * kTcWarps;  // rows a block owns: 16 per warp
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// Bytes of an array of n elements of `size` bytes in shared memory, rounded up to 32 (wmma's
// pointers must be 32-byte aligned, so every array starts on such a boundary).
constexpr int tc_bytes(int n, int size) { return (n * size + 31) / 32 * 32; }

// Tile shapes and the byte offsets of each kernel's shared arrays. kStages: 1, or 2 when the
// streamed tiles are double-buffered for the asynchronous copies (stage t % 2 holds step t's).
// kFwdC: keys a forward step streams (the default, or 32 for the narrow forward at D = 64).
template <int D>
constexpr int kDefaultFwdCols = D <= 64 ? 64 : 32;
template <int D, typename P, int kStages = 1, int kFwdC = kDefaultFwdCols<D>>
struct TcTiles {
    static_assert(D == 32 || D == 64 || D == 128, "flash attention is compiled for head dims 32, 64, 128");
    static_assert(kStages == 1 || kStages == 2, "one stage, or two");
    static_assert(kFwdC == 32 || kFwdC == 64, "32 or 64 keys a forward step");
    static constexpr int kNumStages = kStages;
    using T = typename TcIn<P>::T;
    static constexpr int kSize = (int)sizeof(T);
    static constexpr bool kInPlace = kSize == 4;  // TF32: P and dS overwrite the fp32 score tiles
    // Two stages are for the asynchronous copies, which move raw floats: bf16 tiles are converted on
    // the way in, so they load synchronously.
    static_assert(kStages == 1 || kInPlace, "asynchronous copies for TF32 tiles only");
    static constexpr int kLd = D + 16 / kSize;   // row stride of a [rows × D] input tile
    // Columns streamed per step: keys in the forward and dq, queries in dk/dv.
    static constexpr int kFwdCols = kFwdC, kBwdCols = kWarp;  // backward: a lane a column
    static constexpr int kFwdLds = kFwdCols + 4, kBwdLds = kBwdCols + 4;  // fp32 score tiles
    static constexpr int kFwdLdp = kInPlace ? kFwdLds : kFwdCols + 16 / kSize;  // P, dS tiles
    static constexpr int kBwdLdp = kInPlace ? kBwdLds : kBwdCols + 16 / kSize;
    static constexpr int kOutLd = D + 4;  // the fp32 staging tile of the outputs
    static constexpr int kRowsTile = tc_bytes(kTcRows * kLd, kSize);
    static constexpr int kFwdTile = tc_bytes(kFwdCols * kLd, kSize), kBwdTile = tc_bytes(kBwdCols * kLd, kSize);
    // Forward: q, then per stage k and v, the scores, P, the row ids (256 floats), alpha.
    static constexpr int kFwdK = kRowsTile, kFwdStage = 2 * kFwdTile;  // stage s: k at kFwdK + s·kFwdStage, v after
    static constexpr int kFwdS = kFwdK + kStages * kFwdStage;
    static constexpr int kFwdP = kFwdS + (kInPlace ? 0 : tc_bytes(kTcRows * kFwdLds, 4));
    static constexpr int kFwdIds = kFwdP + tc_bytes(kTcRows * kFwdLdp, kSize);
    static constexpr int kFwdAlpha = kFwdIds + tc_bytes(256, 4);
    static constexpr int kFwdBytes = kFwdAlpha + tc_bytes(kTcRows, 4);
    // dk/dv: k, v, then per stage q and dout, Sᵀ, dPᵀ, Pᵀ, dSᵀ, then per stage lse and Δ of the
    // streamed queries.
    static constexpr int kDkdvV = kRowsTile, kDkdvQ = 2 * kRowsTile, kDkdvStage = 2 * kBwdTile;
    static constexpr int kDkdvS = kDkdvQ + kStages * kDkdvStage;
    static constexpr int kDkdvDp = kDkdvS + tc_bytes(kTcRows * kBwdLds, 4);
    static constexpr int kDkdvP = kInPlace ? kDkdvS : kDkdvDp + tc_bytes(kTcRows * kBwdLds, 4);
    static constexpr int kDkdvDs = kInPlace ? kDkdvDp : kDkdvP + tc_bytes(kTcRows * kBwdLdp, kSize);
    static constexpr int kDkdvLse = (kInPlace ? kDkdvDp + tc_bytes(kTcRows * kBwdLds, 4)
                                              : kDkdvDs + tc_bytes(kTcRows * kBwdLdp, kSize));
    static constexpr int kRowStats = tc_bytes(kBwdCols, 4), kDkdvStatsStage = 2 * kRowStats;  // lse, then Δ
    static constexpr int kDkdvBytes = kDkdvLse + kStages * kDkdvStatsStage;
    // dq: q, dout, then per stage k and v, S, dP, dS, then lse, Δ and the keys each row sees (int64).
    static constexpr int kDqDo = kRowsTile, kDqK = 2 * kRowsTile, kDqStage = 2 * kBwdTile;
    static constexpr int kDqS = kDqK + kStages * kDqStage;
    static constexpr int kDqDp = kDqS + tc_bytes(kTcRows * kBwdLds, 4);
    static constexpr int kDqDs = kInPlace ? kDqS : kDqDp + tc_bytes(kTcRows * kBwdLds, 4);
    static constexpr int kDqLse = (kInPlace ? kDqDp + tc_bytes(kTcRows * kBwdLds, 4)
                                            : kDqDs + tc_bytes(kTcRows * kBwdLdp, kSize));
    static constexpr int kDqDelta = kDqLse + tc_bytes(kTcRows, 4);
    static constexpr int kDqSeen = kDqDelta + tc_bytes(kTcRows, 4);
    static constexpr int kDqBytes = kDqSeen + tc_bytes(kTcRows, 8);
    static_assert((kLd * kSize) % 16 == 0 && kFwdLds % 4 == 0 && kBwdLds % 4 == 0 && (kFwdLdp * kSize) % 16 == 0 &&
                      (kBwdLdp * kSize) % 16 == 0 && kOutLd % 4 == 0,
                  "wmma: ldm a multiple of 16 bytes");
    static_assert(kFwdCols % 16 == 0 && kBwdCols % 16 == 0, "16-column tiles");
    static_assert(kDkdvV == kRowsTile && kDqDo == kRowsTile, "dk/dv's v and dq's dout follow the first row tile");
    // The staging tile (at offset 0) must not reach what is still read when it is written: the
    // forward's alpha; dk/dv and dq read nothing of shared memory then.
    static constexpr int kStaging = tc_bytes(kTcRows * kOutLd, 4);
    static_assert(kStaging <= kFwdAlpha && kStaging <= kDkdvBytes && kStaging <= kDqBytes, "staging tile too big");
    static_assert(!kInPlace || kLd == kOutLd, "TF32: the staging tile is the first input tile");
};

__device__ __forceinline__ char* tc_shared() {
#ifdef ENGINE_CUDA_EMU
    return static_cast<char*>(::emu::dynamic_shared());
#else
    extern __shared__ __align__(128) char flash_tc_smem[];
    return flash_tc_smem;
#endif
}
template <typename X>
__device__ __forceinline__ X* tc_array(int byte_offset) {
    return reinterpret_cast<X*>(tc_shared() + byte_offset);
}

// Four consecutive floats into a shared tile, rounded as the tensor cores will read them.
__device__ __forceinline__ void store_rounded4(float* at, float4 v) {
    using R = TcIn<wmma::precision::tf32>;
    *reinterpret_cast<float4*>(at) = float4{R::round(v.x), R::round(v.y), R::round(v.z), R::round(v.w)};
}
__device__ __forceinline__ void store_rounded4(__nv_bfloat16* at, float4 v) {
    auto bits = [](float x) { return (unsigned)__bfloat16_as_ushort(__float2bfloat16(x)); };
    *reinterpret_cast<uint2*>(at) = uint2{bits(v.x) | bits(v.y) << 16, bits(v.z) | bits(v.w) << 16};
}

// Rows [row0, row0 + ROWS) of a head (rows ld floats apart, n of them) into a shared input tile of
// row stride LD, rounded; rows past n are zeros. float4 loads, consecutive threads reading
// consecutive ones (coalesced within a row).
template <int D, int ROWS, int LD, typename T>
__device__ __forceinline__ void tc_load_rows(T* tile, const float* head, int64_t ld, int64_t row0, int64_t n) {
    constexpr int V = D / 4;  // float4s a row
    for (int e = (int)threadIdx.x; e < ROWS * V; e += kThreads) {
        const int r = e / V, c = e % V;
        const float4 x = row0 + r < n ? reinterpret_cast<const float4*>(head + (row0 + r) * ld)[c]
                                      : float4{0.f, 0.f, 0.f, 0.f};
        store_rounded4(tile + r * LD + 4 * c, x);
    }
}

// The asynchronous twin of tc_load_rows for TF32 tiles (the streamed tiles of the double-buffered
// kernels): each float4 copied global to shared without passing through registers, rows past n
// zero-filled, not rounded (the products round them as they load them, kRoundB). The caller
// commits the batch and waits for it (__pipeline_wait_prior, then a block barrier) before reading.
template <int D, int ROWS, int LD>
__device__ __forceinline__ void tc_copy_rows_async(float* tile, const float* head, int64_t ld, int64_t row0,
                                                   int64_t n) {
    constexpr int V = D / 4;
    for (int e = (int)threadIdx.x; e < ROWS * V; e += kThreads) {
        const int r = e / V, c = e % V;
        const bool in_range = row0 + r < n;
        __pipeline_memcpy_async(tile + r * LD + 4 * c, in_range ? head + (row0 + r) * ld + 4 * c : head, 16,
                                in_range ? 0 : 16);
    }
}

// The k and v tiles the forward and dq stream, C rows each, v's C·LD elements after k's.
// copy_kv: step rows [row0, row0 + C) copied asynchronously into kv, one batch.
template <int D, int C, int LD>
__device__ __forceinline__ void copy_kv(float* kv, const float* k, const float* v, int64_t ld, int64_t row0, int64_t S) {
    tc_copy_rows_async<D, C, LD>(kv, k, ld, row0, S);
    tc_copy_rows_async<D, C, LD>(kv + C * LD, v, ld, row0, S);
    __pipeline_commit();
}

// The top of step t (of `steps`): returns when step t's k and v are in kv for every thread.
// Synchronous: a barrier (the previous step's tiles are no longer read), the loads, a barrier.
// Asynchronous: step t + 1's copies go into next_kv, the other stage, which every warp finished
// reading at step t − 1 (the caller ends each step with a barrier, and issues step 0's copies
// before its loop); then the wait for step t's, and a barrier.
template <int D, int C, int LD, bool kAsync, typename E>
__device__ __forceinline__ void kv_step_begin(E* kv, E* next_kv, const float* k, const float* v, int64_t ld, int64_t t,
                                              int64_t steps, int64_t S) {
    if constexpr (kAsync) {
        if (t + 1 < steps) {
            copy_kv<D, C, LD>(next_kv, k, v, ld, (t + 1) * C, S);
            __pipeline_wait_prior(1);  // this thread's part of step t's tiles has landed
        } else {
            __pipeline_wait_prior(0);
        }
        __syncthreads();  // every thread's part has (first time: what the block loaded before too)
    } else {
        __syncthreads();  // the previous step's k and v are no longer read (first time: what the block
                          // loaded before its loop is in place)
        tc_load_rows<D, C, LD>(kv, k, ld, t * C, S);
        tc_load_rows<D, C, LD>(kv + C * LD, v, ld, t * C, S);
        __syncthreads();
    }
}

// The key loop of the forward and dq: `steps` steps of C keys, step t's k and v in k_tile(t) (v
// after k), loaded at the step or (kAsync) copied a step ahead; body(k_s, v_s, k0) computes step t,
// whose first key is k0. Every thread of the block runs the loop, so all reach its barriers.
template <int D, int C, int LD, bool kAsync, typename Tile, typename Body>
__device__ __forceinline__ void for_each_kv_step(Tile k_tile, const float* k, const float* v, int64_t ld,
                                                 int64_t steps, int64_t S, Body body) {
    if constexpr (kAsync)
        if (steps > 0) copy_kv<D, C, LD>(k_tile(0), k, v, ld, 0, S);
    for (int64_t t = 0; t < steps; t++) {
        kv_step_begin<D, C, LD, kAsync>(k_tile(t), k_tile(t + 1), k, v, ld, t, steps, S);
        const auto* k_s = k_tile(t);
        body(k_s, k_s + C * LD, t * C);
        if constexpr (kAsync) __syncthreads();  // this stage is refilled at step t + 2, copied at t + 1
    }
}

// A warp's 16 rows of the fp32 staging tile (stride D + 4) out to rows [row0, row0 + 16) of a
// head, those below n.
template <int D>
__device__ __forceinline__ void tc_store_rows(float* head, int64_t ld, const float* tile, int64_t row0, int64_t n) {
    constexpr int V = D / 4;
    const int lane = (int)threadIdx.x % kWarp;
    for (int e = lane; e < 16 * V; e += kWarp) {
        const int r = e / V, c = e % V;
        if (row0 + r < n)
            reinterpret_cast<float4*>(head + (row0 + r) * ld)[c] = reinterpret_cast<const float4*>(tile + r * (D + 4))[c];
    }
}

// Rounds a matrix fragment's elements as TcIn<P>::round (element-wise: portable whatever the
// fragment's layout).
template <typename P, typename Frag>
__device__ __forceinline__ void round_fragment(Frag& f) {
    UNROLL
    for (int t = 0; t < f.num_elements; t++) f.x[t] = TcIn<P>::round(f.x[t]);
}

// The columns [0, n) of a tile of `max` that hold rows in range (n of them, n may exceed max or be
// negative), rounded up to whole 16-column blocks: the products skip the blocks past them, whose
// operands are zeros or masked. At ViT-Tiny's T = S = 257, the last of five 64-key tiles has one
// key: without the skip a fifth of the work is on padding.
__device__ __forceinline__ int live_cols(int64_t n, int max) {
    return n <= 0 ? 0 : n >= max ? max : (int)(n + 15) / 16 * 16;
}

// C[16 × n] = A[16 × K]·B for one warp (n <= N, a multiple of 16; columns past it not written), C
// to fp32 shared memory (row stride ldc): A row-major (stride lda); B row-major [K][ldb], or with
// BLayout col_major stored transposed as [N][ldb] (A·Bᵀ of two row-major tiles). Each 16×16 tile
// of C is summed over K in steps of TcIn<P>::K. kRoundB: B holds raw floats (an asynchronously
// copied tile), rounded in the fragment as it is loaded (the same values as rounding at the store).
template <typename P, int N, int K, typename BLayout, bool kRoundB = false>
__device__ __forceinline__ void warp_gemm_to_shared(const typename TcIn<P>::T* A, int lda, const typename TcIn<P>::T* B,
                                                    int ldb, float* C, int ldc, int n) {
    constexpr bool kBt = std::is_same<BLayout, wmma::col_major>::value;
    constexpr int KS = TcIn<P>::K;
    for (int j = 0; j < n; j += 16) {
        AccFrag<P> acc;
        wmma::fill_fragment(acc, 0.f);
        TC_UNROLL_K
        for (int kk = 0; kk < K; kk += KS) {
            wmma::fragment<wmma::matrix_a, 16, 16, KS, P, wmma::row_major> a;
            wmma::fragment<wmma::matrix_b, 16, 16, KS, P, BLayout> b;
            wmma::load_matrix_sync(a, A + kk, (unsigned)lda);
            wmma::load_matrix_sync(b, kBt ? B + j * ldb + kk : B + kk * ldb + j, (unsigned)ldb);
            if constexpr (kRoundB) round_fragment<P>(b);
            wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(C + j, acc, (unsigned)ldc, wmma::mem_row_major);
    }
}

// acc[f] (the 16×16 column block f of a warp's [16 × D] output) += A[16 × k]·B[k × D], A row-major
// in shared memory (stride lda), B a row-major shared input tile of stride ldb; k <= K, a multiple
// of 16 (A's columns past it are zeros: nothing to add). kRoundB as for warp_gemm_to_shared.
template <typename P, int D, int K, bool kRoundB = false>
__device__ __forceinline__ void warp_gemm_accumulate(const typename TcIn<P>::T* A, int lda,
                                                     const typename TcIn<P>::T* B, int ldb,
                                                     AccFrag<P> (&acc)[D / 16], int k) {
    constexpr int KS = TcIn<P>::K;
    TC_UNROLL_K
    for (int kk = 0; kk < k; kk += KS) {
        wmma::fragment<wmma::matrix_a, 16, 16, KS, P, wmma::row_major> a;
        wmma::load_matrix_sync(a, A + kk, (unsigned)lda);
        UNROLL
        for (int f = 0; f < D / 16; f++) {
            wmma::fragment<wmma::matrix_b, 16, 16, KS, P, wmma::row_major> b;
            wmma::load_matrix_sync(b, B + kk * ldb + 16 * f, (unsigned)ldb);
            if constexpr (kRoundB) round_fragment<P>(b);
            wmma::mma_sync(acc[f], a, b, acc[f]);
        }
    }
}

// The row of each element of an accumulator fragment (see the top of this section): ids is a
// shared 16×16 matrix the block fills with its row numbers before its first barrier.
__device__ __forceinline__ void fill_row_ids(float* ids) {
    for (int e = (int)threadIdx.x; e < 256; e += kThreads) ids[e] = (float)(e / 16);
}

// A warp's accumulators times `factor` (when given: acc[f].x[e] *= factor[row of e]) out to its
// 16 rows of the staging tile (stride D + 4), then to rows [row0, row0 + 16) of a head.
template <typename P, int D>
__device__ __forceinline__ void tc_write_output(AccFrag<P> (&acc)[D / 16], const AccFrag<P>* rows,
                                                const float* factor, float* staging, float* head, int64_t ld,
                                                int64_t row0, int64_t n) {
    UNROLL
    for (int f = 0; f < D / 16; f++) {
        if (factor) {
            UNROLL
            for (int e = 0; e < acc[f].num_elements; e++) acc[f].x[e] *= factor[(int)rows->x[e]];
        }
        wmma::store_matrix_sync(staging + 16 * f, acc[f], (unsigned)(D + 4), wmma::mem_row_major);
    }
    __syncwarp();
    tc_store_rows<D>(head, ld, staging, row0, n);
    __syncwarp();  // the staging rows may be written again
}

// Max and sum over the N consecutive lanes that share a row (xor butterflies inside the group).
template <int N>
__device__ __forceinline__ float lanes_max(float v) {
    for (int off = N / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, off));
    return v;
}
template <int N>
__device__ __forceinline__ float lanes_sum(float v) {
    for (int off = N / 2; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
    return v;
}

// dq's part from a dk/dv block's keys for its C = 32 streamed queries: out[32 × D] =
// Σ_key dS[query][key]·k[key][:] over the first `keys` of its 64 (a multiple of 16; the rest are
// past S), from dSᵀ [64 keys × ldp] and k [64 × ld] in shared memory (dS is dSᵀ read column-major).
// The 2·D/16 16×16 blocks of out are split over the 4 warps, one at a time (few registers), and
// stored straight to global memory, rows D floats apart.
template <typename P, int D>
__device__ __forceinline__ void block_dq_part(const typename TcIn<P>::T* ds_t, int ldp, const typename TcIn<P>::T* k,
                                              int ld, float* out, int keys) {
    constexpr int KS = TcIn<P>::K, kColBlocks = D / 16;
    static_assert(kWarp == 32, "two 16-row blocks of queries");
    const int warp = (int)threadIdx.x / kWarp;
    for (int b = warp; b < 2 * kColBlocks; b += kTcWarps) {
        const int rb = b / kColBlocks, f = b % kColBlocks;
        AccFrag<P> acc;
        wmma::fill_fragment(acc, 0.f);
        TC_UNROLL_K
        for (int kk = 0; kk < keys; kk += KS) {
            wmma::fragment<wmma::matrix_a, 16, 16, KS, P, wmma::col_major> a;
            wmma::fragment<wmma::matrix_b, 16, 16, KS, P, wmma::row_major> bk;
            wmma::load_matrix_sync(a, ds_t + kk * ldp + 16 * rb, (unsigned)ldp);
            wmma::load_matrix_sync(bk, k + kk * ld + 16 * f, (unsigned)ld);
            wmma::mma_sync(acc, a, bk, acc);
        }
        wmma::store_matrix_sync(out + 16 * rb * D + 16 * f, acc, (unsigned)D, wmma::mem_row_major);
    }
}

// One key step of the forward for a warp's 16 rows: the scores q·kᵀ of the tile's first n keys,
// the online softmax of row `row` (this lane's half of its columns: part 0 even, 1 odd), and
// o += P·v. m and l are the row's running max (log2 units) and sum; seen: how many of the tile's
// keys the row sees (may be <= 0 or > C). kRoundB: k and v are raw floats (asynchronous copies).
template <typename Tl, int D, typename P, bool kRoundB>
__device__ __forceinline__ void forward_step(const typename Tl::T* q_w, const typename Tl::T* k_s,
                                             const typename Tl::T* v_s, float* s_w, typename Tl::T* p_w,
                                             float* alpha_w, const AccFrag<P>& rows, AccFrag<P> (&o)[D / 16], float& m,
                                             float& l, int64_t seen, int n, float scale2, int row, int part) {
    constexpr int C = Tl::kFwdCols, LD = Tl::kLd, LDS = Tl::kFwdLds, LDP = Tl::kFwdLdp;
    warp_gemm_to_shared<P, C, D, wmma::col_major, kRoundB>(q_w, LD, k_s, LD, s_w, LDS, n);  // q·kᵀ
    __syncwarp();
    float* srow = s_w + row * LDS;
    typename Tl::T* prow = p_w + row * LDP;
    const int cols = (int)(seen < 0 ? 0 : (seen > C ? C : seen));  // seen columns of the tile
    float tile_max = -INFINITY;
    for (int c = part; c < C; c += 2) {
        const float s = c < cols ? srow[c] * scale2 : -INFINITY;
        srow[c] = s;
        tile_max = fmaxf(tile_max, s);
    }
    const float m_new = fmaxf(m, lanes_max<2>(tile_max));
    // A row that has seen no key yet keeps m = −inf; exponents relative to 0 then give
    // exp(−inf) = 0 instead of exp(−inf + inf) = NaN.
    const float base = m_new == -INFINITY ? 0.f : m_new;
    const float alpha = exp2f(m - base);
    float tile_sum = 0.f;
    for (int c = part; c < C; c += 2) {
        const float p = exp2f(srow[c] - base);
        tile_sum += p;
        prow[c] = TcIn<P>::round(p);
    }
    l = l * alpha + lanes_sum<2>(tile_sum);
    m = m_new;
    if (part == 0) alpha_w[row] = alpha;
    __syncwarp();  // P and alpha of every row of the warp are written
    if (__any_sync(kFullMask, alpha != 1.f)) {
        UNROLL
        for (int f = 0; f < D / 16; f++)
            UNROLL
            for (int e = 0; e < o[f].num_elements; e++) o[f].x[e] *= alpha_w[(int)rows.x[e]];
    }
    warp_gemm_accumulate<P, D, C, kRoundB>(p_w, LDP, v_s, LD, o, n);  // o += P·v
}

// Forward. Grid: BH · q_tiles blocks. In warp w, lanes 2r and 2r + 1 keep the running max m and
// sum l of the warp's row r and do that row's softmax, on even and odd columns. kAsync (TF32 only):
// the k and v tiles are double-buffered and copied asynchronously, step t + 1's while step t
// computes ("Asynchronous copies" at the top of this section).
// kFwdC: keys a step (TcTiles); 32 at D = 64 is the narrow forward (flash_narrow_forward_enabled).
// (The launch bounds: the double-buffered kernel fits two blocks an SM in shared memory, so ptxas
// may take up to 255 registers a thread, which it needs at D = 64: without the hint it stopped at
// 128 and spilled. The synchronous one is sized for three, the narrow one for four, but never for
// more than fit in an SM's shared memory: TF32 at D = 128 takes 76 KB a block, so two; asking for
// three would only cap its registers at 170 for an occupancy it cannot have.)
template <int D, typename P, bool kAsync, int kFwdC>
constexpr int forward_blocks_per_sm() {
    constexpr int wanted = kAsync ? 2 : (kFwdC < kDefaultFwdCols<D> ? 4 : 3);
    // 228 KB of shared memory an SM (H100), 1 KB of it reserved for each block.
    constexpr int fit = 228 * 1024 / (TcTiles<D, P, kAsync ? 2 : 1, kFwdC>::kFwdBytes + 1024);
    return wanted < fit ? wanted : (fit > 0 ? fit : 1);
}
template <int D, typename P, bool kAsync, int kFwdC = kDefaultFwdCols<D>>
__global__ void __launch_bounds__(kThreads, (forward_blocks_per_sm<D, P, kAsync, kFwdC>()))
    flash_tc_forward_kernel(const float* q, const float* k, const float* v, float* out, float* lse, int64_t T,
                            int64_t S, bool causal, float scale, int64_t q_tiles, AttentionHeads in,
                            AttentionHeads ol) {
    using Tl = TcTiles<D, P, kAsync ? 2 : 1, kFwdC>;
    using E = typename TcIn<P>::T;
    constexpr int R = kTcRows, C = Tl::kFwdCols, LD = Tl::kLd, LDS = Tl::kFwdLds, LDP = Tl::kFwdLdp;
    E* q_s = tc_array<E>(0);
    auto k_tile = [](int64_t step) { return tc_array<E>(Tl::kFwdK + (int)(step % Tl::kNumStages) * Tl::kFwdStage); };
    float* ids_s = tc_array<float>(Tl::kFwdIds);
    const int64_t bh = (int64_t)blockIdx.x / q_tiles, q0 = (int64_t)blockIdx.x % q_tiles * R;
    q += in.offset(bh, T);
    k += in.offset(bh, S);
    v += in.offset(bh, S);
    out += ol.offset(bh, T);
    lse += bh * T;
    const int warp = (int)threadIdx.x / kWarp, lane = (int)threadIdx.x % kWarp;
    const int row = lane / 2, part = lane % 2;  // the row this lane does the softmax of, in the warp's 16
    const int64_t i = q0 + 16 * warp + row;
    const E* q_w = q_s + 16 * warp * LD;                            // the warp's rows of q
    float* s_w = tc_array<float>(Tl::kFwdS) + 16 * warp * LDS;      // its rows of the scores
    E* p_w = tc_array<E>(Tl::kFwdP) + 16 * warp * LDP;              // and of P
    float* alpha_w = tc_array<float>(Tl::kFwdAlpha) + 16 * warp;    // its rows' rescale factors, then 1/l

    fill_row_ids(ids_s);
    tc_load_rows<D, R, LD>(q_s, q, in.ld, q0, T);
    __syncthreads();
    AccFrag<P> rows, o[D / 16];
    wmma::load_matrix_sync(rows, ids_s, 16, wmma::mem_row_major);
    UNROLL
    for (int f = 0; f < D / 16; f++) wmma::fill_fragment(o[f], 0.f);
    // m (the running max) and the exponents in log2 units: exp(x) = exp2(x·log2 e), one ex2 each.
    const float scale2 = scale * kLog2e;
    float m = -INFINITY, l = 0.f;
    const int64_t seen = i < T ? visible_keys(i, T, S, causal) : 0;  // this row sees keys [0, seen)
    const int64_t k_end = keys_seen_by(q0, R, T, S, causal), steps = (k_end + C - 1) / C;
    const bool live = q0 + 16 * warp < T;  // a warp whose rows are all past T only keeps the barriers
    for_each_kv_step<D, C, LD, kAsync>(k_tile, k, v, in.ld, steps, S, [&](const E* k_s, const E* v_s, int64_t k0) {
        if (live)
            forward_step<Tl, D, P, kAsync>(q_w, k_s, v_s, s_w, p_w, alpha_w, rows, o, m, l, seen - k0,
                                           live_cols(k_end - k0, C), scale2, row, part);
    });
    __syncwarp();  // every lane has read alpha_w
    // l >= 1 once a key is seen (the max contributes exp2(0)); 0 means none was. lse in natural log.
    if (part == 0) {
        alpha_w[row] = l > 0.f ? 1.f / l : 0.f;
        if (i < T) lse[i] = l > 0.f ? (m + log2f(l)) * kLn2 : INFINITY;
    }
    // bf16: the staging tile spans other warps' tiles, which they may still read. (Every warp gets
    // here: the key loop's trip count is the block's.)
    if (!Tl::kInPlace) __syncthreads();
    __syncwarp();
    tc_write_output<P, D>(o, &rows, alpha_w, tc_array<float>(0) + 16 * warp * Tl::kOutLd, out, ol.ld,
                          q0 + 16 * warp, T);
}

// dk and dv of a tile of 64 keys, 16 a warp. Grid: BH · k_tiles blocks. Rows of its score tiles are
// keys, columns queries (Sᵀ, Pᵀ, dSᵀ). With dq_part (the split dq, see flash_tc_dq_reduce_kernel),
// each step also writes dS·k of its keys for its queries (unscaled) to the block's slice
// dq_part[(tile · BH + bh) · t_pad + i][d]; the rows from the first query that sees the tile up to
// i0 + 31 of the last step, which may pass T (t_pad = T + 32 leaves room). kAsync (TF32 only): the
// q and dout tiles, lse and Δ are double-buffered and copied asynchronously.
template <int D, typename P, bool kAsync>
__global__ void __launch_bounds__(kThreads)
    flash_tc_dkdv_kernel(const float* q, const float* k, const float* v, const float* dout, const float* lse,
                         const float* delta, float* dk, float* dv, float* dq_part, int64_t t_pad, int64_t T, int64_t S,
                         bool causal, float scale, int64_t k_tiles, AttentionHeads in, AttentionHeads ol) {
    using Tl = TcTiles<D, P, kAsync ? 2 : 1>;
    using E = typename TcIn<P>::T;
    constexpr int R = kTcRows, C = Tl::kBwdCols, LD = Tl::kLd, LDS = Tl::kBwdLds, LDP = Tl::kBwdLdp;
    E* k_s = tc_array<E>(0);
    E* v_s = tc_array<E>(Tl::kDkdvV);
    // Step t's q tile (dout's follows it), and its lse (raw; Δ follows it), in stage t % 2.
    auto q_tile = [](int64_t step) { return tc_array<E>(Tl::kDkdvQ + (int)(step % Tl::kNumStages) * Tl::kDkdvStage); };
    auto stats = [](int64_t step) {
        return tc_array<float>(Tl::kDkdvLse + (int)(step % Tl::kNumStages) * Tl::kDkdvStatsStage);
    };
    const int64_t bh = (int64_t)blockIdx.x / k_tiles, k0 = (int64_t)blockIdx.x % k_tiles * R;
    q += in.offset(bh, T);
    k += in.offset(bh, S);
    v += in.offset(bh, S);
    dout += ol.offset(bh, T);
    lse += bh * T;
    delta += bh * T;
    const int warp = (int)threadIdx.x / kWarp, lane = (int)threadIdx.x % kWarp;
    const int64_t j0 = k0 + 16 * warp;  // the warp's first key
    const float scale2 = scale * kLog2e;  // P = exp2(s·scale·log2 e − lse·log2 e)
    const E* k_w = k_s + 16 * warp * LD;
    const E* v_w = v_s + 16 * warp * LD;
    float* s_w = tc_array<float>(Tl::kDkdvS) + 16 * warp * LDS;    // Sᵀ: [key][query]
    float* dp_w = tc_array<float>(Tl::kDkdvDp) + 16 * warp * LDS;  // dPᵀ
    E* p_w = tc_array<E>(Tl::kDkdvP) + 16 * warp * LDP;            // Pᵀ
    E* ds_w = tc_array<E>(Tl::kDkdvDs) + 16 * warp * LDP;          // dSᵀ

    tc_load_rows<D, R, LD>(k_s, k, in.ld, k0, S);
    tc_load_rows<D, R, LD>(v_s, v, in.ld, k0, S);
    AccFrag<P> dk_acc[D / 16], dv_acc[D / 16];
    UNROLL
    for (int f = 0; f < D / 16; f++) {
        wmma::fill_fragment(dk_acc[f], 0.f);
        wmma::fill_fragment(dv_acc[f], 0.f);
    }
    // The first query that sees key k0 (the block's smallest); causal, earlier queries see none of the tile.
    int64_t i_begin = causal ? k0 - (S - T) : 0;
    if (i_begin < 0) i_begin = 0;
    const bool live = j0 < S;  // a warp whose keys are all past S only keeps the barriers (and its dq share)
    const int64_t steps = (T - i_begin + C - 1) / C;
    // Step t's q, dout, lse and Δ, copied asynchronously into stage t % 2 (one batch; lse and Δ
    // four bytes at a time: their rows are not 16-byte aligned).
    auto copy_step = [&](int64_t t) {
        const int64_t i0 = i_begin + t * C;
        tc_copy_rows_async<D, C, LD>(reinterpret_cast<float*>(q_tile(t)), q, in.ld, i0, T);
        tc_copy_rows_async<D, C, LD>(reinterpret_cast<float*>(q_tile(t) + C * LD), dout, ol.ld, i0, T);
        for (int c = (int)threadIdx.x; c < 2 * C; c += kThreads) {
            const int64_t i = i0 + c % C;
            const float* src = c < C ? lse : delta;
            __pipeline_memcpy_async(stats(t) + (c < C ? 0 : Tl::kRowStats / 4) + c % C, i < T ? src + i : src, 4,
                                    i < T ? 0 : 4);
        }
        __pipeline_commit();
    };
    if (kAsync && steps > 0) copy_step(0);
    for (int64_t t = 0; t < steps; t++) {
        const int64_t i0 = i_begin + t * C;
        const E* q_s = q_tile(t);
        const E* do_s = q_s + C * LD;
        const float* lse_s = stats(t);  // natural log; Δ follows
        const float* delta_s = lse_s + Tl::kRowStats / 4;
        if constexpr (kAsync) {
            if (t + 1 < steps) {  // into the other stage, which every warp finished reading at step t − 1
                copy_step(t + 1);
                __pipeline_wait_prior(1);
            } else {
                __pipeline_wait_prior(0);
            }
            __syncthreads();  // step t's tiles have landed (first time: k and v are in place too)
        } else {
            __syncthreads();  // the previous step's q and dout are no longer read (first time: k and v are in place)
            tc_load_rows<D, C, LD>(q_tile(t), q, in.ld, i0, T);
            tc_load_rows<D, C, LD>(q_tile(t) + C * LD, dout, ol.ld, i0, T);
            for (int c = (int)threadIdx.x; c < C; c += kThreads) {
                stats(t)[c] = i0 + c < T ? lse[i0 + c] : 0.f;
                stats(t)[Tl::kRowStats / 4 + c] = i0 + c < T ? delta[i0 + c] : 0.f;
            }
            __syncthreads();
        }
        const int n = live_cols(T - i0, C);  // the queries of the tile in range
        if (live) {
            warp_gemm_to_shared<P, C, D, wmma::col_major, kAsync>(k_w, LD, q_s, LD, s_w, LDS, n);  // (k·qᵀ)[key][query]
            warp_gemm_to_shared<P, C, D, wmma::col_major, kAsync>(v_w, LD, do_s, LD, dp_w, LDS, n);  // (v·doutᵀ) = dPᵀ
            __syncwarp();
            // Lane c does column c (query i0 + c) of every row (C = 32 lanes): its lse and Δ once,
            // and the last key it sees (keys j0 + r <= last). Columns past n were not computed:
            // masked, so never read.
            const int64_t i = i0 + lane;
            const float lse2 = lse_s[lane] * kLog2e, d = delta_s[lane];
            const int64_t last = i >= T ? -1 : (causal ? (i + S - T < S ? i + S - T : S - 1) : S - 1);
            TC_UNROLL_ELEMENTS
            for (int r = 0; r < 16; r++) {
                const int at = r * LDS + lane, atp = r * LDP + lane;
                const bool seen = j0 + r <= last;
                const float p = seen ? exp2f(s_w[at] * scale2 - lse2) : 0.f;
                ds_w[atp] = TcIn<P>::round(seen ? p * (dp_w[at] - d) : 0.f);
                p_w[atp] = TcIn<P>::round(p);
            }
            __syncwarp();
            warp_gemm_accumulate<P, D, C, kAsync>(p_w, LDP, do_s, LD, dv_acc, n);  // dv += Pᵀ·dout
            warp_gemm_accumulate<P, D, C, kAsync>(ds_w, LDP, q_s, LD, dk_acc, n);  // dk += dSᵀ·q
        }
        if (dq_part) {
            __syncthreads();  // every warp's rows of dSᵀ are written (the next step's first barrier
                              // keeps them until every warp has read them)
            block_dq_part<P, D>(tc_array<E>(Tl::kDkdvDs), LDP, k_s, LD,
                                dq_part + (((int64_t)blockIdx.x % k_tiles * (gridDim.x / k_tiles) + bh) * t_pad + i0) * D,
                                live_cols(S - k0, R));
        } else if (kAsync) {
            __syncthreads();  // this stage is refilled at step t + 2, copied at t + 1 (with dq_part the
                              // barrier above comes after its last read)
        }
    }
    UNROLL
    for (int f = 0; f < D / 16; f++)
        UNROLL
        for (int e = 0; e < dk_acc[f].num_elements; e++) dk_acc[f].x[e] *= scale;
    // The staging tile: under TF32 the warp's own rows of k, read by the other warps only for dq's
    // part; under bf16 it spans other warps' tiles. (Every warp gets here: the query loop's trip
    // count is the block's.)
    if (!Tl::kInPlace || dq_part) __syncthreads();
    __syncwarp();
    float* staging = tc_array<float>(0) + 16 * warp * Tl::kOutLd;
    if (dk) tc_write_output<P, D>(dk_acc, nullptr, nullptr, staging, dk + in.offset(bh, S), in.ld, j0, S);
    if (dv) tc_write_output<P, D>(dv_acc, nullptr, nullptr, staging, dv + in.offset(bh, S), in.ld, j0, S);
}

// One key step of dq for a warp's 16 rows: S = q·kᵀ and dP = dout·vᵀ of the tile's first n keys,
// dS = P ⊙ (dP − Δ) with P recomputed from lse, and acc += dS·k. kRoundB: k and v are raw floats.
template <typename Tl, int D, typename P, bool kRoundB>
__device__ __forceinline__ void dq_step(const typename Tl::T* q_w, const typename Tl::T* do_w,
                                        const typename Tl::T* k_s, const typename Tl::T* v_s, float* s_w, float* dp_w,
                                        typename Tl::T* ds_w, const float* lse_w, const float* delta_w,
                                        const int64_t* seen_w, AccFrag<P> (&acc)[D / 16], int64_t k0, int n,
                                        float scale2) {
    constexpr int C = Tl::kBwdCols, LD = Tl::kLd, LDS = Tl::kBwdLds, LDP = Tl::kBwdLdp;
    warp_gemm_to_shared<P, C, D, wmma::col_major, kRoundB>(q_w, LD, k_s, LD, s_w, LDS, n);    // q·kᵀ
    warp_gemm_to_shared<P, C, D, wmma::col_major, kRoundB>(do_w, LD, v_s, LD, dp_w, LDS, n);  // dP = dout·vᵀ
    __syncwarp();
    // Lane c does column c (key k0 + c) of every row (C = 32 lanes); row r sees keys [0, seen_w[r]).
    // Columns past n were not computed: masked, so never read.
    const int lane = (int)threadIdx.x % kWarp;
    const int64_t j = k0 + lane;
    TC_UNROLL_ELEMENTS
    for (int r = 0; r < 16; r++) {
        const int at = r * LDS + lane;
        const bool seen = j < seen_w[r];
        const float p = seen ? exp2f(s_w[at] * scale2 - lse_w[r]) : 0.f;
        ds_w[r * LDP + lane] = TcIn<P>::round(seen ? p * (dp_w[at] - delta_w[r]) : 0.f);
    }
    __syncwarp();
    warp_gemm_accumulate<P, D, C, kRoundB>(ds_w, LDP, k_s, LD, acc, n);  // dq += dS·k
}

// dq of a tile of 64 queries, 16 a warp. Grid: BH · q_tiles blocks. Rows of its score tiles are
// queries, columns keys. kAsync (TF32 only): the k and v tiles are double-buffered and copied
// asynchronously.
template <int D, typename P, bool kAsync>
__global__ void __launch_bounds__(kThreads)
    flash_tc_dq_kernel(const float* q, const float* k, const float* v, const float* dout, const float* lse,
                       const float* delta, float* dq, int64_t T, int64_t S, bool causal, float scale, int64_t q_tiles,
                       AttentionHeads in, AttentionHeads ol) {
    using Tl = TcTiles<D, P, kAsync ? 2 : 1>;
    using E = typename TcIn<P>::T;
    constexpr int R = kTcRows, C = Tl::kBwdCols, LD = Tl::kLd, LDS = Tl::kBwdLds, LDP = Tl::kBwdLdp;
    E* q_s = tc_array<E>(0);
    E* do_s = tc_array<E>(Tl::kDqDo);
    auto k_tile = [](int64_t step) { return tc_array<E>(Tl::kDqK + (int)(step % Tl::kNumStages) * Tl::kDqStage); };
    float* lse_s = tc_array<float>(Tl::kDqLse);  // in log2 units
    float* delta_s = tc_array<float>(Tl::kDqDelta);
    int64_t* seen_s = tc_array<int64_t>(Tl::kDqSeen);  // keys [0, seen) each row sees
    const int64_t bh = (int64_t)blockIdx.x / q_tiles, q0 = (int64_t)blockIdx.x % q_tiles * R;
    q += in.offset(bh, T);
    k += in.offset(bh, S);
    v += in.offset(bh, S);
    dout += ol.offset(bh, T);
    lse += bh * T;
    delta += bh * T;
    const int warp = (int)threadIdx.x / kWarp;
    const int64_t i0 = q0 + 16 * warp;  // the warp's first query
    const E* q_w = q_s + 16 * warp * LD;
    const E* do_w = do_s + 16 * warp * LD;
    float* s_w = tc_array<float>(Tl::kDqS) + 16 * warp * LDS;    // S
    float* dp_w = tc_array<float>(Tl::kDqDp) + 16 * warp * LDS;  // dP
    E* ds_w = tc_array<E>(Tl::kDqDs) + 16 * warp * LDP;          // dS
    const float* lse_w = lse_s + 16 * warp;
    const float* delta_w = delta_s + 16 * warp;
    const int64_t* seen_w = seen_s + 16 * warp;
    const float scale2 = scale * kLog2e;  // P = exp2(s·scale·log2 e − lse·log2 e)

    tc_load_rows<D, R, LD>(q_s, q, in.ld, q0, T);
    tc_load_rows<D, R, LD>(do_s, dout, ol.ld, q0, T);
    for (int r = (int)threadIdx.x; r < R; r += kThreads) {
        lse_s[r] = q0 + r < T ? lse[q0 + r] * kLog2e : INFINITY;
        delta_s[r] = q0 + r < T ? delta[q0 + r] : 0.f;
        seen_s[r] = q0 + r < T ? visible_keys(q0 + r, T, S, causal) : 0;
    }
    AccFrag<P> acc[D / 16];
    UNROLL
    for (int f = 0; f < D / 16; f++) wmma::fill_fragment(acc[f], 0.f);
    const int64_t k_end = keys_seen_by(q0, R, T, S, causal), steps = (k_end + C - 1) / C;
    const bool live = i0 < T;  // a warp whose rows are all past T only keeps the barriers
    for_each_kv_step<D, C, LD, kAsync>(k_tile, k, v, in.ld, steps, S, [&](const E* k_s, const E* v_s, int64_t k0) {
        if (live)
            dq_step<Tl, D, P, kAsync>(q_w, do_w, k_s, v_s, s_w, dp_w, ds_w, lse_w, delta_w, seen_w, acc, k0,
                                      live_cols(k_end - k0, C), scale2);
    });
    UNROLL
    for (int f = 0; f < D / 16; f++)
        UNROLL
        for (int e = 0; e < acc[f].num_elements; e++) acc[f].x[e] *= scale;
    // The staging tile: under TF32 the warp's own rows of q, under bf16 it spans other warps' tiles.
    // A barrier either way: q's rows were loaded by every thread, and when no key is seen (causal,
    // T - S >= 64) the key loop, whose barriers would have ordered those loads, never ran.
    __syncthreads();
    tc_write_output<P, D>(acc, nullptr, nullptr, tc_array<float>(0) + 16 * warp * Tl::kOutLd, dq + in.offset(bh, T),
                          in.ld, i0, T);
}

// The split dq: dq[bh, i] = scale · Σ_tile dq_part[tile, bh, i], over the key tiles whose keys
// query i sees some of (all, or causal the tiles up to the one of its last key), in tile order:
// the same bits on every run. One thread per float4 of dq.
template <int D>
__global__ void flash_tc_dq_reduce_kernel(const float* dq_part, float* dq, int64_t BH, int64_t T, int64_t S,
                                          int64_t t_pad, int64_t k_tiles, bool causal, float scale, AttentionHeads in) {
    constexpr int V = D / 4;
    GRID_STRIDE_LOOP(e, BH * T * V) {
        const int64_t bh = e / (T * V), i = e / V % T, c = e % V;
        // Tile t holds rows from its first query on: max(0, 64·t − (S − T)) causal, 0 otherwise.
        const int64_t last = i + S - T;  // causal: the last key query i sees
        const int64_t tiles = !causal ? k_tiles : last < 0 ? 0 : last / kTcRows + 1;
        float4 sum{0.f, 0.f, 0.f, 0.f};
        for (int64_t t = 0; t < (tiles < k_tiles ? tiles : k_tiles); t++) {
            const float4 x = reinterpret_cast<const float4*>(dq_part + ((t * BH + bh) * t_pad + i) * D)[c];
            sum.x += x.x;
            sum.y += x.y;
            sum.z += x.z;
            sum.w += x.w;
        }
        reinterpret_cast<float4*>(dq + in.offset(bh, T) + i * in.ld)[c] =
            float4{sum.x * scale, sum.y * scale, sum.z * scale, sum.w * scale};
    }
}

// ---------------------------------------------------------------------------------------------
// Host side.

std::atomic<uint64_t> g_forward_calls{0}, g_backward_calls{0}, g_tc_forward_calls{0}, g_tc_backward_calls{0};
std::atomic<uint64_t> g_bf16_forward_calls{0}, g_bf16_backward_calls{0}, g_split_dq_calls{0};
std::atomic<uint64_t> g_async_forward_calls{0}, g_async_backward_calls{0}, g_narrow_forward_calls{0};
std::atomic<int> g_async{-1};  // -1: not decided yet (the environment is read at the first question)
std::atomic<int> g_narrow{-1};

// The tensor-core backward's split dq (flash_tc_dq_reduce_kernel): the dk/dv kernel also writes each
// key tile's part of dq, and a small kernel sums the parts, instead of the dq kernel, which
// recomputes the scores and dP: 10·T·S·D FLOPs a head instead of 14, for a scratch of k_tiles
// partial dq's. Taken when dk or dv is wanted too and there are at most 8 key tiles (S <= 512):
// the scratch is then at most 8 times q's size, freed at the end of the backward.
constexpr int64_t kSplitDqTiles = 8;
std::atomic<int> g_split_dq{-1};  // -1: not decided yet (the environment is read at the first question)
std::atomic<int> g_fused{-1};  // -1: not decided yet (the environment is read at the first question)

// Blocks of a [BH × tiles] grid, as one grid dimension (x allows 2^31 − 1; y and z only 65535).
dim3 grid_of(int64_t BH, int64_t tiles, const char* what) {
    int64_t blocks = BH * tiles;
    if (blocks > 2147483647)
        fail(std::string(what) + ": " + std::to_string(blocks) + " blocks, more than a grid holds");
    return dim3((unsigned)blocks);
}

// Where the heads lie: the layouts of engine/attention_layout.h (q, k, v and their gradients as
// `in`; out and dout as `out`).
struct Layouts {
    AttentionHeads in, out;
};

template <int D>
void forward_for(const float* q, const float* k, const float* v, float* out, float* lse, int64_t BH, int64_t T,
                 int64_t S, bool causal, float scale, Layouts L) {
    const int64_t tiles = (T + Tiles<D>::kFwdRows - 1) / Tiles<D>::kFwdRows;
    KERNEL_LAUNCH(flash_forward_kernel<D>, grid_of(BH, tiles, "flash attention forward"), kThreads, 0, q, k, v, out,
                  lse, T, S, causal, scale, tiles, L.in, L.out);
}

template <int D>
void backward_for(const float* q, const float* k, const float* v, const float* dout, const float* lse,
                  const float* delta, float* dq, float* dk, float* dv, int64_t BH, int64_t T, int64_t S, bool causal,
                  float scale, Layouts L) {
    if (dk || dv) {
        const int64_t tiles = (S + Tiles<D>::kBwdRows - 1) / Tiles<D>::kBwdRows;
        KERNEL_LAUNCH(flash_dkdv_kernel<D>, grid_of(BH, tiles, "flash attention dk/dv"), kThreads, 0, q, k, v, dout,
                      lse, delta, dk, dv, T, S, causal, scale, tiles, L.in, L.out);
    }
    if (dq) {
        const int64_t tiles = (T + Tiles<D>::kBwdRows - 1) / Tiles<D>::kBwdRows;
        KERNEL_LAUNCH(flash_dq_kernel<D>, grid_of(BH, tiles, "flash attention dq"), kThreads, 0, q, k, v, dout, lse,
                      delta, dq, T, S, causal, scale, tiles, L.in, L.out);
    }
}

// The tensor-core kernels' dynamic shared memory: above 48 KiB a kernel must opt in (once).
template <typename... A>
void tc_opt_in(void (*kernel)(A...), size_t bytes, const char* what) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes), what);
}

template <int D, typename P, bool kAsync, int kFwdC = kDefaultFwdCols<D>>
void tc_forward_for(const float* q, const float* k, const float* v, float* out, float* lse, int64_t BH, int64_t T,
                    int64_t S, bool causal, float scale, Layouts L) {
    const int64_t tiles = (T + kTcRows - 1) / kTcRows;
    const size_t smem = TcTiles<D, P, kAsync ? 2 : 1, kFwdC>::kFwdBytes;
    static const bool opted = (tc_opt_in(flash_tc_forward_kernel<D, P, kAsync, kFwdC>, smem,
                                         "flash attention (tensor cores) forward"),
                               true);
    (void)opted;
    KERNEL_LAUNCH((flash_tc_forward_kernel<D, P, kAsync, kFwdC>), grid_of(BH, tiles, "flash attention forward"),
                  kThreads, smem, q, k, v, out, lse, T, S, causal, scale, tiles, L.in, L.out);
}

template <int D, typename P, bool kAsync>
void tc_backward_for(const float* q, const float* k, const float* v, const float* dout, const float* lse,
                     const float* delta, float* dq, float* dk, float* dv, int64_t BH, int64_t T, int64_t S, bool causal,
                     float scale, Layouts L) {
    const int64_t k_tiles = (S + kTcRows - 1) / kTcRows, t_pad = T + kWarp;
    const bool split = dq && (dk || dv) && k_tiles <= kSplitDqTiles && flash_split_dq_enabled();
    float* part = split ? static_cast<float*>(alloc(sizeof(float) * (size_t)(k_tiles * BH * t_pad * D))) : nullptr;
    try {
        if (dk || dv) {
            const size_t smem = TcTiles<D, P, kAsync ? 2 : 1>::kDkdvBytes;
            static const bool opted =
                (tc_opt_in(flash_tc_dkdv_kernel<D, P, kAsync>, smem, "flash attention (tensor cores) dk/dv"), true);
            (void)opted;
            KERNEL_LAUNCH((flash_tc_dkdv_kernel<D, P, kAsync>), grid_of(BH, k_tiles, "flash attention dk/dv"), kThreads,
                          smem, q, k, v, dout, lse, delta, dk, dv, part, t_pad, T, S, causal, scale, k_tiles, L.in,
                          L.out);
        }
        if (split) {
            g_split_dq_calls.fetch_add(1, std::memory_order_relaxed);
            KERNEL_LAUNCH(flash_tc_dq_reduce_kernel<D>, blocks_for(BH * T * (D / 4)), kBlockSize, 0, part, dq, BH, T,
                          S, t_pad, k_tiles, causal, scale, L.in);
        } else if (dq) {
            const int64_t tiles = (T + kTcRows - 1) / kTcRows;
            const size_t smem = TcTiles<D, P, kAsync ? 2 : 1>::kDqBytes;
            static const bool opted =
                (tc_opt_in(flash_tc_dq_kernel<D, P, kAsync>, smem, "flash attention (tensor cores) dq"), true);
            (void)opted;
            KERNEL_LAUNCH((flash_tc_dq_kernel<D, P, kAsync>), grid_of(BH, tiles, "flash attention dq"), kThreads, smem,
                          q, k, v, dout, lse, delta, dq, T, S, causal, scale, tiles, L.in, L.out);
        }
    } catch (...) {
        if (part) free(part);
        throw;
    }
    if (part) free(part);  // stream-ordered: after the kernels that read it
}

// Which tensor-core kernels a call of head dim D takes: bf16 inputs under bf16, TF32 under tf32;
// at D = 64 the narrow forward (32 keys a step) when switched on; else the asynchronous copies
// (TF32 only) when switched on.
struct TcKind {
    bool bf16, narrow, async;
};
template <int D>
TcKind tc_forward_kind() {
    const bool bf16 = gemm_precision() == GemmPrecision::bf16;
    const bool narrow = D == 64 && (bf16 || !flash_async_enabled()) && flash_narrow_forward_enabled();
    return {bf16, narrow, !bf16 && !narrow && flash_async_enabled()};
}
TcKind tc_backward_kind() {
    const bool bf16 = gemm_precision() == GemmPrecision::bf16;
    return {bf16, false, !bf16 && flash_async_enabled()};
}

// The dynamic shared memory those kernels take (the backward: the larger of dk/dv and dq).
template <int D>
size_t tc_forward_bytes(TcKind kind) {
    using Tf32 = wmma::precision::tf32;
    if constexpr (D == 64) {
        if (kind.narrow)
            return kind.bf16 ? TcTiles<D, __nv_bfloat16, 1, 32>::kFwdBytes : TcTiles<D, Tf32, 1, 32>::kFwdBytes;
    }
    if (kind.bf16) return TcTiles<D, __nv_bfloat16, 1>::kFwdBytes;
    return kind.async ? TcTiles<D, Tf32, 2>::kFwdBytes : TcTiles<D, Tf32, 1>::kFwdBytes;
}
template <typename Tiles>
constexpr size_t backward_bytes() {
    return (size_t)std::max(Tiles::kDkdvBytes, Tiles::kDqBytes);
}
template <int D>
size_t tc_backward_bytes(TcKind kind) {
    using Tf32 = wmma::precision::tf32;
    if (kind.bf16) return backward_bytes<TcTiles<D, __nv_bfloat16, 1>>();
    return kind.async ? backward_bytes<TcTiles<D, Tf32, 2>>() : backward_bytes<TcTiles<D, Tf32, 1>>();
}

// The tensor-core forward of head dim D; false (nothing run) where the device gives a block less
// shared memory than its kernel takes: at D = 128 some need 110-155 KB, and an RTX 30/40 card gives
// 99 KB. The caller then runs the fp32 kernels (the same result, at fp32's precision).
template <int D>
bool tc_forward(const float* q, const float* k, const float* v, float* out, float* lse, int64_t BH, int64_t T,
                int64_t S, bool causal, float scale, Layouts L) {
    const TcKind kind = tc_forward_kind<D>();
    if (tc_forward_bytes<D>(kind) > max_shared_memory_per_block()) return false;
    g_tc_forward_calls.fetch_add(1, std::memory_order_relaxed);
    if (kind.bf16) g_bf16_forward_calls.fetch_add(1, std::memory_order_relaxed);
    if constexpr (D == 64) {
        if (kind.narrow) {
            g_narrow_forward_calls.fetch_add(1, std::memory_order_relaxed);
            if (kind.bf16) tc_forward_for<D, __nv_bfloat16, false, 32>(q, k, v, out, lse, BH, T, S, causal, scale, L);
            else tc_forward_for<D, wmma::precision::tf32, false, 32>(q, k, v, out, lse, BH, T, S, causal, scale, L);
            return true;
        }
    }
    if (kind.bf16) {
        tc_forward_for<D, __nv_bfloat16, false>(q, k, v, out, lse, BH, T, S, causal, scale, L);
    } else if (kind.async) {
        g_async_forward_calls.fetch_add(1, std::memory_order_relaxed);
        tc_forward_for<D, wmma::precision::tf32, true>(q, k, v, out, lse, BH, T, S, causal, scale, L);
    } else {
        tc_forward_for<D, wmma::precision::tf32, false>(q, k, v, out, lse, BH, T, S, causal, scale, L);
    }
    return true;
}
// The tensor-core backward of head dim D; false (nothing run) where its kernels do not fit, as above.
template <int D>
bool tc_backward(const float* q, const float* k, const float* v, const float* dout, const float* lse,
                 const float* delta, float* dq, float* dk, float* dv, int64_t BH, int64_t T, int64_t S, bool causal,
                 float scale, Layouts L) {
    const TcKind kind = tc_backward_kind();
    if (tc_backward_bytes<D>(kind) > max_shared_memory_per_block()) return false;
    g_tc_backward_calls.fetch_add(1, std::memory_order_relaxed);
    if (kind.bf16) {
        g_bf16_backward_calls.fetch_add(1, std::memory_order_relaxed);
        tc_backward_for<D, __nv_bfloat16, false>(q, k, v, dout, lse, delta, dq, dk, dv, BH, T, S, causal, scale, L);
    } else if (kind.async) {
        g_async_backward_calls.fetch_add(1, std::memory_order_relaxed);
        tc_backward_for<D, wmma::precision::tf32, true>(q, k, v, dout, lse, delta, dq, dk, dv, BH, T, S, causal, scale,
                                                        L);
    } else {
        tc_backward_for<D, wmma::precision::tf32, false>(q, k, v, dout, lse, delta, dq, dk, dv, BH, T, S, causal, scale,
                                                         L);
    }
    return true;
}

// The tensor-core kernels run when the GEMMs may round (tf32 or bf16); fp32 keeps the fp32 kernels.
bool use_tensor_cores() { return gemm_precision() != GemmPrecision::fp32; }

[[noreturn]] void unsupported(int64_t D) {
    fail("flash attention: head dim " + std::to_string(D) + " has no kernel (32, 64 or 128; attention falls back " +
         "to the unfused path for the others)");
}


// The layouts of a call, checked: both of head dim D; for the tensor-core kernels, which move rows
// as float4, every pointer 16-byte aligned and rows a multiple of 4 floats apart (the allocator's
// tensors, and heads D floats apart within them, always are).
Layouts checked_layouts(const char* what, int64_t D, AttentionHeads in, AttentionHeads out,
                        std::initializer_list<const float*> pointers) {
    if (in.D != D || out.D != D || in.ld < D || out.ld < D)
        fail(std::string(what) + ": layouts of head dim " + std::to_string(in.D) + " (rows " + std::to_string(in.ld) +
             " apart) and " + std::to_string(out.D) + " (" + std::to_string(out.ld) + ") for head dim " +
             std::to_string(D));
    if (use_tensor_cores()) {
        bool aligned = in.ld % 4 == 0 && out.ld % 4 == 0;
        for (const float* p : pointers) aligned = aligned && reinterpret_cast<uintptr_t>(p) % 16 == 0;
        if (!aligned)
            fail(std::string(what) + ": the tensor-core kernels read rows as float4: q, k, v, out and their " +
                 "gradients must start on 16-byte boundaries, their rows a multiple of 4 floats apart");
    }
    return {in, out};
}

// Zeros the BH heads of `rows` rows each of a tensor in layout L (only its heads' columns).
__global__ void zero_heads_kernel(float* x, int64_t n, int64_t rows, AttentionHeads L) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
        const int64_t head = e / (rows * L.D), r = e / L.D % rows, d = e % L.D;
        x[L.offset(head, rows) + r * L.ld + d] = 0.f;
    }
}
void zero_rows(float* x, AttentionHeads L, int64_t BH, int64_t rows) {
    const int64_t n = BH * rows * L.D;
    if (n > 0) KERNEL_LAUNCH(zero_heads_kernel, blocks_for(n), kBlockSize, 0, x, n, rows, L);
}

}  // namespace

bool flash_attention_supports(int64_t D) { return D == 32 || D == 64 || D == 128; }

bool fused_attention_enabled() { return env_switch(g_fused, "INITLAB_FUSED_ATTENTION", false); }
void set_fused_attention(bool on) { g_fused.store(on ? 1 : 0, std::memory_order_relaxed); }

bool flash_split_dq_enabled() { return env_switch(g_split_dq, "INITLAB_FLASH_SPLIT_DQ", true); }
void set_flash_split_dq(bool on) { g_split_dq.store(on ? 1 : 0, std::memory_order_relaxed); }

bool flash_async_enabled() { return env_switch(g_async, "INITLAB_FLASH_ASYNC", false); }
void set_flash_async(bool on) { g_async.store(on ? 1 : 0, std::memory_order_relaxed); }

bool flash_narrow_forward_enabled() { return env_switch(g_narrow, "INITLAB_FLASH_NARROW_FORWARD", false); }
void set_flash_narrow_forward(bool on) { g_narrow.store(on ? 1 : 0, std::memory_order_relaxed); }

FlashAttentionCalls flash_attention_calls() {
    FlashAttentionCalls c;
    c.forward = g_forward_calls.load(std::memory_order_relaxed);
    c.backward = g_backward_calls.load(std::memory_order_relaxed);
    c.tc_forward = g_tc_forward_calls.load(std::memory_order_relaxed);
    c.tc_backward = g_tc_backward_calls.load(std::memory_order_relaxed);
    c.bf16_forward = g_bf16_forward_calls.load(std::memory_order_relaxed);
    c.bf16_backward = g_bf16_backward_calls.load(std::memory_order_relaxed);
    c.split_dq = g_split_dq_calls.load(std::memory_order_relaxed);
    c.async_forward = g_async_forward_calls.load(std::memory_order_relaxed);
    c.narrow_forward = g_narrow_forward_calls.load(std::memory_order_relaxed);
    c.async_backward = g_async_backward_calls.load(std::memory_order_relaxed);
    return c;
}

void flash_attention_forward(const float* q, const float* k, const float* v, float* out, float* lse, int64_t BH,
                             int64_t T, int64_t S, int64_t D, bool causal, float scale, AttentionHeads in,
                             AttentionHeads out_layout) {
    if (!flash_attention_supports(D)) unsupported(D);
    const Layouts L = checked_layouts("flash attention forward", D, in, out_layout, {q, k, v, out});
    g_forward_calls.fetch_add(1, std::memory_order_relaxed);
    if (BH * T == 0) return;
    if (S == 0) {  // no keys: every query sees none
        zero_rows(out, L.out, BH, T);
        fill_f32(lse, INFINITY, BH * T);
        return;
    }
    // The FLOPs of the unfused path's two GEMMs (scores, P·v): the work the model asks for.
    profile::note_flops(4.0 * (double)BH * (double)T * (double)S * (double)D);
    if (use_tensor_cores()) {
        const bool ran = D == 32   ? tc_forward<32>(q, k, v, out, lse, BH, T, S, causal, scale, L)
                         : D == 64 ? tc_forward<64>(q, k, v, out, lse, BH, T, S, causal, scale, L)
                                   : tc_forward<128>(q, k, v, out, lse, BH, T, S, causal, scale, L);
        if (ran) return;
    }
    switch (D) {
        case 32: forward_for<32>(q, k, v, out, lse, BH, T, S, causal, scale, L); break;
        case 64: forward_for<64>(q, k, v, out, lse, BH, T, S, causal, scale, L); break;
        default: forward_for<128>(q, k, v, out, lse, BH, T, S, causal, scale, L); break;
    }
}

void flash_attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                              const float* dout, float* dq, float* dk, float* dv, int64_t BH, int64_t T, int64_t S,
                              int64_t D, bool causal, float scale, AttentionHeads in, AttentionHeads out_layout) {
    if (!flash_attention_supports(D)) unsupported(D);
    const Layouts L = checked_layouts("flash attention backward", D, in, out_layout, {q, k, v, out, dout, dq, dk, dv});
    g_backward_calls.fetch_add(1, std::memory_order_relaxed);
    if (BH == 0 || S == 0) return;
    if (T == 0) {  // no queries: dk and dv are empty sums
        if (dk) zero_rows(dk, L.in, BH, S);
        if (dv) zero_rows(dv, L.in, BH, S);
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
        KERNEL_LAUNCH(flash_delta_kernel, blocks_for(rows * 32), kBlockSize, 0, out, dout, delta, rows, T, L.out);
        const bool ran =
            use_tensor_cores() &&
            (D == 32   ? tc_backward<32>(q, k, v, dout, lse, delta, dq, dk, dv, BH, T, S, causal, scale, L)
             : D == 64 ? tc_backward<64>(q, k, v, dout, lse, delta, dq, dk, dv, BH, T, S, causal, scale, L)
                       : tc_backward<128>(q, k, v, dout, lse, delta, dq, dk, dv, BH, T, S, causal, scale, L));
        if (!ran) {
            switch (D) {
                case 32: backward_for<32>(q, k, v, dout, lse, delta, dq, dk, dv, BH, T, S, causal, scale, L); break;
                case 64: backward_for<64>(q, k, v, dout, lse, delta, dq, dk, dv, BH, T, S, causal, scale, L); break;
                default: backward_for<128>(q, k, v, dout, lse, delta, dq, dk, dv, BH, T, S, causal, scale, L); break;
            }
        }
    } catch (...) {
        free(delta);
        throw;
    }
    free(delta);  // stream-ordered: after the kernels that read it
}

}  // namespace engine::cuda
