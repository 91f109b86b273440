// engine/cuda/shape.cu: data movement kernels (engine/cuda/shape.h). Indices are 64-bit (the
// permute of rows uses 32 bits where the size allows);
// every kernel walks its elements with a grid-stride loop over the OUTPUT (or, for the
// scatter-adds, over the gradient), so consecutive threads write consecutive addresses.
#include "engine/cuda/kernel.h"
#include "engine/cuda/shape.h"

// Loops over the (at most kMaxDims) dims, or a lane's columns, are UNROLLed (engine/cuda/kernel.h):
// they index the kernels' arrays with constants, which nvcc then keeps in registers.

namespace engine::cuda {

// ---------------------------------------------------------------------------------------------
// permute
//
// The host first simplifies the permutation: size-1 dims are dropped and dims that stay adjacent
// and in order merge ([B,T,H,D] -> [B,H,T,D] is a 4-d permute with the last dim kept; a 2-d
// transpose stays 2-d). Then:
//   - identity: one device-to-device copy;
//   - last dim kept: each output row is a contiguous input row, so a plain elementwise kernel
//     reads and writes coalesced;
//   - last dim moved: a tiled transpose through shared memory, 32x32 tiles of the two dims that
//     are contiguous in the input (dim a) and in the output (dim b), reading along a and writing
//     along b, both coalesced; the remaining dims index the tiles.

// Last dim kept: output row r is one contiguous input row. A thread moves a Vec at a time (a
// float4 when the row length and both pointers allow it: one 16-byte load and store), and the
// index arithmetic (a division per dim) runs once per Vec and in 32 bits when the tensor allows:
// with 64-bit divisions for every float this kernel moved 0.8 TB/s on an H200 (ViT-Tiny's head
// split), a fifth of the memory's speed.
template <typename I>
struct PermuteRows {
    int nd;
    I size[kMaxDims];       // output dims, counted in Vecs
    I in_stride[kMaxDims];  // input stride of each output dim, counted in Vecs
};

template <typename Vec, typename I>
__global__ void permute_rows_kernel(const Vec* x, Vec* out, PermuteRows<I> p, I n) {
    for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < n; i += (I)blockDim.x * (I)gridDim.x) {
        I rem = i, off = 0;
        UNROLL
        for (int d = kMaxDims - 1; d >= 0; d--) {
            if (d >= p.nd) continue;
            off += (rem % p.size[d]) * p.in_stride[d];
            rem /= p.size[d];
        }
        out[i] = x[off];
    }
}

// n floats in rows of size[nd − 1]; vec floats per Vec divide the row and every stride.
template <typename Vec, typename I>
void permute_rows(const float* x, float* out, int nd, const int64_t* size, const int64_t* in_stride, int64_t n,
                  int vec) {
    PermuteRows<I> p{};
    p.nd = nd;
    for (int i = 0; i < nd; i++) {
        const bool last = i == nd - 1;  // its stride is 1 float, i.e. 1 Vec
        p.size[i] = (I)(last ? size[i] / vec : size[i]);
        p.in_stride[i] = (I)(last ? 1 : in_stride[i] / vec);
    }
    const I nv = (I)(n / vec);
    KERNEL_LAUNCH((permute_rows_kernel<Vec, I>), blocks_for(nv), kBlockSize, 0, reinterpret_cast<const Vec*>(x),
                  reinterpret_cast<Vec*>(out), p, nv);
}

constexpr int kTile = 32, kTileRows = 8;  // 32x8 threads move a 32x32 tile

struct PermuteTiled {
    int64_t na, nb;          // dim a: contiguous in the input; dim b: contiguous in the output
    int64_t in_stride_b;     // input stride of dim b
    int64_t out_stride_a;    // output stride of dim a
    int rest_nd;             // the other dims (outermost first)
    int64_t rest_size[kMaxDims], rest_in[kMaxDims], rest_out[kMaxDims];
    int64_t tiles_a, tiles_b, tiles;  // tiles = (product of rest sizes) * tiles_a * tiles_b
};

