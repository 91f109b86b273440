// engine/cpu/conv.cpp: conv2d by im2col + OpenBLAS GEMM, depthwise conv and batch norm by direct
// loops. OpenMP over images (conv2d), image-channel planes (depthwise forward, dx) or channels
// (weight and bias gradients, batch norm statistics), so that each of our sums is taken in an order
// that does not depend on the thread count: gradients are bitwise reproducible.
#include "engine/cpu/conv.h"

#include <omp.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>
#include "engine/cpu/matmul.h"

namespace engine::cpu {

// Below this many multiply-adds a parallel region costs more than it saves.
constexpr int64_t kParallelMin = 1 << 15;

// Images go one per thread, each GEMM single-threaded, when there are enough of them to keep the
// threads busy or each GEMM is too small to split well; otherwise one image at a time and
// OpenBLAS spreads each GEMM over the threads. Tiny convolutions stay on one thread.
static bool parallel_over_images(int64_t images, int64_t macs_per_image) {
    if (images <= 1 || images * macs_per_image <= kParallelMin) return false;
    return images >= omp_get_max_threads() || macs_per_image < (1 << 21);
}

// Output positions o in [0, out) whose input position o·stride + offset lies in [0, size) form
// one run [lo, hi); outside it the window reads padding.
static void valid_run(int64_t offset, int64_t stride, int64_t size, int64_t out, int64_t& lo, int64_t& hi) {
    lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
    hi = size - 1 - offset < 0 ? 0 : (size - 1 - offset) / stride + 1;
    hi = std::min(hi, out);
    lo = std::min(lo, hi);
}

// ---------------------------------------------------------------------------------------------
// im2col / col2im. Row (ci, a, b) of the column matrix holds, for every output pixel (oh, ow),
// the input pixel (oh·stride + a − pad, ow·stride + b − pad) of channel ci.

void im2col(const float* image, float* cols, const ConvGeometry& g) {
    const int64_t P = g.out_pixels(), taps = g.kh * g.kw;
    #pragma omp parallel for if (!omp_in_parallel() && g.patch() * P > kParallelMin)
    for (int64_t ci = 0; ci < g.Cin; ci++) {
        const float* plane = image + ci * g.H * g.W;
        for (int64_t t = 0; t < taps; t++) {
            int64_t a = t / g.kw, b = t % g.kw;
            float* row = cols + (ci * taps + t) * P;
            int64_t ow_lo, ow_hi;
            valid_run(b - g.pad, g.stride, g.W, g.OW, ow_lo, ow_hi);
            for (int64_t oh = 0; oh < g.OH; oh++) {
                float* out = row + oh * g.OW;
                int64_t ih = oh * g.stride + a - g.pad;
                if (ih < 0 || ih >= g.H) {
                    std::fill(out, out + g.OW, 0.f);
                    continue;
                }
                const float* in = plane + ih * g.W;
                for (int64_t ow = 0; ow < ow_lo; ow++) out[ow] = 0.f;
                for (int64_t ow = ow_lo; ow < ow_hi; ow++) out[ow] = in[ow * g.stride + b - g.pad];
                for (int64_t ow = ow_hi; ow < g.OW; ow++) out[ow] = 0.f;
            }
        }
    }
}

// Parallel over input channels: the rows of one channel all scatter into the same plane.
void col2im(const float* cols, float* dx_image, const ConvGeometry& g) {
    const int64_t P = g.out_pixels(), taps = g.kh * g.kw;
    #pragma omp parallel for if (!omp_in_parallel() && g.patch() * P > kParallelMin)
    for (int64_t ci = 0; ci < g.Cin; ci++) {
        float* plane = dx_image + ci * g.H * g.W;
        for (int64_t t = 0; t < taps; t++) {
            int64_t a = t / g.kw, b = t % g.kw;
            const float* row = cols + (ci * taps + t) * P;
            int64_t ow_lo, ow_hi;
            valid_run(b - g.pad, g.stride, g.W, g.OW, ow_lo, ow_hi);
            for (int64_t oh = 0; oh < g.OH; oh++) {
                int64_t ih = oh * g.stride + a - g.pad;
                if (ih < 0 || ih >= g.H) continue;
                const float* in = row + oh * g.OW;
                float* out = plane + ih * g.W;
                for (int64_t ow = ow_lo; ow < ow_hi; ow++) out[ow * g.stride + b - g.pad] += in[ow];
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// conv2d: per image n, y_n [Cout, P] = W [Cout, K] · cols_n [K, P] (+ b per row).

void conv2d_forward(const float* x, const float* w, const float* b, float* y, const ConvGeometry& g) {
    const int64_t K = g.patch(), P = g.out_pixels(), image = g.Cin * g.H * g.W;
    const bool pointwise = g.pointwise();
    #pragma omp parallel if (parallel_over_images(g.N, g.Cout * K * P))
    {
        std::vector<float> cols(pointwise ? 0 : K * P);  // one per thread, reused across its images
        #pragma omp for schedule(static)
        for (int64_t n = 0; n < g.N; n++) {
            const float* xn = x + n * image;
            float* yn = y + n * g.Cout * P;
            const float* cn = xn;
            if (!pointwise) {
                im2col(xn, cols.data(), g);
                cn = cols.data();
            }
            if (b)
                for (int64_t co = 0; co < g.Cout; co++) std::fill(yn + co * P, yn + (co + 1) * P, b[co]);
            gemm(false, false, g.Cout, P, K, 1.f, w, cn, b ? 1.f : 0.f, yn);
        }
    }
}

// db[co] = Σ_n Σ_p dy[n, co, p], one channel per thread, summed in double.
static void conv_bias_grad(const float* dy, float* db, int64_t N, int64_t C, int64_t P) {
    #pragma omp parallel for if (N * C * P > kParallelMin)
    for (int64_t c = 0; c < C; c++) {
        double acc = 0;
        for (int64_t n = 0; n < N; n++) {
            const float* row = dy + (n * C + c) * P;
            float s = 0.f;
            #pragma omp simd reduction(+ : s)
            for (int64_t p = 0; p < P; p++) s += row[p];
            acc += s;
        }
        db[c] = (float)acc;
    }
}

// dW = Σ_n dY_n · cols_nᵀ is accumulated in a fixed number of image groups (each group's images in
// order, into its own partial), then the partials are summed in group order: the same result on
// any number of threads, for at most kWeightGradGroups copies of dW.
constexpr int64_t kWeightGradGroups = 16;

void conv2d_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db,
                     const ConvGeometry& g) {
    const int64_t K = g.patch(), P = g.out_pixels(), image = g.Cin * g.H * g.W, dw_size = g.Cout * K;
    const bool pointwise = g.pointwise();
    if (db) conv_bias_grad(dy, db, g.N, g.Cout, P);
    if (!dx && !dw) return;

    const int64_t groups = dw ? std::min(g.N, kWeightGradGroups) : g.N;
    std::vector<float> partials(dw && groups > 1 ? groups * dw_size : 0);
    if (dw && groups == 0) std::fill(dw, dw + dw_size, 0.f);
    const int64_t macs_per_group = groups ? (g.N + groups - 1) / groups * g.Cout * K * P * ((dw != 0) + (dx != 0)) : 0;
    #pragma omp parallel if (parallel_over_images(groups, macs_per_group))
    {
        std::vector<float> cols(pointwise ? 0 : K * P);  // cols_n for dW, then dcols_n for dx
        #pragma omp for schedule(static)
        for (int64_t grp = 0; grp < groups; grp++) {
            float* dw_part = !dw ? nullptr : groups > 1 ? partials.data() + grp * dw_size : dw;
            if (dw_part) std::fill(dw_part, dw_part + dw_size, 0.f);
            for (int64_t n = grp * g.N / groups; n < (grp + 1) * g.N / groups; n++) {
                const float* xn = x + n * image;
                const float* dyn = dy + n * g.Cout * P;
                if (dw_part) {
                    const float* cn = xn;
                    if (!pointwise) {
                        im2col(xn, cols.data(), g);
                        cn = cols.data();
                    }
                    gemm(false, true, g.Cout, K, P, 1.f, dyn, cn, 1.f, dw_part);
                }
                if (dx) {
                    float* dxn = dx + n * image;
                    if (pointwise) {  // dx_n = Wᵀ·dY_n directly
                        gemm(true, false, K, P, g.Cout, 1.f, w, dyn, 0.f, dxn);
                    } else {          // dcols_n = Wᵀ·dY_n, scattered back onto the pixels
                        gemm(true, false, K, P, g.Cout, 1.f, w, dyn, 0.f, cols.data());
                        std::fill(dxn, dxn + image, 0.f);
                        col2im(cols.data(), dxn, g);
                    }
                }
            }
        }
    }
    if (dw && groups > 1) {
        #pragma omp parallel for if (groups * dw_size > kParallelMin)
        for (int64_t i = 0; i < dw_size; i++) {
            float s = 0.f;
            for (int64_t grp = 0; grp < groups; grp++) s += partials[grp * dw_size + i];
            dw[i] = s;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Per-channel sums of per-run sums (depthwise conv's weight and bias gradients, batch norm): each
// run's sum is taken in memory order, in parallel, then each channel's runs are added in image
// order in double, so the bits do not depend on the thread count.

// Σ_n runs[(n·C + c)·K + k] for each channel c and k < K, in image order, in double.
static void sum_runs_per_channel(const float* runs, double* out, int64_t N, int64_t C, int64_t K) {
    #pragma omp parallel for if (N * C * K > kParallelMin)
    for (int64_t c = 0; c < C; c++)
        for (int64_t k = 0; k < K; k++) {
            double sum = 0;
            for (int64_t n = 0; n < N; n++) sum += runs[(n * C + c) * K + k];
            out[c * K + k] = sum;
        }
}

// ---------------------------------------------------------------------------------------------
// Depthwise conv. Each image-channel plane [H, W] is first copied into the middle of a zeroed
// [H + 2p, W + 2p] buffer (p = k/2, one buffer per thread, its border never written), so no tap
// needs a bounds test.
//
// The loops work on 8-float vectors (GCC's vector extension: AVX registers, or two SSE ones) held in
// registers through all k² taps: an output block of R rows × V vectors is R·V independent sums, each
// loaded once per tap and stored once. ConvMixer on CIFAR has planes of 16 × 16: plain loops over a
// row (16 floats) spent most of their time entering and leaving the loop, and a sum per tap went
// through memory (docs/BENCHMARKS.md, "Depthwise conv on the CPU": 2–6.5× faster this way).

// load8 returns a vector by value (kept so: through a reference the loops ran 1.5–2× slower). GCC
// warns (-Wpsabi) that a 32-byte vector's calling convention depends on whether the build targets
// AVX (the sanitizer builds do not say -march=native); the helpers are static and inlined, so no
// call of theirs crosses that boundary.
#pragma GCC diagnostic ignored "-Wpsabi"
using Vec8 = float __attribute__((vector_size(32)));
constexpr int64_t kLanes = 8;
static inline Vec8 load8(const float* p) {
    Vec8 v;
    std::memcpy(&v, p, sizeof v);  // unaligned
    return v;
}
static inline void store8(float* p, const Vec8& v) { std::memcpy(p, &v, sizeof v); }
static inline float lanes_sum(const Vec8& v) {  // a fixed order: the same bits on every run
    float s = 0.f;
    for (int l = 0; l < kLanes; l++) s += v[l];
    return s;
}

static void pad_plane(const float* plane, float* padded, int64_t H, int64_t W, int64_t p) {
    const int64_t PW = W + 2 * p;
    for (int64_t i = 0; i < H; i++) std::copy(plane + i * W, plane + (i + 1) * W, padded + (i + p) * PW + p);
}

// Rows [i, i + R), columns [j, j + 8·V) of out = init + Σ_(a,b) f[a·k + b]·padded[i + a, j + b].
template <int R, int V>
static inline void correlate_block(const float* padded, int64_t PW, const float* f, int64_t k, float init, float* out,
                                   int64_t W, int64_t i, int64_t j) {
    Vec8 acc[R][V];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++) acc[r][v] = Vec8{} + init;
    for (int64_t a = 0; a < k; a++)
        for (int64_t b = 0; b < k; b++) {
            const float fv = f[a * k + b];
            const float* in = padded + (i + a) * PW + j + b;
            for (int r = 0; r < R; r++)
                for (int v = 0; v < V; v++) acc[r][v] += fv * load8(in + r * PW + v * kLanes);
        }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++) store8(out + (i + r) * W + j + v * kLanes, acc[r][v]);
}

// The rows of columns [j, j + 8·V), four at a time.
template <int V>
static void correlate_columns(const float* padded, int64_t PW, const float* f, int64_t k, float init, float* out,
                              int64_t H, int64_t W, int64_t j) {
    int64_t i = 0;
    for (; i + 4 <= H; i += 4) correlate_block<4, V>(padded, PW, f, k, init, out, W, i, j);
    for (; i < H; i++) correlate_block<1, V>(padded, PW, f, k, init, out, W, i, j);
}

// out[i, j] = init + Σ_(a,b) f[a·k + b]·padded[i + a, j + b], the taps in row-major order (so
// each element is the same sum, in the same order, whichever path computes it).
static void correlate_padded(const float* padded, const float* f, float init, float* out, int64_t H, int64_t W,
                             int64_t k) {
    const int64_t PW = W + k - 1;
    int64_t j = 0;
    for (; j + 2 * kLanes <= W; j += 2 * kLanes) correlate_columns<2>(padded, PW, f, k, init, out, H, W, j);
    for (; j + kLanes <= W; j += kLanes) correlate_columns<1>(padded, PW, f, k, init, out, H, W, j);
    for (int64_t i = 0; i < H; i++)  // the last W mod 8 columns
        for (int64_t jj = j; jj < W; jj++) {
            float sum = init;
            for (int64_t a = 0; a < k; a++)
                for (int64_t b = 0; b < k; b++) sum += f[a * k + b] * padded[(i + a) * PW + jj + b];
            out[i * W + jj] = sum;
        }
}

// part[a·K + b] = Σ_(i,j) g[i, j]·padded[i + a, j + b] over one plane. Per tap row a, the sums of
// the K taps b for two column vectors are 2K registers (K a template argument, so they stay in
// registers), and each g vector is loaded once for all of them.
template <int K>
static void correlate_taps(const float* g, const float* padded, float* part, int64_t H, int64_t W) {
    const int64_t PW = W + K - 1;
    for (int64_t a = 0; a < K; a++) {
        Vec8 acc[2][K] = {};
        int64_t j = 0;
        for (; j + 2 * kLanes <= W; j += 2 * kLanes)
            for (int64_t i = 0; i < H; i++) {
                const float* in = padded + (i + a) * PW + j;
                const Vec8 g0 = load8(g + i * W + j), g1 = load8(g + i * W + j + kLanes);
                for (int b = 0; b < K; b++) {
                    acc[0][b] += g0 * load8(in + b);
                    acc[1][b] += g1 * load8(in + kLanes + b);
                }
            }
        for (; j + kLanes <= W; j += kLanes)
            for (int64_t i = 0; i < H; i++) {
                const float* in = padded + (i + a) * PW + j;
                const Vec8 g0 = load8(g + i * W + j);
                for (int b = 0; b < K; b++) acc[0][b] += g0 * load8(in + b);
            }
        for (int b = 0; b < K; b++) part[a * K + b] = lanes_sum(acc[0][b] + acc[1][b]);
        if (j < W)  // the last W mod 8 columns
            for (int b = 0; b < K; b++)
                for (int64_t i = 0; i < H; i++)
                    for (int64_t jj = j; jj < W; jj++) part[a * K + b] += g[i * W + jj] * padded[(i + a) * PW + jj + b];
    }
}

// The same for any k, without vectors (filters of other sizes than 1, 3, 5, 7, 9).
static void correlate_taps_any(const float* g, const float* padded, float* part, int64_t H, int64_t W, int64_t k) {
    const int64_t PW = W + k - 1;
    for (int64_t t = 0; t < k * k; t++) {
        float sum = 0.f;
        for (int64_t i = 0; i < H; i++)
            for (int64_t j = 0; j < W; j++) sum += g[i * W + j] * padded[(i + t / k) * PW + j + t % k];
        part[t] = sum;
    }
}

static void correlate_taps(const float* g, const float* padded, float* part, int64_t H, int64_t W, int64_t k) {
    switch (k) {
        case 1: return correlate_taps<1>(g, padded, part, H, W);
        case 3: return correlate_taps<3>(g, padded, part, H, W);
        case 5: return correlate_taps<5>(g, padded, part, H, W);
        case 7: return correlate_taps<7>(g, padded, part, H, W);
        case 9: return correlate_taps<9>(g, padded, part, H, W);
        default: return correlate_taps_any(g, padded, part, H, W, k);
    }
}

void depthwise_conv2d_forward(const float* x, const float* w, const float* b, float* y, int64_t N, int64_t C,
                              int64_t H, int64_t W, int64_t k) {
    const int64_t HW = H * W, p = k / 2;
    #pragma omp parallel if (N * C * HW * k * k > kParallelMin)
    {
        std::vector<float> padded((H + 2 * p) * (W + 2 * p), 0.f);
        #pragma omp for
        for (int64_t nc = 0; nc < N * C; nc++) {
            int64_t c = nc % C;
            pad_plane(x + nc * HW, padded.data(), H, W, p);
            correlate_padded(padded.data(), w + c * k * k, b ? b[c] : 0.f, y + nc * HW, H, W, k);
        }
    }
}

// dx[i, j] = Σ_(a,b) w[a, b]·dy[i − a + p, j − b + p]: dy (padded) correlated with the turned filter.
// dw[c, a, b] = Σ_n Σ_(i,j) dy[i, j]·x_padded[i + a, j + b];  db[c] = Σ dy.
// One pass over the planes in memory order, each plane's tap sums and Σ dy kept in `parts`; then
// sum_runs_per_channel.
void depthwise_conv2d_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db,
                               int64_t N, int64_t C, int64_t H, int64_t W, int64_t k) {
    const int64_t HW = H * W, p = k / 2, PW = W + 2 * p, taps = k * k, stride = taps + 1;
    std::vector<float> parts(dw || db ? N * C * stride : 0);  // per plane: k² tap sums, then Σ dy
    #pragma omp parallel if (N * C * HW * taps > kParallelMin)
    {
        std::vector<float> padded((H + 2 * p) * PW, 0.f), turned(taps);
        #pragma omp for
        for (int64_t nc = 0; nc < N * C; nc++) {
            const int64_t c = nc % C;
            const float* g = dy + nc * HW;
            float* part = parts.empty() ? nullptr : parts.data() + nc * stride;
            if (dx) {
                for (int64_t t = 0; t < taps; t++) turned[t] = w[c * taps + taps - 1 - t];  // the filter turned by 180°
                pad_plane(g, padded.data(), H, W, p);
                correlate_padded(padded.data(), turned.data(), 0.f, dx + nc * HW, H, W, k);
            }
            if (dw) {
                pad_plane(x + nc * HW, padded.data(), H, W, p);
                correlate_taps(g, padded.data(), part, H, W, k);
            }
            if (db) {
                float sum = 0.f;
                #pragma omp simd reduction(+ : sum)
                for (int64_t i = 0; i < HW; i++) sum += g[i];
                part[taps] = sum;
            }
        }
    }
    if (!dw && !db) return;
    std::vector<double> sums(C * stride);
    sum_runs_per_channel(parts.data(), sums.data(), N, C, stride);
    for (int64_t c = 0; c < C; c++) {
        if (dw)
            for (int64_t t = 0; t < taps; t++) dw[c * taps + t] = (float)sums[c * stride + t];
        if (db) db[c] = (float)sums[c * stride + taps];
    }
}

// ---------------------------------------------------------------------------------------------
// Batch norm. Channel c of image n is the contiguous run x[(n·C + c)·S .. +S); the sums over a
// channel go through sum_runs_per_channel.

void batch_norm_stats(const float* x, float* mean, float* var, int64_t N, int64_t C, int64_t S) {
    const double count = (double)(N * S);
    // Two passes (mean, then squared deviations): no cancellation when |mean| >> std.
    std::vector<float> runs(N * C);
    std::vector<double> sums(C);
    #pragma omp parallel for if (N * C * S > kParallelMin)
    for (int64_t nc = 0; nc < N * C; nc++) {
        const float* p = x + nc * S;
        float s1 = 0.f;
        #pragma omp simd reduction(+ : s1)
        for (int64_t s = 0; s < S; s++) s1 += p[s];
        runs[nc] = s1;
    }
    sum_runs_per_channel(runs.data(), sums.data(), N, C, 1);
    for (int64_t c = 0; c < C; c++) mean[c] = (float)(sums[c] / count);
    #pragma omp parallel for if (N * C * S > kParallelMin)
    for (int64_t nc = 0; nc < N * C; nc++) {
        const float* p = x + nc * S;
        const float m = mean[nc % C];
        float s2 = 0.f;
        #pragma omp simd reduction(+ : s2)
        for (int64_t s = 0; s < S; s++) s2 += (p[s] - m) * (p[s] - m);
        runs[nc] = s2;
    }
    sum_runs_per_channel(runs.data(), sums.data(), N, C, 1);
    for (int64_t c = 0; c < C; c++) var[c] = (float)(sums[c] / count);
}

void batch_norm_rstd(const float* var, float eps, float* rstd, int64_t C) {
    for (int64_t c = 0; c < C; c++) rstd[c] = (float)(1.0 / std::sqrt((double)var[c] + eps));
}

void batch_norm_forward(const float* x, const float* mean, const float* rstd, const float* weight,
                        const float* bias, float* y, int64_t N, int64_t C, int64_t S) {
    #pragma omp parallel for if (N * C * S > kParallelMin)
    for (int64_t nc = 0; nc < N * C; nc++) {
        int64_t c = nc % C;
        // y = x·scale + shift with scale = rstd·w, shift = b − mean·rstd·w.
        float scale = rstd[c] * (weight ? weight[c] : 1.f);
        float shift = (bias ? bias[c] : 0.f) - mean[c] * scale;
        const float* p = x + nc * S;
        float* q = y + nc * S;
        for (int64_t s = 0; s < S; s++) q[s] = p[s] * scale + shift;
    }
}

void batch_norm_backward(const float* x, const float* dy, const float* mean, const float* rstd, const float* weight,
                         float* dx, float* dweight, float* dbias, int64_t N, int64_t C, int64_t S,
                         bool batch_stats) {
    const double count = (double)(N * S);
    std::vector<float> runs(N * C * 2);  // per run: Σ dy, Σ dy·x̂
    std::vector<double> sums(C * 2);
    #pragma omp parallel for if (N * C * S > kParallelMin)
    for (int64_t nc = 0; nc < N * C; nc++) {
        const int64_t c = nc % C;
        const float m = mean[c], r = rstd[c];
        const float* p = x + nc * S;
        const float* g = dy + nc * S;
        float s1 = 0.f, s2 = 0.f;
        #pragma omp simd reduction(+ : s1, s2)
        for (int64_t s = 0; s < S; s++) {
            s1 += g[s];
            s2 += g[s] * (p[s] - m) * r;
        }
        runs[nc * 2] = s1;
        runs[nc * 2 + 1] = s2;
    }
    sum_runs_per_channel(runs.data(), sums.data(), N, C, 2);
    for (int64_t c = 0; c < C; c++) {
        if (dweight) dweight[c] = (float)sums[c * 2 + 1];
        if (dbias) dbias[c] = (float)sums[c * 2];
    }
    if (!dx) return;
    // dx = rstd·w·(dy − mean(dy) − x̂·mean(dy·x̂)); the two means vanish with fixed statistics.
    #pragma omp parallel for if (N * C * S > kParallelMin)
    for (int64_t nc = 0; nc < N * C; nc++) {
        const int64_t c = nc % C;
        const float m = mean[c], r = rstd[c], k = r * (weight ? weight[c] : 1.f);
        const float mean_dy = batch_stats ? (float)(sums[c * 2] / count) : 0.f;
        const float mean_dy_xhat = batch_stats ? (float)(sums[c * 2 + 1] / count) : 0.f;
        const float* p = x + nc * S;
        const float* g = dy + nc * S;
        float* d = dx + nc * S;
        for (int64_t s = 0; s < S; s++) d[s] = k * (g[s] - mean_dy - (p[s] - m) * r * mean_dy_xhat);
    }
}

void batch_norm_update_running(float* running_mean, float* running_var, const float* batch_mean,
                               const float* batch_var, int64_t C, int64_t count, float momentum) {
    const double unbias = count > 1 ? (double)count / (double)(count - 1) : 1.0;
    for (int64_t c = 0; c < C; c++) {
        running_mean[c] = (1.f - momentum) * running_mean[c] + momentum * batch_mean[c];
        running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * batch_var[c] * unbias);
    }
}

}  // namespace engine::cpu
