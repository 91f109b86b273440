// engine/cuda/conv.cu: conv2d (im2col + cuBLAS), depthwise conv and batch norm on the GPU
// (engine/cuda/conv.h), NCHW.
//
// - conv2d: the column matrices of a chunk of images are built by one im2col launch, then
//   forward  y_n = W·cols_n            one strided-batched GEMM (W shared: stride 0);
//   dx       dcols_n = Wᵀ·dY_n         one strided-batched GEMM, then col2im;
//   dW       = Σ_n dY_n·cols_nᵀ: im2col writes the chunk's columns side by side ([K, m·P]) and dY
//            is permuted to [Cout, m·P], so dW is ONE GEMM [Cout, m·P]·[K, m·P]ᵀ whose inner dim
//            runs over every pixel of every image of the chunk (later chunks add: beta = 1);
//   db       a per-channel block reduction of dY.
//   col2im is a gather: each input pixel sums the (at most kh·kw) column entries that read it, in
//   the CPU's tap order, so there are no atomics and no zeroing pass.
// - depthwise: direct kernels, one thread per output pixel (the filter taps and the neighbouring
//   input rows come from the cache); dw and db by one block per (channel, group of 8 taps).
// - batch norm: one block per channel for the statistics and the backward (a fixed-order block
//   reduction in double, then the same block writes dx), pointwise kernels for the rest.
//
// With cuDNN built and switched on (engine/cuda/cudnn.h), the conv2d and depthwise entry points try
// the cuDNN path first; these kernels run when it is off or declines the call.
//
// Every per-channel sum goes through a fixed tree (each thread's strided elements in order, then
// warp shuffles, then the warps' partial sums in order): the same bits on every run.
#include "engine/cuda/conv.h"
#include "engine/cuda/cudnn.h"
#include "engine/cuda/kernel.h"
#include "engine/cuda/matmul.h"