__global__ void permute_tiled_kernel(const float* x, float* out, PermuteTiled p) {
    SHARED_ARRAY(float, tile, kTile * (kTile + 1));  // +1 column: no bank conflicts on the column reads
    // Every thread of a block runs the same iterations (t depends on the block only), so the
    // barriers below are reached by all of them.
    for (int64_t t = blockIdx.x; t < p.tiles; t += gridDim.x) {
        int64_t ta = t % p.tiles_a, rem = t / p.tiles_a;
        int64_t tb = rem % p.tiles_b;
        rem /= p.tiles_b;
        int64_t base_in = 0, base_out = 0;
        UNROLL
        for (int d = kMaxDims - 1; d >= 0; d--) {
            if (d >= p.rest_nd) continue;
            int64_t k = rem % p.rest_size[d];
            rem /= p.rest_size[d];
            base_in += k * p.rest_in[d];
            base_out += k * p.rest_out[d];
        }
        int64_t a0 = ta * kTile, b0 = tb * kTile;
        for (int j = threadIdx.y; j < kTile; j += kTileRows) {  // read rows of b, along a
            int64_t a = a0 + threadIdx.x, b = b0 + j;
            if (a < p.na && b < p.nb) tile[j * (kTile + 1) + threadIdx.x] = x[base_in + b * p.in_stride_b + a];
        }
        __syncthreads();
        for (int j = threadIdx.y; j < kTile; j += kTileRows) {  // write rows of a, along b
            int64_t a = a0 + j, b = b0 + threadIdx.x;
            if (a < p.na && b < p.nb) out[base_out + a * p.out_stride_a + b] = tile[threadIdx.x * (kTile + 1) + j];
        }
        __syncthreads();  // the tile is reused by the next iteration
    }
}

void permute(const float* x, const Shape& xs, const int* perm, float* out) {
    int64_t n = xs.numel();
    if (n == 0) return;
    // Drop size-1 dims: keep[] maps old input dims to new ones.
    int nd = 0, newdim[kMaxDims];
    int64_t isz[kMaxDims];
    for (int d = 0; d < xs.ndim; d++) {
        newdim[d] = xs[d] == 1 ? -1 : nd;
        if (xs[d] != 1) isz[nd++] = xs[d];
    }
    int pr[kMaxDims], np = 0;
    for (int i = 0; i < xs.ndim; i++)
        if (newdim[perm[i]] >= 0) pr[np++] = newdim[perm[i]];
    // Merge runs of output dims that are consecutive input dims: group g covers input dims
    // [first[g], first[g] + len[g]).
    int first[kMaxDims], len[kMaxDims], ng = 0;
    for (int i = 0; i < np; i++) {
        if (ng > 0 && pr[i] == first[ng - 1] + len[ng - 1]) len[ng - 1]++;
        else { first[ng] = pr[i]; len[ng] = 1; ng++; }
    }
    // The merged input dims in input order, their sizes and strides; gp[i] = input dim of output dim i.
    int gp[kMaxDims];
    int64_t gsize[kMaxDims], gstride[kMaxDims];
    for (int i = 0; i < ng; i++) {
        int rank = 0;
        for (int j = 0; j < ng; j++) rank += first[j] < first[i];
        gp[i] = rank;
        int64_t s = 1;
        for (int k = 0; k < len[i]; k++) s *= isz[first[i] + k];
        gsize[rank] = s;
    }
    bool identity = true;
    for (int i = 0; i < ng; i++) identity = identity && gp[i] == i;
    if (identity) {
        copy_on_device(out, x, (size_t)n * sizeof(float));
        return;
    }
    int64_t s = 1;
    for (int d = ng - 1; d >= 0; d--) { gstride[d] = s; s *= gsize[d]; }
    int64_t osize[kMaxDims], ostride[kMaxDims];
    for (int i = 0; i < ng; i++) osize[i] = gsize[gp[i]];
    s = 1;
    for (int i = ng - 1; i >= 0; i--) { ostride[i] = s; s *= osize[i]; }

    if (gp[ng - 1] == ng - 1) {  // last dim kept: rows move whole
        int64_t in_stride[kMaxDims];
        for (int i = 0; i < ng; i++) in_stride[i] = gstride[gp[i]];
        // Every stride but the last (1) is a multiple of the row length, so float4s never straddle rows.
        const bool vec4 = osize[ng - 1] % 4 == 0 && (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out)) % 16 == 0;
        const bool small = n < (int64_t(1) << 30);  // i + the grid's stride stays below 2^31
        if (vec4 && small) permute_rows<float4, int32_t>(x, out, ng, osize, in_stride, n, 4);
        else if (vec4) permute_rows<float4, int64_t>(x, out, ng, osize, in_stride, n, 4);
        else if (small) permute_rows<float, int32_t>(x, out, ng, osize, in_stride, n, 1);
        else permute_rows<float, int64_t>(x, out, ng, osize, in_stride, n, 1);
        return;
    }
    PermuteTiled p{};
    int q = 0;  // output position of input dim ng-1 (dim a)
    while (gp[q] != ng - 1) q++;
    p.na = gsize[ng - 1];
    p.nb = osize[ng - 1];
    p.in_stride_b = gstride[gp[ng - 1]];
    p.out_stride_a = ostride[q];
    int64_t rest = 1;
    for (int i = 0; i < ng - 1; i++) {
        if (i == q) continue;
        p.rest_size[p.rest_nd] = osize[i];
        p.rest_in[p.rest_nd] = gstride[gp[i]];
        p.rest_out[p.rest_nd] = ostride[i];
        p.rest_nd++;
        rest *= osize[i];
    }
    p.tiles_a = (p.na + kTile - 1) / kTile;
    p.tiles_b = (p.nb + kTile - 1) / kTile;
    p.tiles = rest * p.tiles_a * p.tiles_b;
    unsigned grid = (unsigned)(p.tiles < 65536 * 8 ? p.tiles : 65536 * 8);
    KERNEL_LAUNCH(permute_tiled_kernel, grid, dim3(kTile, kTileRows), 0, x, out, p);
}

