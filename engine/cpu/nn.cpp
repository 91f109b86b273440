// engine/cpu/nn.cpp: the fused CPU kernels behind engine/ops/nn.cpp (softmax, log_softmax,
// layer_norm, dropout, cross_entropy, mse, attention, rope). Rows run in parallel with OpenMP;
// sums that leave a row are reduced in an order fixed by the sizes, so results do not depend on
// the thread count.
#include "engine/cpu/nn.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>
#include "engine/attention_layout.h"
#include "engine/cpu/matmul.h"
#include "engine/ops/pointwise.h"

namespace engine::cpu {

// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelMin = 1 << 15;

// ---------------------------------------------------------------------------------------------
// softmax / log_softmax. Subtracting the row max keeps exp() from overflowing.

static inline float row_max(const float* x, int64_t n) {
    float m = -INFINITY;
    for (int64_t j = 0; j < n; j++) m = std::max(m, x[j]);
    return m;
}

// Σ exp(x[j] − m) over a row, vectorized: exp_vectorizable (engine/ops/pointwise.h; this file is
// built with -fno-trapping-math, as elementwise.cpp) into 8 running sums, one per SIMD lane,
// added at the end. libm's expf in a serial sum ran at < 1 GB/s: cross-entropy over a 10,000-word
// vocabulary took 27 % of an LM step (docs/BENCHMARKS.md). The order is fixed by n alone. With
// kStore, each exp is also written over its x (the attention's softmax rows).
template <bool kStore>
static inline float exp_shifted_sum(std::conditional_t<kStore, float*, const float*> x, int64_t n, float m) {
    constexpr int kLanes = 8;
    float acc[kLanes] = {0.f};
    auto term = [&](int64_t j) {
        const float e = pointwise::exp_vectorizable(x[j] - m);
        if constexpr (kStore) x[j] = e;
        return e;
    };
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes)
        for (int l = 0; l < kLanes; l++) acc[l] += term(j + l);
    for (; j < n; j++) acc[0] += term(j);
    float sum = 0.f;
    for (int l = 0; l < kLanes; l++) sum += acc[l];
    return sum;
}

void softmax_forward(const float* x, float* y, int64_t rows, int64_t n) {
    #pragma omp parallel for if (rows * n > kParallelMin)
    for (int64_t r = 0; r < rows; r++) {
        const float* xr = x + r * n;
        float* yr = y + r * n;
        float m = row_max(xr, n), sum = 0.f;
        for (int64_t j = 0; j < n; j++) {
            yr[j] = std::exp(xr[j] - m);
            sum += yr[j];
        }
        float inv = 1.f / sum;
        for (int64_t j = 0; j < n; j++) yr[j] *= inv;
    }
}

void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t n) {
    #pragma omp parallel for if (rows * n > kParallelMin)
    for (int64_t r = 0; r < rows; r++) {
        const float *yr = y + r * n, *gr = dy + r * n;
        float* dr = dx + r * n;
        float dot = 0.f;
        for (int64_t j = 0; j < n; j++) dot += gr[j] * yr[j];
        for (int64_t j = 0; j < n; j++) dr[j] = yr[j] * (gr[j] - dot);
    }
}

void log_softmax_forward(const float* x, float* y, int64_t rows, int64_t n) {
    #pragma omp parallel for if (rows * n > kParallelMin)
    for (int64_t r = 0; r < rows; r++) {
        const float* xr = x + r * n;
        float* yr = y + r * n;
        float lse = row_max(xr, n);
        lse += std::log(exp_shifted_sum<false>(xr, n, lse));
        for (int64_t j = 0; j < n; j++) yr[j] = xr[j] - lse;
    }
}

void log_softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t n) {
    #pragma omp parallel for if (rows * n > kParallelMin)
    for (int64_t r = 0; r < rows; r++) {
        const float *yr = y + r * n, *gr = dy + r * n;
        float* dr = dx + r * n;
        float gsum = 0.f;
        for (int64_t j = 0; j < n; j++) gsum += gr[j];
        for (int64_t j = 0; j < n; j++) dr[j] = gr[j] - std::exp(yr[j]) * gsum;
    }
}

// ---------------------------------------------------------------------------------------------
// layer_norm