namespace engine::cuda {

constexpr int kReduceThreads = 256;  // per-channel blocks; a multiple of 32 so every warp is full

static int64_t g_scratch_floats = int64_t(1) << 26;  // 256 MiB of column matrices at most

int64_t set_conv2d_scratch_limit(int64_t floats) {
    int64_t old = g_scratch_floats;
    g_scratch_floats = floats < 1 ? 1 : floats;
    return old;
}

// ---------------------------------------------------------------------------------------------
// Block reductions.

__device__ __forceinline__ double warp_sum(double v) {
    for (int off = kWarp / 2; off > 0; off >>= 1) v += __shfl_down_sync(kFullMask, v, off);
    return v;
}

// Sums each of v[0..NV) over the block (blockDim.x a multiple of 32, at most 1024) and hands the
// totals to every thread. part holds NV·32 doubles; the last barrier lets the caller reuse it.
template <int NV>
__device__ void block_sum(double (&v)[NV], double* part) {
    int lane = threadIdx.x & (kWarp - 1), warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
    UNROLL
    for (int j = 0; j < NV; j++) {
        v[j] = warp_sum(v[j]);
        if (lane == 0) part[j * kWarp + warp] = v[j];
    }
    __syncthreads();
    if (warp == 0) {
        UNROLL
        for (int j = 0; j < NV; j++) {
            double s = lane < warps ? part[j * kWarp + lane] : 0.0;
            s = warp_sum(s);
            if (lane == 0) part[j * kWarp] = s;  // only lane 0 read slot j·32: no other lane races it
        }
    }
    __syncthreads();
    UNROLL
    for (int j = 0; j < NV; j++) v[j] = part[j * kWarp];
    __syncthreads();
}

__device__ __forceinline__ void block_sum2(double& a, double& b, double* part) {
    double v[2] = {a, b};
    block_sum<2>(v, part);
    a = v[0];
    b = v[1];
}

// Calls f(index) for every element of channel c of x viewed as [N, C, S], the block's threads
// taking every blockDim.x-th of the channel's N·S values in order. (n, s) is stepped without a
// division per element: consecutive threads read consecutive s (coalesced when S is not tiny).
template <typename F>
__device__ __forceinline__ void for_channel(int64_t N, int64_t C, int64_t S, int64_t c, F f) {
    const int64_t total = N * S;
    if (total == 0) return;
    const int64_t step = blockDim.x, dn = step / S, ds = step % S;
    int64_t n = threadIdx.x / S, s = threadIdx.x % S;
    for (int64_t e = threadIdx.x; e < total; e += step) {
        f((n * C + c) * S + s);
        n += dn;
        s += ds;
        if (s >= S) {
            s -= S;
            n++;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pointwise work over x viewed as [N, C, S]: op(i, c) for every flat index i (c its channel).
// Long rows (S >= one block) get a 2-D grid (blocks along a row, rows n·C + c along y), so the
// channel is one division per row; short rows a flat loop with a division per element.

template <typename Op>
__global__ void per_channel_rows_kernel(Op op, int64_t rows, int64_t C, int64_t S) {
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        int64_t c = r % C;
        for (int64_t s = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; s < S; s += (int64_t)gridDim.x * blockDim.x)
            op(r * S + s, c);
    }
}

template <typename Op>
__global__ void per_channel_flat_kernel(Op op, int64_t n, int64_t C, int64_t S) {
    GRID_STRIDE_LOOP(i, n) op(i, (i / S) % C);
}

template <typename Op>
static void launch_per_channel(Op op, int64_t N, int64_t C, int64_t S) {
    const int64_t rows = N * C;
    if (rows * S == 0) return;
    if (S >= kBlockSize) {
        int64_t bx = (S + kBlockSize - 1) / kBlockSize;
        dim3 grid((unsigned)(bx < 64 ? bx : 64), (unsigned)(rows < 65535 ? rows : 65535));
        KERNEL_LAUNCH(per_channel_rows_kernel<Op>, grid, kBlockSize, 0, op, rows, C, S);
    } else {
        KERNEL_LAUNCH(per_channel_flat_kernel<Op>, blocks_for(rows * S), kBlockSize, 0, op, rows * S, C, S);
    }
}

struct AddBias {  // y += b[c]
    float* y;
    const float* b;
    __device__ void operator()(int64_t i, int64_t c) const { y[i] += b[c]; }
};

// y = x·scale + shift with scale = rstd·w, shift = b − mean·scale (the CPU's formula).
struct BatchNormApply {
    const float *x, *mean, *rstd, *weight, *bias;
    float* y;
    __device__ void operator()(int64_t i, int64_t c) const {
        float scale = rstd[c] * (weight ? weight[c] : 1.f);
        float shift = (bias ? bias[c] : 0.f) - mean[c] * scale;
        y[i] = x[i] * scale + shift;
    }
};

// out[c] = Σ over channel c of x [N, C, S]: one block per channel (the conv bias gradient).
__global__ void channel_sum_kernel(const float* x, float* out, int64_t N, int64_t C, int64_t S) {
    SHARED_ARRAY(double, part, 2 * kWarp);
    for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
        double s = 0.0, unused = 0.0;
        for_channel(N, C, S, c, [&](int64_t i) { s += (double)x[i]; });
        block_sum2(s, unused, part);
        if (threadIdx.x == 0) out[c] = (float)s;
    }
}

static void channel_sum(const float* x, float* out, int64_t N, int64_t C, int64_t S) {
    if (C == 0) return;
    KERNEL_LAUNCH(channel_sum_kernel, blocks_for(C, 1), kReduceThreads, 0, x, out, N, C, S);
}

// ---------------------------------------------------------------------------------------------
// im2col / col2im over a chunk of m images. Column entry (n, k, p), k = (ci, a, b) a tap of
// channel ci and p = (oh, ow) an output pixel, holds input pixel (oh·stride + a − pad,
// ow·stride + b − pad) of channel ci of image n, and lives at n·img_stride + k·row_stride + p:
//   per image  [m, K, P]:  img_stride = K·P, row_stride = P      (k_major = false)
//   side by side [K, m·P]: img_stride = P,   row_stride = m·P    (k_major = true)
// The flat index walks the buffer in memory order, so the writes are coalesced.

__global__ void im2col_kernel(const float* x, float* cols, ConvGeometry g, int64_t m, bool k_major) {
    const int64_t taps = g.kh * g.kw, K = g.Cin * taps, P = g.OH * g.OW;
    GRID_STRIDE_LOOP(i, m * K * P) {
        int64_t p = i % P, q = i / P;
        int64_t n = k_major ? q % m : q / K, k = k_major ? q / m : q % K;
        int64_t ci = k / taps, t = k % taps, a = t / g.kw, b = t % g.kw;
        int64_t ih = (p / g.OW) * g.stride + a - g.pad, iw = (p % g.OW) * g.stride + b - g.pad;
        bool inside = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W;
        cols[i] = inside ? x[((n * g.Cin + ci) * g.H + ih) * g.W + iw] : 0.f;
    }
}

// dx pixel (n, ci, ih, iw) = [dx +] Σ over the taps (a, b), in the CPU's order, of the column entry
// that read it: oh = (ih + pad − a)/stride when that divides and lands in [0, OH) (ow alike).
// Only the taps a ≡ ih + pad (mod stride) can divide, so the loops start there and step by stride
// (and stop at a = ih + pad, past which oh would be negative).
__global__ void col2im_kernel(const float* cols, float* dx, ConvGeometry g, int64_t m, int64_t img_stride,
                              int64_t row_stride, bool accumulate) {
    const int64_t taps = g.kh * g.kw, HW = g.H * g.W;
    GRID_STRIDE_LOOP(i, m * g.Cin * HW) {
        int64_t iw = i % g.W, ih = (i / g.W) % g.H, nc = i / HW, ci = nc % g.Cin, n = nc / g.Cin;
        const float* base = cols + n * img_stride + ci * taps * row_stride;
        float v = accumulate ? dx[i] : 0.f;
        for (int64_t a = (ih + g.pad) % g.stride; a < g.kh && a <= ih + g.pad; a += g.stride) {
            int64_t oh = (ih + g.pad - a) / g.stride;
            if (oh >= g.OH) continue;  // oh falls as a grows
            for (int64_t b = (iw + g.pad) % g.stride; b < g.kw && b <= iw + g.pad; b += g.stride) {
                int64_t ow = (iw + g.pad - b) / g.stride;
                if (ow >= g.OW) continue;
                v += base[(a * g.kw + b) * row_stride + oh * g.OW + ow];
            }
        }
        dx[i] = v;
    }
}

// [m, R, P] -> [R, m·P]: row r of image n goes to columns n·P .. n·P + P of row r. Runs of P floats
// are copied, so reads and writes are coalesced within each run.
__global__ void rows_side_by_side_kernel(const float* in, float* out, int64_t m, int64_t R, int64_t P) {
    GRID_STRIDE_LOOP(i, m * R * P) {
        int64_t p = i % P, q = i / P, n = q % m, r = q / m;
        out[i] = in[(n * R + r) * P + p];
    }
}

void im2col(const float* image, float* cols, const ConvGeometry& g) {
    const int64_t n = g.patch() * g.out_pixels();
    if (n == 0) return;
    KERNEL_LAUNCH(im2col_kernel, blocks_for(n), kBlockSize, 0, image, cols, g, (int64_t)1, false);
}

void col2im(const float* cols, float* dx_image, const ConvGeometry& g) {
    const int64_t n = g.Cin * g.H * g.W;
    if (n == 0) return;
    KERNEL_LAUNCH(col2im_kernel, blocks_for(n), kBlockSize, 0, cols, dx_image, g, (int64_t)1,
                  g.patch() * g.out_pixels(), g.out_pixels(), true);
}

// Images per chunk when each needs `per_image` floats of scratch: as many as fit, at least one.
static int64_t chunk_images(int64_t N, int64_t per_image) {
    if (per_image <= 0) return N;
    int64_t m = g_scratch_floats / per_image;
    return m < 1 ? 1 : (m > N ? N : m);
}

void conv2d_forward(const float* x, const float* w, const float* b, float* y, const ConvGeometry& g) {
    if (cudnn_enabled() && cudnn_conv_forward("conv2d", x, w, b, y, cudnn_conv2d_geometry(g))) return;
    const int64_t K = g.patch(), P = g.out_pixels(), image = g.Cin * g.H * g.W;
    if (g.N * g.Cout * P == 0) return;
    if (g.pointwise()) {  // cols_n is x_n itself
        gemm_batched(false, false, g.N, g.Cout, P, K, w, 0, x, K * P, y, g.Cout * P);
    } else {
        const int64_t chunk = chunk_images(g.N, K * P);
        Scratch<> cols(chunk * K * P);
        for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
            const int64_t m = chunk < g.N - n0 ? chunk : g.N - n0;
            KERNEL_LAUNCH(im2col_kernel, blocks_for(m * K * P), kBlockSize, 0, x + n0 * image, cols.p, g, m, false);
            gemm_batched(false, false, m, g.Cout, P, K, w, 0, cols.p, K * P, y + n0 * g.Cout * P, g.Cout * P);
        }
    }
    if (b) launch_per_channel(AddBias{y, b}, g.N, g.Cout, P);
}

void conv2d_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db,
                     const ConvGeometry& g) {
    if (cudnn_enabled() && cudnn_conv_backward("conv2d", x, w, dy, dx, dw, db, cudnn_conv2d_geometry(g))) return;
    const int64_t K = g.patch(), P = g.out_pixels(), image = g.Cin * g.H * g.W;
    if (db) channel_sum(dy, db, g.N, g.Cout, P);
    if (!dx && !dw) return;
    if (dw && (g.N == 0 || P == 0)) memset_zero(dw, sizeof(float) * g.Cout * K);  // an empty sum
    if (g.N * P == 0 || K == 0 || g.Cout == 0) return;

    const bool pointwise = g.pointwise();
    // Per image: the columns ([K, P], for dW side by side, for dx as dcols) and dY permuted for dW.
    const bool need_cols = dw || !pointwise;
    const int64_t chunk = chunk_images(g.N, (need_cols ? K * P : 0) + (dw ? g.Cout * P : 0));
    Scratch<> cols(need_cols ? chunk * K * P : 0), dy_t(dw ? chunk * g.Cout * P : 0);
    for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
        const int64_t m = chunk < g.N - n0 ? chunk : g.N - n0;
        const float* xn = x + n0 * image;
        const float* dyn = dy + n0 * g.Cout * P;
        if (dw) {  // dW (+)= dY_chunk [Cout, m·P] · cols_chunk [K, m·P]ᵀ
            if (pointwise)
                KERNEL_LAUNCH(rows_side_by_side_kernel, blocks_for(m * K * P), kBlockSize, 0, xn, cols.p, m, K, P);
            else
                KERNEL_LAUNCH(im2col_kernel, blocks_for(m * K * P), kBlockSize, 0, xn, cols.p, g, m, true);
            KERNEL_LAUNCH(rows_side_by_side_kernel, blocks_for(m * g.Cout * P), kBlockSize, 0, dyn, dy_t.p, m, g.Cout,
                          P);
            gemm(false, true, g.Cout, K, m * P, 1.f, dy_t.p, cols.p, n0 == 0 ? 0.f : 1.f, dw);
        }
        if (dx) {  // dcols_n = Wᵀ·dY_n, gathered onto the pixels (straight into dx for 1x1)
            float* dxn = dx + n0 * image;
            if (pointwise) {
                gemm_batched(true, false, m, K, P, g.Cout, w, 0, dyn, g.Cout * P, dxn, K * P);
            } else {
                gemm_batched(true, false, m, K, P, g.Cout, w, 0, dyn, g.Cout * P, cols.p, K * P);
                KERNEL_LAUNCH(col2im_kernel, blocks_for(m * image), kBlockSize, 0, cols.p, dxn, g, m, K * P, P, false);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Depthwise conv (stride 1, zero padding p = k/2). One thread per pixel of x (or dx), flat index
// i = ((n·C + c)·H + h)·W + j; the sums run over the taps in the CPU's order (row a, then column b).

__global__ void depthwise_forward_kernel(const float* x, const float* w, const float* b, float* y, int64_t N,
                                         int64_t C, int64_t H, int64_t W, int64_t k) {
    const int64_t p = k / 2;
    GRID_STRIDE_LOOP(i, N * C * H * W) {
        int64_t j = i % W, h = (i / W) % H, nc = i / (H * W), c = nc % C;
        const float* plane = x + nc * H * W;
        const float* f = w + c * k * k;
        float acc = b ? b[c] : 0.f;
        for (int64_t a = 0; a < k; a++) {
            int64_t ih = h + a - p;
            if (ih < 0 || ih >= H) continue;
            for (int64_t bb = 0; bb < k; bb++) {
                int64_t iw = j + bb - p;
                if (iw >= 0 && iw < W) acc += f[a * k + bb] * plane[ih * W + iw];
            }
        }
        y[i] = acc;
    }
}

// dx[h, j] = Σ_(a,b) w[k−1−a, k−1−b]·dy[h + a − p, j + b − p] (dy correlated with the turned filter).
__global__ void depthwise_dx_kernel(const float* w, const float* dy, float* dx, int64_t N, int64_t C, int64_t H,
                                    int64_t W, int64_t k) {
    const int64_t p = k / 2, taps = k * k;
    GRID_STRIDE_LOOP(i, N * C * H * W) {
        int64_t j = i % W, h = (i / W) % H, nc = i / (H * W), c = nc % C;
        const float* plane = dy + nc * H * W;
        const float* f = w + c * taps;
        float acc = 0.f;
        for (int64_t a = 0; a < k; a++) {
            int64_t ih = h + a - p;
            if (ih < 0 || ih >= H) continue;
            for (int64_t bb = 0; bb < k; bb++) {
                int64_t iw = j + bb - p;
                if (iw >= 0 && iw < W) acc += f[taps - 1 - (a * k + bb)] * plane[ih * W + iw];
            }
        }
        dx[i] = acc;
    }
}

// dw[c, t] = Σ_(n,h,j) dy[n, c, h, j]·x[n, c, h + a − p, j + b − p] for tap t = (a, b), and
// db[c] = Σ dy. One block per unit u = c·per + q: q < groups (when dw is wanted) takes the taps
// [q·kTapGroup, (q + 1)·kTapGroup) together, so each dy value is read once per group of taps
// (the shifted x values of neighbouring taps come from the cache); the last unit is db.
constexpr int kTapGroup = 8;

__global__ void depthwise_dw_db_kernel(const float* x, const float* dy, float* dw, float* db, int64_t N, int64_t C,
                                       int64_t H, int64_t W, int64_t k, int64_t groups, int64_t per) {
    SHARED_ARRAY(double, part, kTapGroup * kWarp);
    const int64_t p = k / 2, taps = k * k, HW = H * W;
    for (int64_t u = blockIdx.x; u < C * per; u += gridDim.x) {
        const int64_t c = u / per, q = u % per;
        double acc[kTapGroup];
        UNROLL
        for (int j = 0; j < kTapGroup; j++) acc[j] = 0.0;
        if (q == groups) {  // db
            for_channel(N, C, HW, c, [&](int64_t i) { acc[0] += (double)dy[i]; });
        } else {
            const int64_t t0 = q * kTapGroup;
            for_channel(N, C, HW, c, [&](int64_t i) {
                const int64_t pix = i % HW, h = pix / W, j0 = pix % W;
                const float g = dy[i];
                UNROLL
                for (int j = 0; j < kTapGroup; j++) {
                    const int64_t t = t0 + j, ih = h + t / k - p, iw = j0 + t % k - p;
                    if (t < taps && ih >= 0 && ih < H && iw >= 0 && iw < W)
                        acc[j] += (double)(g * x[i + (ih - h) * W + (iw - j0)]);
                }
            });
        }
        block_sum<kTapGroup>(acc, part);
        if (threadIdx.x == 0) {
            if (q == groups) {
                db[c] = (float)acc[0];
            } else {
                for (int j = 0; j < kTapGroup && q * kTapGroup + j < taps; j++)
                    dw[c * taps + q * kTapGroup + j] = (float)acc[j];
            }
        }
    }
}

void depthwise_conv2d_forward(const float* x, const float* w, const float* b, float* y, int64_t N, int64_t C,
                              int64_t H, int64_t W, int64_t k) {
    if (cudnn_enabled() &&
        cudnn_conv_forward("depthwise_conv2d", x, w, b, y, cudnn_depthwise_geometry(N, C, H, W, k)))
        return;
    const int64_t n = N * C * H * W;
    if (n == 0) return;
    KERNEL_LAUNCH(depthwise_forward_kernel, blocks_for(n), kBlockSize, 0, x, w, b, y, N, C, H, W, k);
}

void depthwise_conv2d_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db,
                               int64_t N, int64_t C, int64_t H, int64_t W, int64_t k) {
    if (cudnn_enabled() &&
        cudnn_conv_backward("depthwise_conv2d", x, w, dy, dx, dw, db, cudnn_depthwise_geometry(N, C, H, W, k)))
        return;
    const int64_t n = N * C * H * W;
    if (dx && n > 0) KERNEL_LAUNCH(depthwise_dx_kernel, blocks_for(n), kBlockSize, 0, w, dy, dx, N, C, H, W, k);
    const int64_t groups = dw ? (k * k + kTapGroup - 1) / kTapGroup : 0, per = groups + (db ? 1 : 0);
    if (per == 0 || C == 0) return;
    KERNEL_LAUNCH(depthwise_dw_db_kernel, blocks_for(C * per, 1), kReduceThreads, 0, x, dy, dw, db, N, C, H, W, k,
                  groups, per);
}

// ---------------------------------------------------------------------------------------------
// Batch norm on x viewed as [N, C, S].

// Two passes per channel, as on the CPU: the mean, then the squared deviations from it (no
// cancellation when |mean| >> std). Sums in double.
__global__ void batch_norm_stats_kernel(const float* x, float* mean, float* var, int64_t N, int64_t C, int64_t S) {
    SHARED_ARRAY(double, part, 2 * kWarp);
    const double count = (double)(N * S);
    for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
        double s = 0.0, unused = 0.0;
        for_channel(N, C, S, c, [&](int64_t i) { s += (double)x[i]; });
        block_sum2(s, unused, part);
        const float m = (float)(s / count);
        double sq = 0.0;
        for_channel(N, C, S, c, [&](int64_t i) {
            float d = x[i] - m;
            sq += (double)(d * d);
        });
        block_sum2(sq, unused, part);
        if (threadIdx.x == 0) {
            mean[c] = m;
            var[c] = (float)(sq / count);
        }
    }
}

__global__ void batch_norm_rstd_kernel(const float* var, float eps, float* rstd, int64_t C) {
    GRID_STRIDE_LOOP(c, C) rstd[c] = (float)(1.0 / sqrt((double)var[c] + eps));
}

// Per channel: Σdy and Σdy·x̂ (block reduction), then the block writes the channel's dx:
//   dx = rstd·w·(dy − mean(dy) − x̂·mean(dy·x̂))   (batch statistics; the means vanish otherwise).
__global__ void batch_norm_backward_kernel(const float* x, const float* dy, const float* mean, const float* rstd,
                                           const float* weight, float* dx, float* dweight, float* dbias, int64_t N,
                                           int64_t C, int64_t S, bool batch_stats) {
    SHARED_ARRAY(double, part, 2 * kWarp);
    const double count = (double)(N * S);
    for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
        const float m = mean[c], r = rstd[c], wc = weight ? weight[c] : 1.f;
        double sum_dy = 0.0, sum_dy_xhat = 0.0;
        for_channel(N, C, S, c, [&](int64_t i) {
            float g = dy[i];
            sum_dy += (double)g;
            sum_dy_xhat += (double)(g * (x[i] - m) * r);
        });
        block_sum2(sum_dy, sum_dy_xhat, part);
        if (threadIdx.x == 0) {
            if (dweight) dweight[c] = (float)sum_dy_xhat;
            if (dbias) dbias[c] = (float)sum_dy;
        }
        if (!dx) continue;  // c depends on the block only: the whole block skips together
        const float kc = r * wc;
        const float mean_dy = batch_stats ? (float)(sum_dy / count) : 0.f;
        const float mean_dy_xhat = batch_stats ? (float)(sum_dy_xhat / count) : 0.f;
        for_channel(N, C, S, c, [&](int64_t i) { dx[i] = kc * (dy[i] - mean_dy - (x[i] - m) * r * mean_dy_xhat); });
    }
}