// ---------------------------------------------------------------------------------------------
// Slices along the middle dim of [outer, n, inner]: element r of an [outer, m, inner] slice.

__global__ void copy_middle_kernel(const float* x, int64_t n, int64_t inner, int64_t start, int64_t m, float* out,
                                   int64_t total) {
    int64_t row = m * inner;  // one outer index of the slice
    GRID_STRIDE_LOOP(i, total) {
        int64_t o = i / row, r = i - o * row;
        out[i] = x[(o * n + start) * inner + r];
    }
}

__global__ void place_middle_kernel(const float* src, int64_t n, int64_t inner, int64_t start, int64_t m, float* out,
                                    int64_t total) {
    int64_t row = m * inner;
    GRID_STRIDE_LOOP(i, total) {
        int64_t o = i / row, r = i - o * row;
        out[(o * n + start) * inner + r] = src[i];
    }
}

void copy_middle(const float* x, int64_t outer, int64_t n, int64_t inner, int64_t start, int64_t m, float* out) {
    int64_t total = outer * m * inner;
    if (total == 0) return;
    if (outer == 1 || m == n) {  // one contiguous block
        copy_on_device(out, x + (outer == 1 ? start * inner : 0), (size_t)total * sizeof(float));
        return;
    }
    KERNEL_LAUNCH(copy_middle_kernel, blocks_for(total), kBlockSize, 0, x, n, inner, start, m, out, total);
}

void place_middle(const float* src, int64_t outer, int64_t n, int64_t inner, int64_t start, int64_t m, float* out) {
    int64_t total = outer * m * inner;
    if (total == 0) return;
    if (outer == 1 || m == n) {
        copy_on_device(out + (outer == 1 ? start * inner : 0), src, (size_t)total * sizeof(float));
        return;
    }
    KERNEL_LAUNCH(place_middle_kernel, blocks_for(total), kBlockSize, 0, src, n, inner, start, m, out, total);
}

// ---------------------------------------------------------------------------------------------
// index_select / index_add over [outer, n, inner] with index [m]; gather over index [outer, m, inner].

__global__ void index_select_kernel(const float* x, int64_t n, int64_t inner, const int32_t* index, int64_t m,
                                    float* out, int64_t total) {
    GRID_STRIDE_LOOP(k, total) {
        int64_t j = k % inner, t = k / inner;
        int64_t i = t % m, o = t / m;
        const int32_t v = index[i];  // out of range: check_indices reports it; the row reads nothing
        out[k] = v >= 0 && v < n ? x[(o * n + v) * inner + j] : 0.f;
    }
}