// One row of n: y, mean and rstd. Two passes (mean, then squared deviations): no cancellation as
// in E[x²] − E[x]².
static inline void layer_norm_row(const float* xr, const float* weight, const float* bias, float* yr, float* mean,
                                  float* rstd, int64_t n, float eps) {
    float sum = 0.f;
    for (int64_t j = 0; j < n; j++) sum += xr[j];
    float mu = sum / (float)n, var = 0.f;
    for (int64_t j = 0; j < n; j++) var += (xr[j] - mu) * (xr[j] - mu);
    float rs = 1.f / std::sqrt(var / (float)n + eps);
    for (int64_t j = 0; j < n; j++) {
        float v = (xr[j] - mu) * rs;
        if (weight) v *= weight[j];
        if (bias) v += bias[j];
        yr[j] = v;
    }
    *mean = mu;
    *rstd = rs;
}

void layer_norm_forward(const float* x, const float* weight, const float* bias, float* y, float* mean,
                        float* rstd, int64_t rows, int64_t n, float eps) {
    #pragma omp parallel for if (rows * n > kParallelMin)
    for (int64_t r = 0; r < rows; r++)
        layer_norm_row(x + r * n, weight, bias, y + r * n, mean + r, rstd + r, n, eps);
}

// The row's sum s = x + residual is written and then normalized while it is still in cache: the
// same arithmetic in the same order as add followed by layer_norm, so the same bits.
void add_layer_norm_forward(const float* x, const float* residual, const float* weight, const float* bias,
                            float* sum, float* y, float* mean, float* rstd, int64_t rows, int64_t n, float eps) {
    #pragma omp parallel for if (rows * n > kParallelMin)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n, *rr = residual + r * n;
        float* sr = sum + r * n;
        #pragma omp simd
        for (int64_t j = 0; j < n; j++) sr[j] = xr[j] + rr[j];
        layer_norm_row(sr, weight, bias, y + r * n, mean + r, rstd + r, n, eps);
    }
}

// Row chunks for a parameter gradient's partial sums (layer_norm's dweight and dbias,
// scale_shift_rope's dgamma and dbeta): a count that depends on `rows` only, so the summation
// order (chunk by chunk, in order) is the same on any number of threads.
constexpr int64_t kParamChunks = 64;

// The columns of partial [chunks, 2, n] summed over the chunks in order: the first n into first,
// the next n into second (each null: not wanted). No chunks: zeros.
static void sum_param_chunks(const std::vector<float>& partial, int64_t chunks, int64_t n, float* first,
                             float* second) {
    #pragma omp parallel for if (chunks * n > kParallelMin)
    for (int64_t j = 0; j < n; j++) {
        float s1 = 0.f, s2 = 0.f;
        for (int64_t c = 0; c < chunks; c++) {
            s1 += partial[c * 2 * n + j];
            s2 += partial[c * 2 * n + n + j];
        }
        if (first) first[j] = s1;
        if (second) second[j] = s2;
    }
}

void layer_norm_backward(const float* x, const float* weight, const float* mean, const float* rstd,
                         const float* dy, float* dx, bool add_dx, float* dweight, float* dbias, int64_t rows,
                         int64_t n) {
    bool want_params = dweight || dbias;
    int64_t chunks = std::min(rows, kParamChunks);
    // partial[c] holds chunk c's Σ dy·x̂ (first n) and Σ dy (next n).
    std::vector<float> partial(want_params ? chunks * 2 * n : 0, 0.f);

    #pragma omp parallel for schedule(static) if (rows * n > kParallelMin)
    for (int64_t c = 0; c < chunks; c++) {
        float* pw = want_params ? partial.data() + c * 2 * n : nullptr;
        float* pb = want_params ? pw + n : nullptr;
        for (int64_t r = c * rows / chunks; r < (c + 1) * rows / chunks; r++) {
            const float *xr = x + r * n, *gr = dy + r * n;
            float* dr = dx ? dx + r * n : nullptr;
            float mu = mean[r], rs = rstd[r];
            // dx = rstd·(dx̂ − mean(dx̂) − x̂·mean(dx̂·x̂)), with dx̂ = dy·weight.
            float mean_dxhat = 0.f, mean_dxhat_xhat = 0.f;
            for (int64_t j = 0; j < n; j++) {
                float xhat = (xr[j] - mu) * rs;
                float dxhat = weight ? gr[j] * weight[j] : gr[j];
                mean_dxhat += dxhat;
                mean_dxhat_xhat += dxhat * xhat;
                if (pw) {
                    pw[j] += gr[j] * xhat;
                    pb[j] += gr[j];
                }
            }
            mean_dxhat /= (float)n;
            mean_dxhat_xhat /= (float)n;
            if (!dr) continue;
            for (int64_t j = 0; j < n; j++) {
                float xhat = (xr[j] - mu) * rs;
                float dxhat = weight ? gr[j] * weight[j] : gr[j];
                float v = rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
                dr[j] = add_dx ? dr[j] + v : v;
            }
        }
    }
    if (want_params) sum_param_chunks(partial, chunks, n, dweight, dbias);
}