__global__ void batch_norm_update_running_kernel(float* running_mean, float* running_var, const float* batch_mean,
                                                 const float* batch_var, int64_t C, double unbias, float momentum) {
    GRID_STRIDE_LOOP(c, C) {
        running_mean[c] = (1.f - momentum) * running_mean[c] + momentum * batch_mean[c];
        running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * batch_var[c] * unbias);
    }
}

void batch_norm_stats(const float* x, float* mean, float* var, int64_t N, int64_t C, int64_t S) {
    if (C == 0) return;
    KERNEL_LAUNCH(batch_norm_stats_kernel, blocks_for(C, 1), kReduceThreads, 0, x, mean, var, N, C, S);
}

void batch_norm_rstd(const float* var, float eps, float* rstd, int64_t C) {
    if (C == 0) return;
    KERNEL_LAUNCH(batch_norm_rstd_kernel, blocks_for(C), kBlockSize, 0, var, eps, rstd, C);
}

void batch_norm_forward(const float* x, const float* mean, const float* rstd, const float* weight,
                        const float* bias, float* y, int64_t N, int64_t C, int64_t S) {
    launch_per_channel(BatchNormApply{x, mean, rstd, weight, bias, y}, N, C, S);
}

void batch_norm_backward(const float* x, const float* dy, const float* mean, const float* rstd, const float* weight,
                         float* dx, float* dweight, float* dbias, int64_t N, int64_t C, int64_t S,
                         bool batch_stats) {
    if (C == 0 || (!dx && !dweight && !dbias)) return;
    KERNEL_LAUNCH(batch_norm_backward_kernel, blocks_for(C, 1), kReduceThreads, 0, x, dy, mean, rstd, weight, dx,
                  dweight, dbias, N, C, S, batch_stats);
}

void batch_norm_update_running(float* running_mean, float* running_var, const float* batch_mean,
                               const float* batch_var, int64_t C, int64_t count, float momentum) {
    if (C == 0) return;
    const double unbias = count > 1 ? (double)count / (double)(count - 1) : 1.0;
    KERNEL_LAUNCH(batch_norm_update_running_kernel, blocks_for(C), kBlockSize, 0, running_mean, running_var,
                  batch_mean, batch_var, C, unbias, momentum);
}

}  // namespace engine::cuda