// index_add: dx[o, index[i], :] += g[o, i, :], without atomics. The warp of (o, i0), where i0 is
// the first position of its index value v (no earlier position holds v), owns dx row (o, v): it
// walks the positions i0 .. m − 1 in order and adds the rows of those that hold v. Each element is
// then one sum in a fixed order, the CPU's (0 + g[i0] + g[i1] + ...: the same bits when dx starts
// at 0). With atomics the order was the order threads arrived: two runs of an LM step differed in
// the last bits on an H200. A lane keeps kIndexAddPerLane columns in registers, so a pass over the
// positions covers 256 columns; wider rows take several passes. The work: every warp first
// tests the positions before its own, 32 at a time, until one holds its index (at most m²/64
// index reads in all, when every index is distinct), then O(m / 32) ballots per distinct index
// and pass. The H200 measured 0.93 ms for an LM's 8192 tokens with a loop that tested one position
// at a time and every earlier one; this ballot form with the early stop has run only in the
// emulator.
constexpr int kIndexAddPerLane = 8;

__global__ void index_add_kernel(const float* g, int64_t n, int64_t inner, const int32_t* index, int64_t m, float* dx,
                                 int64_t outer) {
    const int lane = threadIdx.x % kWarp;
    const int64_t warps = (int64_t)gridDim.x * blockDim.x / kWarp;
    // w is the same for the 32 lanes of a warp, so every branch below on w, v or i is warp-uniform.
    for (int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / kWarp; w < outer * m; w += warps) {
        const int64_t o = w / m, i0 = w % m;
        const int32_t v = index[i0];
        // Not the first position of v: the warp stops at the first 32 positions that hold v (a
        // frequent token's repeats stop within its first use, not after i0 reads).
        bool earlier = false;
        for (int64_t base = 0; base < i0 && !earlier; base += kWarp)
            earlier = __any_sync(kFullMask, base + lane < i0 && index[base + lane] == v);
        if (earlier || v < 0 || v >= n) continue;  // out of range: check_indices reports it
        float* dr = dx + (o * n + v) * inner;
        for (int64_t j0 = 0; j0 < inner; j0 += kWarp * kIndexAddPerLane) {
            float acc[kIndexAddPerLane] = {};
            // 32 positions at a time: each lane tests one, the ballot's bits name the hits, taken
            // lowest first, i.e. in increasing position.
            for (int64_t base = i0; base < m; base += kWarp) {
                unsigned hits = __ballot_sync(kFullMask, base + lane < m && index[base + lane] == v);
                while (hits) {
                    const int b = __ffs((int)hits) - 1;
                    hits &= hits - 1;
                    const float* gr = g + (o * m + base + b) * inner;
                    UNROLL
                    for (int c = 0; c < kIndexAddPerLane; c++) {
                        int64_t j = j0 + c * kWarp + lane;
                        if (j < inner) acc[c] += gr[j];
                    }
                }
            }
            UNROLL
            for (int c = 0; c < kIndexAddPerLane; c++) {
                int64_t j = j0 + c * kWarp + lane;
                if (j < inner) dr[j] += acc[c];
            }
        }
    }
}

__global__ void gather_kernel(const float* x, int64_t n, int64_t inner, const int32_t* index, int64_t m, float* out,
                              int64_t total) {
    GRID_STRIDE_LOOP(k, total) {
        int64_t i = k % inner, o = k / (m * inner);
        const int32_t v = index[k];  // out of range: check_indices reports it
        out[k] = v >= 0 && v < n ? x[(o * n + v) * inner + i] : 0.f;
    }
}

__global__ void gather_backward_kernel(const float* g, int64_t n, int64_t inner, const int32_t* index, int64_t m,
                                       float* dx, int64_t total) {
    GRID_STRIDE_LOOP(k, total) {
        int64_t i = k % inner, o = k / (m * inner);
        const int32_t v = index[k];  // out of range: check_indices reports it
        if (v >= 0 && v < n) atomicAdd(dx + (o * n + v) * inner + i, g[k]);
    }
}

void index_select(const float* x, int64_t outer, int64_t n, int64_t inner, const int32_t* index, int64_t m, float* out) {
    int64_t total = outer * m * inner;
    if (total == 0) return;
    KERNEL_LAUNCH(index_select_kernel, blocks_for(total), kBlockSize, 0, x, n, inner, index, m, out, total);
}