// ---------------------------------------------------------------------------------------------
// dropout

void dropout_forward(const float* x, float* mask, float* y, int64_t n, float p) {
    // p == 1 keeps nothing (u < 1 always); scale 0 there avoids 0·inf = NaN.
    float scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
    #pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; i++) mask[i] = mask[i] >= p ? scale : 0.f;
    if (!y) return;
    #pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * mask[i];
}

void dropout_backward(const float* mask, const float* dy, float* dx, int64_t n) {
    #pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * mask[i];
}

// ---------------------------------------------------------------------------------------------
// cross_entropy. −log p_c = lse − x_c, so the loss needs only the row's lse, its target logit and
// (for smoothing) its mean logit: mean_c(−log p_c) = lse − mean(x).

void cross_entropy_forward(const float* logits, const int32_t* targets, float* loss, float* lse, int64_t rows,
                           int64_t C, int64_t count, int32_t ignore_index, float smoothing) {
    std::vector<float> row_loss(rows);
    #pragma omp parallel for if (rows * C > kParallelMin)
    for (int64_t r = 0; r < rows; r++) {
        const float* xr = logits + r * C;
        float m = row_max(xr, C), xsum = 0.f;
        if (smoothing > 0.f)
            for (int64_t c = 0; c < C; c++) xsum += xr[c];
        float l = m + std::log(exp_shifted_sum<false>(xr, C, m));
        lse[r] = l;
        int32_t t = targets[r];
        row_loss[r] = t == ignore_index ? 0.f : (1.f - smoothing) * (l - xr[t]) + smoothing * (l - xsum / (float)C);
    }
    double total = 0.0;  // serial, in row order: deterministic
    for (int64_t r = 0; r < rows; r++) total += row_loss[r];
    loss[0] = count > 0 ? (float)(total / (double)count) : 0.f;
}

void cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse, const float* dloss,
                            float* dlogits, int64_t rows, int64_t C, int64_t count, int32_t ignore_index,
                            float smoothing) {
    float g = count > 0 ? dloss[0] / (float)count : 0.f;
    float uniform = smoothing / (float)C;
    #pragma omp parallel for if (rows * C > kParallelMin)
    for (int64_t r = 0; r < rows; r++) {
        const float* xr = logits + r * C;
        float* dr = dlogits + r * C;
        int32_t t = targets[r];
        if (t == ignore_index) {
            for (int64_t c = 0; c < C; c++) dr[c] = 0.f;
            continue;
        }
        float l = lse[r];
        if (dr == xr) {  // in place (over the logits): one pointer, so the loop vectorizes without an alias check
            for (int64_t c = 0; c < C; c++) dr[c] = (pointwise::exp_vectorizable(dr[c] - l) - uniform) * g;
        } else {
            for (int64_t c = 0; c < C; c++) dr[c] = (pointwise::exp_vectorizable(xr[c] - l) - uniform) * g;
        }
        dr[t] -= (1.f - smoothing) * g;
    }
}

// ---------------------------------------------------------------------------------------------
// mse. Fixed-size blocks summed in double, then the block sums in order: deterministic.

constexpr int64_t kMseBlock = 1 << 14;

void mse_forward(const float* pred, const float* target, float* loss, int64_t n) {
    int64_t blocks = (n + kMseBlock - 1) / kMseBlock;
    std::vector<double> partial(blocks);
    #pragma omp parallel for if (n > kParallelMin)
    for (int64_t b = 0; b < blocks; b++) {
        double s = 0.0;
        for (int64_t i = b * kMseBlock; i < std::min(n, (b + 1) * kMseBlock); i++) {
            double d = (double)pred[i] - (double)target[i];
            s += d * d;
        }
        partial[b] = s;
    }
    double total = 0.0;
    for (int64_t b = 0; b < blocks; b++) total += partial[b];
    loss[0] = n > 0 ? (float)(total / (double)n) : 0.f;
}

