// engine/cpu/elementwise.cpp: OpenMP loops for pointwise ops.
#include "engine/cpu/elementwise.h"

#include <algorithm>
#include <cmath>
#include <vector>
#include "engine/attention_layout.h"
#include "engine/ops/pointwise.h"

namespace engine::cpu {

// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelMin = 1 << 15;

template <typename Fn>
static void binary_loop(Fn fn, const float* a, const Shape& as, const float* b, const Shape& bs,
                        float* out, const Shape& os) {
    int64_t n = os.numel();
    if (as == os && bs == os) {  // same shapes: one flat loop
        #pragma omp parallel for simd if (n > kParallelMin)
        for (int64_t i = 0; i < n; i++) out[i] = fn(a[i], b[i]);
        return;
    }
    // Strides in out's index space, 0 where an input is broadcast.
    int nd = os.ndim;
    int64_t sa[kMaxDims], sb[kMaxDims];
    int64_t ra = 1, rb = 1;
    for (int i = nd - 1; i >= 0; i--) {
        sa[i] = as[i] == 1 ? 0 : ra;
        sb[i] = bs[i] == 1 ? 0 : rb;
        ra *= as[i];
        rb *= bs[i];
    }
    int64_t inner = nd ? os[nd - 1] : 1, rows = inner ? n / inner : 0;
    int64_t ia = nd ? sa[nd - 1] : 0, ib = nd ? sb[nd - 1] : 0;
    #pragma omp parallel for if (n > kParallelMin)
    for (int64_t r = 0; r < rows; r++) {
        // Offsets of this row in a and b, from its multi-index over the leading dims.
        int64_t rem = r, oa = 0, ob = 0;
        for (int d = nd - 2; d >= 0; d--) {
            int64_t idx = rem % os[d];
            rem /= os[d];
            oa += idx * sa[d];
            ob += idx * sb[d];
        }
        float* o = out + r * inner;
        const float *pa = a + oa, *pb = b + ob;
        if (ia && ib) for (int64_t j = 0; j < inner; j++) o[j] = fn(pa[j], pb[j]);
        else if (ia)  for (int64_t j = 0; j < inner; j++) o[j] = fn(pa[j], pb[0]);
        else if (ib)  for (int64_t j = 0; j < inner; j++) o[j] = fn(pa[0], pb[j]);
        else          for (int64_t j = 0; j < inner; j++) o[j] = fn(pa[0], pb[0]);
    }
}

void binary(BinaryOp op, const float* a, const Shape& as, const float* b, const Shape& bs, float* out,
            const Shape& os) {
    switch (op) {
        case BinaryOp::Add: return binary_loop([](float x, float y) { return x + y; }, a, as, b, bs, out, os);
        case BinaryOp::Sub: return binary_loop([](float x, float y) { return x - y; }, a, as, b, bs, out, os);
        case BinaryOp::Mul: return binary_loop([](float x, float y) { return x * y; }, a, as, b, bs, out, os);
        case BinaryOp::Div: return binary_loop([](float x, float y) { return x / y; }, a, as, b, bs, out, os);
    }
}

void binary_scalar(BinaryOp op, const float* a, float s, float* out, int64_t n) {
    Shape one({1}), shape({n});
    binary(op, a, shape, &s, one, out, shape);
}

template <typename F>
void unary_forward(const float* x, float* y, int64_t n) {
    #pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; i++) y[i] = F::f(x[i]);
}

template <typename F>
void unary_backward(const float* x, const float* y, const float* dy, float* dx, int64_t n) {
    #pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * F::df(F::kReadsX ? x[i] : 0.f, F::kReadsY ? y[i] : 0.f);
}

#define INSTANTIATE(F)                                                      \
    template void unary_forward<pointwise::F>(const float*, float*, int64_t); \
    template void unary_backward<pointwise::F>(const float*, const float*, const float*, float*, int64_t);
INSTANTIATE(Neg) INSTANTIATE(Exp) INSTANTIATE(Log) INSTANTIATE(Sqrt) INSTANTIATE(Rsqrt) INSTANTIATE(Abs)
INSTANTIATE(Tanh) INSTANTIATE(Sigmoid) INSTANTIATE(Relu) INSTANTIATE(Relu2) INSTANTIATE(Gelu)
INSTANTIATE(GeluTanh) INSTANTIATE(Silu)
#undef INSTANTIATE

// ---------------------------------------------------------------------------------------------
// bias + activation over [rows, n]. Here (not in nn.cpp) so that the GELU's and SiLU's exp/erf get
// this file's -fno-trapping-math and vectorize as the unary ops' do.

void bias_rows(const float* bias, float* y, int64_t rows, int64_t n, const float* residual) {
    #pragma omp parallel for if (rows * n > kParallelMin)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++)
            y[r * n + j] = (bias ? bias[j] : 0.f) + (residual ? residual[r * n + j] : 0.f);
}

// gate (null: none) multiplies each output: act(x + bias)·gate, the product mul would round.
template <typename F>
static void bias_act_forward_loop(const float* x, const float* bias, float* y, int64_t rows, int64_t n,
                                  const float* gate) {
    #pragma omp parallel for if (rows * n > kParallelMin)
    for (int64_t r = 0; r < rows; r++) {
        const float* xr = x + r * n;
        float* yr = y + r * n;
        if (gate) {
            const float* mr = gate + r * n;
            #pragma omp simd
            for (int64_t j = 0; j < n; j++) yr[j] = F::f(xr[j] + bias[j]) * mr[j];
            continue;
        }
        #pragma omp simd
        for (int64_t j = 0; j < n; j++) yr[j] = F::f(xr[j] + bias[j]);
    }
}

// dbias is summed per chunk of rows while the chunk's dx rows are still in cache (no second pass
// over dx), in double as sum_dim does, then over the chunks in order. The chunk count depends on
// `rows` only (as layer_norm_backward's), so the bits do not depend on the number of threads.
constexpr int64_t kBiasChunks = 64;

// With a gate (kRecompute false): dx = (dy·gate)·act'(x + bias) and dgate = dy·act(x + bias)
// (null: not wanted), in mul's and the ungated backward's order of products.
template <typename F, bool kRecompute>
static void bias_act_backward_loop(const float* x, const float* bias, const float* dy, float* dx, float* dbias,
                                   float* y, int64_t rows, int64_t n, const float* gate, float* dgate) {
    int64_t chunks = std::min(rows, kBiasChunks);
    std::vector<double> partial(dbias ? chunks * n : 0, 0.0);  // [chunks, n]
    #pragma omp parallel for schedule(static) if (rows * n > kParallelMin)
    for (int64_t c = 0; c < chunks; c++) {
        double* acc = dbias ? partial.data() + c * n : nullptr;
        for (int64_t r = c * rows / chunks; r < (c + 1) * rows / chunks; r++) {
            const float *xr = x + r * n, *gr = dy + r * n;
            float* dr = dx + r * n;
            if (kRecompute) {
                float* yr = y + r * n;  // may be gr: gr[j] is read before yr[j] is written
                #pragma omp simd
                for (int64_t j = 0; j < n; j++) {
                    float v = xr[j] + bias[j], g = gr[j];
                    dr[j] = g * F::df(v, 0.f);  // df reads x only
                    yr[j] = F::f(v);
                }
            } else if (gate) {
                const float* mr = gate + r * n;
                #pragma omp simd
                for (int64_t j = 0; j < n; j++) dr[j] = gr[j] * mr[j] * F::df(xr[j] + bias[j], 0.f);
                if (dgate) {
                    float* dmr = dgate + r * n;
                    #pragma omp simd
                    for (int64_t j = 0; j < n; j++) dmr[j] = gr[j] * F::f(xr[j] + bias[j]);
                }
            } else {
                #pragma omp simd
                for (int64_t j = 0; j < n; j++) dr[j] = gr[j] * F::df(xr[j] + bias[j], 0.f);
            }
            if (!acc) continue;
            #pragma omp simd
            for (int64_t j = 0; j < n; j++) acc[j] += dr[j];
        }
    }
    if (!dbias) return;
    // Chunk by chunk into chunk 0's row (contiguous, vectorizable; each column in chunk order).
    for (int64_t c = 1; c < chunks; c++)
        for (int64_t j = 0; j < n; j++) partial[j] += partial[c * n + j];
    for (int64_t j = 0; j < n; j++) dbias[j] = chunks > 0 ? (float)partial[j] : 0.f;
}

template <typename F>
static void bias_act_backward_as(const float* x, const float* bias, const float* dy, float* dx, float* dbias,
                                 float* y, int64_t rows, int64_t n, const float* gate, float* dgate) {
    static_assert(!F::kReadsY, "bias_act: the activation's derivative must read its input only");
    if (y) bias_act_backward_loop<F, true>(x, bias, dy, dx, dbias, y, rows, n, nullptr, nullptr);
    else bias_act_backward_loop<F, false>(x, bias, dy, dx, dbias, nullptr, rows, n, gate, dgate);
}

void bias_act_forward(const float* x, const float* bias, float* y, int64_t rows, int64_t n, BiasAct act) {
    pointwise::with_bias_act(act, [&](auto f) { bias_act_forward_loop<decltype(f)>(x, bias, y, rows, n, nullptr); });
}

void bias_act_backward(const float* x, const float* bias, const float* dy, float* dx, float* dbias, float* y,
                       int64_t rows, int64_t n, BiasAct act) {
    pointwise::with_bias_act(act, [&](auto f) {
        bias_act_backward_as<decltype(f)>(x, bias, dy, dx, dbias, y, rows, n, nullptr, nullptr);
    });
}

void bias_act_gate_forward(const float* x, const float* bias, const float* gate, float* y, int64_t rows, int64_t n,
                           BiasAct act) {
    pointwise::with_bias_act(act, [&](auto f) { bias_act_forward_loop<decltype(f)>(x, bias, y, rows, n, gate); });
}

void bias_act_gate_backward(const float* x, const float* bias, const float* gate, const float* dy, float* dx,
                            float* dbias, float* dgate, int64_t rows, int64_t n, BiasAct act) {
    pointwise::with_bias_act(act, [&](auto f) {
        bias_act_backward_as<decltype(f)>(x, bias, dy, dx, dbias, nullptr, rows, n, gate, dgate);
    });
}

// The products are those of mul(relu2(x), scale) and its backward, in the same order: the same bits.

void masked_relu2_forward(const float* x, float* y, int64_t outer, int64_t T, int64_t S, float scale, bool causal) {
    #pragma omp parallel for if (outer * T * S > kParallelMin)
    for (int64_t r = 0; r < outer * T; r++) {
        const float* xr = x + r * S;
        float* yr = y + r * S;
        int64_t visible = visible_keys(r % T, T, S, causal);
        #pragma omp simd
        for (int64_t j = 0; j < visible; j++) yr[j] = pointwise::Relu2::f(xr[j]) * scale;
        for (int64_t j = visible; j < S; j++) yr[j] = 0.f;
    }
}

void masked_relu2_backward(const float* x, const float* dy, float* dx, int64_t outer, int64_t T, int64_t S,
                           float scale, bool causal) {
    #pragma omp parallel for if (outer * T * S > kParallelMin)
    for (int64_t r = 0; r < outer * T; r++) {
        const float *xr = x + r * S, *gr = dy + r * S;
        float* dr = dx + r * S;
        int64_t visible = visible_keys(r % T, T, S, causal);
        #pragma omp simd
        for (int64_t j = 0; j < visible; j++) dr[j] = (gr[j] * scale) * pointwise::Relu2::df(xr[j], 0.f);
        for (int64_t j = visible; j < S; j++) dr[j] = 0.f;
    }
}

void pow_forward(const float* x, float p, float* y, int64_t n) {
    #pragma omp parallel for if (n > kParallelMin)
    for (int64_t i = 0; i < n; i++) y[i] = std::pow(x[i], p);
}

void pow_backward(const float* x, float p, const float* dy, float* dx, int64_t n) {
    #pragma omp parallel for if (n > kParallelMin)
    for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * p * std::pow(x[i], p - 1.f);
}

void add_inplace(float* dst, const float* src, int64_t n) {
    #pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; i++) dst[i] += src[i];
}

}  // namespace engine::cpu