void index_add(const float* g, int64_t outer, int64_t n, int64_t inner, const int32_t* index, int64_t m, float* dx) {
    if (outer * m * inner == 0) return;
    KERNEL_LAUNCH(index_add_kernel, blocks_for(outer * m * kWarp), kBlockSize, 0, g, n, inner, index, m, dx,
                  outer);
}

void gather(const float* x, int64_t outer, int64_t n, int64_t inner, const int32_t* index, int64_t m, float* out) {
    int64_t total = outer * m * inner;
    if (total == 0) return;
    KERNEL_LAUNCH(gather_kernel, blocks_for(total), kBlockSize, 0, x, n, inner, index, m, out, total);
}

void gather_backward(const float* g, int64_t outer, int64_t n, int64_t inner, const int32_t* index, int64_t m,
                     float* dx) {
    int64_t total = outer * m * inner;
    if (total == 0) return;
    KERNEL_LAUNCH(gather_backward_kernel, blocks_for(total), kBlockSize, 0, g, n, inner, index, m, dx, total);
}

// ---------------------------------------------------------------------------------------------
// masked_fill with a broadcasting mask, and the index range check.

struct MaskIndex {
    int nd;
    int64_t size[kMaxDims];     // dims of x
    int64_t mstride[kMaxDims];  // mask stride per dim of x (0 where the mask repeats)
};

__global__ void masked_fill_kernel(const float* x, const float* mask, MaskIndex p, float value, float* out, int64_t n) {
    GRID_STRIDE_LOOP(i, n) {
        int64_t rem = i, off = 0;
        UNROLL
        for (int d = kMaxDims - 1; d >= 0; d--) {
            if (d >= p.nd) continue;
            off += (rem % p.size[d]) * p.mstride[d];
            rem /= p.size[d];
        }
        out[i] = mask[off] != 0.f ? value : x[i];
    }
}

void masked_fill(const float* x, const Shape& xs, const float* mask, const Shape& ms, float value, float* out) {
    int64_t n = xs.numel();
    if (n == 0) return;
    MaskIndex p{};
    p.nd = xs.ndim;
    for (int d = 0; d < xs.ndim; d++) p.size[d] = xs[d];
    int64_t s = 1;
    for (int i = ms.ndim - 1, d = xs.ndim - 1; i >= 0 && d >= 0; i--, d--) {
        p.mstride[d] = ms[i] == 1 ? 0 : s;
        s *= ms[i];
    }
    KERNEL_LAUNCH(masked_fill_kernel, blocks_for(n), kBlockSize, 0, x, mask, p, value, out, n);
}

// Records the first index of index[0..m) outside [0, bound) (other than skip, when has_skip) in the
// bad index record (runtime.h), unless an earlier check owns it: the check that first claims the
// record (an atomic compare-and-swap of 0 for its number) keeps it until the host reports it, and
// its threads keep the least position with an atomic min, so the position the CPU would name wins.
__global__ void check_indices_kernel(const int32_t* index, int64_t m, int64_t bound, int32_t op, int32_t skip,
                                     int32_t has_skip, uint32_t check, BadIndex* record) {
    GRID_STRIDE_LOOP(i, m) {
        const int32_t v = index[i];
        if ((v >= 0 && v < bound) || (has_skip && v == skip)) continue;
        const uint32_t owner = atomicCAS(&record->check, 0u, check);
        if (owner != 0 && owner != check) continue;  // an earlier op's bad index is reported first
        const unsigned long long position = (unsigned long long)(i < 0xffffffffll ? i : 0xffffffffll);
        atomicMin(&record->first, position << 32 | (uint32_t)v);
        // The same values from every thread of this launch.
        record->op = op;
        record->bound = bound;
        record->skip = skip;
        record->has_skip = has_skip;
    }
}

void check_indices(const int32_t* index, int64_t m, int64_t bound, IndexOp op, const int32_t* skip) {
    if (m == 0) return;
    KERNEL_LAUNCH(check_indices_kernel, blocks_for(m), kBlockSize, 0, index, m, bound, (int32_t)op,
                  skip ? *skip : 0, skip ? 1 : 0, next_index_check(), bad_index_record());
}

}  // namespace engine::cuda