void mse_backward(const float* pred, const float* target, const float* dloss, float* dpred, float* dtarget,
                  int64_t n) {
    float scale = n > 0 ? 2.f * dloss[0] / (float)n : 0.f;
    #pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; i++) {
        float d = (pred[i] - target[i]) * scale;
        if (dpred) dpred[i] = d;
        if (dtarget) dtarget[i] = -d;
    }
}

// ---------------------------------------------------------------------------------------------
// attention. Heads run in parallel, each GEMM on one thread (OpenBLAS's OpenMP build does not
// fork inside an active parallel region); a single head leaves the region inactive so that its
// GEMMs can use every core. A head's P [T, S] lives in a buffer of its thread, where it stays in
// cache between the two GEMMs; the forward keeps only each row's max and 1/sum, and the backward
// recomputes P from them by the same GEMM and the same exp (probabilities_of_head), bit for bit.

// The scores of one head, q·kᵀ·scale, into p [T, S].
static void head_scores(const float* qh, const float* kh, int64_t ld, float* p, int64_t T, int64_t S, int64_t D,
                        float scale) {
    gemm_ld(false, true, T, S, D, scale, qh, ld, kh, ld, 0.f, p, 0);
}

// row ·= inv over keys [0, visible), zero over [visible, S): after exp_shifted_sum<true>, the
// probabilities of a row of scores, with inv = 1/Σ exp(row − m) (0 for a row that sees no key).
static inline void scale_row(float* row, int64_t visible, int64_t S, float inv) {
    for (int64_t j = 0; j < visible; j++) row[j] *= inv;
    for (int64_t j = visible; j < S; j++) row[j] = 0.f;
}

// Softmax of each row of a head's scores p [T, S] (causal: row i over its visible keys), in place;
// stats [T, 2] gets each row's max and 1/sum.
static void softmax_of_head(float* p, float* stats, int64_t T, int64_t S, bool causal) {
    for (int64_t i = 0; i < T; i++) {
        float* row = p + i * S;
        const int64_t visible = visible_keys(i, T, S, causal);
        const float m = visible > 0 ? row_max(row, visible) : 0.f;
        const float sum = exp_shifted_sum<true>(row, visible, m);
        const float inv = visible > 0 ? 1.f / sum : 0.f;
        scale_row(row, visible, S, inv);
        stats[2 * i] = m;
        stats[2 * i + 1] = inv;
    }
}

// A head's P again, from the forward's stats: the same scores, exps and products as
// softmax_of_head, so the same bits.
static void probabilities_of_head(const float* qh, const float* kh, int64_t ld, const float* stats, float* p,
                                  int64_t T, int64_t S, int64_t D, bool causal, float scale) {
    head_scores(qh, kh, ld, p, T, S, D, scale);
    for (int64_t i = 0; i < T; i++) {
        float* row = p + i * S;
        const int64_t visible = visible_keys(i, T, S, causal);
        exp_shifted_sum<true>(row, visible, stats[2 * i]);
        scale_row(row, visible, S, stats[2 * i + 1]);
    }
}

void attention_forward(const float* q, const float* k, const float* v, const float* mask, float* stats, float* out,
                       int64_t BH, int64_t T, int64_t S, int64_t D, bool causal, float scale, AttentionHeads in,
                       AttentionHeads out_layout) {
    const int64_t ld = in.ld, ldo = out_layout.ld;
    #pragma omp parallel if (BH > 1 && BH * T * S * D > kParallelMin)
    {
        std::vector<float> p(T * S);                   // P of the current head
        std::vector<float> dropped(mask ? T * S : 0);  // P ⊙ mask
        #pragma omp for schedule(static)
        for (int64_t bh = 0; bh < BH; bh++) {
            const float *qh = q + in.offset(bh, T), *kh = k + in.offset(bh, S), *vh = v + in.offset(bh, S);
            float* ph = p.data();
            head_scores(qh, kh, ld, ph, T, S, D, scale);
            softmax_of_head(ph, stats + bh * T * 2, T, S, causal);
            const float* probs = ph;
            if (mask) {
                const float* mh = mask + bh * T * S;
                for (int64_t i = 0; i < T * S; i++) dropped[i] = ph[i] * mh[i];
                probs = dropped.data();
            }
            gemm_ld(false, false, T, D, S, 1.f, probs, 0, vh, ld, 0.f, out + out_layout.offset(bh, T), ldo);
        }
    }
}

void attention_backward(const float* q, const float* k, const float* v, const float* mask, const float* stats,
                        const float* dout, float* dq, float* dk, float* dv, int64_t BH, int64_t T, int64_t S,
                        int64_t D, bool causal, float scale, AttentionHeads in, AttentionHeads out_layout) {
    const int64_t ld = in.ld, ldo = out_layout.ld;
    bool want_ds = dq || dk;
    #pragma omp parallel if (BH > 1 && BH * T * S * D > kParallelMin)
    {
        std::vector<float> p(T * S);                          // P of the current head, recomputed
        std::vector<float> dropped(mask && dv ? T * S : 0);  // P ⊙ mask
        std::vector<float> ds(want_ds ? T * S : 0);          // dP, then dS in place
        #pragma omp for schedule(static)
        for (int64_t bh = 0; bh < BH; bh++) {
            const int64_t at_t = in.offset(bh, T), at_s = in.offset(bh, S);
            const float *qh = q + at_t, *kh = k + at_s, *vh = v + at_s;
            probabilities_of_head(qh, kh, ld, stats + bh * T * 2, p.data(), T, S, D, causal, scale);
            const float *ph = p.data(), *mh = mask ? mask + bh * T * S : nullptr;
            const float* gh = dout + out_layout.offset(bh, T);
            if (dv) {
                const float* probs = ph;
                if (mh) {
                    for (int64_t i = 0; i < T * S; i++) dropped[i] = ph[i] * mh[i];
                    probs = dropped.data();
                }
                gemm_ld(true, false, S, D, T, 1.f, probs, 0, gh, ldo, 0.f, dv + at_s, ld);
            }
            if (!want_ds) continue;
            gemm_ld(false, true, T, S, D, 1.f, gh, ldo, vh, ld, 0.f, ds.data(), 0);
            if (mh)
                for (int64_t i = 0; i < T * S; i++) ds[i] *= mh[i];
            for (int64_t i = 0; i < T; i++) {
                const float* pr = ph + i * S;
                float* dr = ds.data() + i * S;
                float dot = 0.f;
                for (int64_t j = 0; j < S; j++) dot += dr[j] * pr[j];
                for (int64_t j = 0; j < S; j++) dr[j] = pr[j] * (dr[j] - dot);
            }
            if (dq) gemm_ld(false, false, T, D, S, scale, ds.data(), 0, kh, ld, 0.f, dq + at_t, ld);
            if (dk) gemm_ld(true, false, S, D, T, scale, ds.data(), 0, qh, ld, 0.f, dk + at_s, ld);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// rope. The angles are computed once per call in double (positions can be large) into a
// [T, D/2] table of cos/sin; `sign` = −1 rotates backwards (the transpose of the rotation).

// The [T, D/2] tables of cos and sign·sin of the angles (start_pos + t)·base^(−2i/D), in double.
static void rope_table(std::vector<float>& cos_t, std::vector<float>& sin_t, int64_t T, int64_t D, float base,
                       int64_t start_pos, float sign) {
    int64_t half = D / 2;
    cos_t.resize(T * half);
    sin_t.resize(T * half);
    std::vector<double> freq(half);  // the same for every position: one pow per pair, not per entry
    for (int64_t i = 0; i < half; i++) freq[i] = std::pow((double)base, -2.0 * (double)i / (double)D);
    #pragma omp parallel for if (T * half > 4096)
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < half; i++) {
            double angle = (double)(start_pos + t) * freq[i];
            cos_t[t * half + i] = (float)std::cos(angle);
            sin_t[t * half + i] = sign * (float)std::sin(angle);
        }
}

static void rope_apply(const float* x, float* y, int64_t outer, int64_t T, int64_t D, float base,
                       int64_t start_pos, float sign) {
    int64_t half = D / 2;
    std::vector<float> cos_t, sin_t;
    rope_table(cos_t, sin_t, T, D, base, start_pos, sign);
    #pragma omp parallel for if (outer * T * D > kParallelMin)
    for (int64_t row = 0; row < outer * T; row++) {
        const float* c = cos_t.data() + (row % T) * half;
        const float* s = sin_t.data() + (row % T) * half;
        const float* xr = x + row * D;
        float* yr = y + row * D;
        for (int64_t i = 0; i < half; i++) {
            float a = xr[i], b = xr[i + half];
            yr[i] = a * c[i] - b * s[i];
            yr[i + half] = b * c[i] + a * s[i];
        }
    }
}

void rope_forward(const float* x, float* y, int64_t outer, int64_t T, int64_t D, float base, int64_t start_pos) {
    rope_apply(x, y, outer, T, D, base, start_pos, 1.f);
}

void rope_backward(const float* dy, float* dx, int64_t outer, int64_t T, int64_t D, float base, int64_t start_pos) {
    rope_apply(dy, dx, outer, T, D, base, start_pos, -1.f);
}

// ---------------------------------------------------------------------------------------------
// scale_shift_rope. h = fma(x, gamma, beta) (one rounding, as the CUDA kernel's: where mul and
// add made two), then rope's rotation of h.
// The backward rotates dy back (dh) and sums dgamma and dbeta as layer_norm_backward sums its
// parameters' gradients: per chunk of rows, then sum_param_chunks (the same bits for any thread
// count).

void scale_shift_rope_forward(const float* x, const float* gamma, const float* beta, float* y, int64_t outer,
                              int64_t T, int64_t D, float base) {
    std::vector<float> cos_t, sin_t;
    if (base > 0.f) rope_table(cos_t, sin_t, T, D, base, 0, 1.f);
    const int64_t half = D / 2;
    #pragma omp parallel for if (outer * T * D > kParallelMin)
    for (int64_t row = 0; row < outer * T; row++) {
        const float* xr = x + row * D;
        float* yr = y + row * D;
        if (base <= 0.f) {
            for (int64_t i = 0; i < D; i++) yr[i] = std::fma(xr[i], gamma[i], beta[i]);
            continue;
        }
        const float* c = cos_t.data() + (row % T) * half;
        const float* s = sin_t.data() + (row % T) * half;
        for (int64_t i = 0; i < half; i++) {
            float a = std::fma(xr[i], gamma[i], beta[i]), b = std::fma(xr[i + half], gamma[i + half], beta[i + half]);
            yr[i] = a * c[i] - b * s[i];
            yr[i + half] = b * c[i] + a * s[i];
        }
    }
}

void scale_shift_rope_backward(const float* x, const float* gamma, const float* dy, float* dx, bool accumulate,
                               float* dgamma, float* dbeta, int64_t outer, int64_t T, int64_t D, float base) {
    std::vector<float> cos_t, sin_t;
    if (base > 0.f) rope_table(cos_t, sin_t, T, D, base, 0, -1.f);
    const int64_t rows = outer * T, half = D / 2, chunks = std::min(rows, kParamChunks);
    const bool sums = dgamma || dbeta;
    std::vector<float> partial(sums ? chunks * 2 * D : 0, 0.f);  // [chunks, 2, D]: dgamma's, then dbeta's
    #pragma omp parallel for schedule(static) if (rows * D > kParallelMin)
    for (int64_t ch = 0; ch < chunks; ch++) {
        std::vector<float> dh(D);
        for (int64_t r = ch * rows / chunks; r < (ch + 1) * rows / chunks; r++) {
            const float* gr = dy + r * D;
            if (base <= 0.f) {
                std::copy(gr, gr + D, dh.begin());
            } else {
                const float* c = cos_t.data() + (r % T) * half;
                const float* s = sin_t.data() + (r % T) * half;
                for (int64_t i = 0; i < half; i++) {  // rope's backward: the rotation by the negative angle
                    dh[i] = gr[i] * c[i] - gr[i + half] * s[i];
                    dh[i + half] = gr[i + half] * c[i] + gr[i] * s[i];
                }
            }
            const float* xr = x + r * D;
            if (dx) {
                float* dr = dx + r * D;
                for (int64_t i = 0; i < D; i++) dr[i] = accumulate ? dr[i] + dh[i] * gamma[i] : dh[i] * gamma[i];
            }
            if (!sums) continue;
            float* acc = partial.data() + ch * 2 * D;
            for (int64_t i = 0; i < D; i++) {
                acc[i] += dh[i] * xr[i];
                acc[D + i] += dh[i];
            }
        }
    }
    if (sums) sum_param_chunks(partial, chunks, D, dgamma, dbeta);
}

}  // namespace engine::cpu
