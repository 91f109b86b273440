// engine/cpu/shape.cpp: data movement loops.
#include "engine/cpu/shape.h"

#include <cstring>

namespace engine::cpu {

void permute(const float* x, const Shape& xs, const int* perm, float* out) {
    int nd = xs.ndim;
    int64_t xstride[kMaxDims], os[kMaxDims];
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) { xstride[i] = s; s *= xs[i]; }
    for (int i = 0; i < nd; i++) os[i] = xs[perm[i]];
    int64_t n = xs.numel();
    if (n == 0) return;
    int64_t inner = nd ? os[nd - 1] : 1, inner_stride = nd ? xstride[perm[nd - 1]] : 1, rows = n / inner;
    #pragma omp parallel for if (n > (1 << 15))
    for (int64_t r = 0; r < rows; r++) {
        int64_t rem = r, off = 0;
        for (int d = nd - 2; d >= 0; d--) {
            off += (rem % os[d]) * xstride[perm[d]];
            rem /= os[d];
        }
        float* o = out + r * inner;
        if (inner_stride == 1) std::memcpy(o, x + off, inner * sizeof(float));
        else for (int64_t j = 0; j < inner; j++) o[j] = x[off + j * inner_stride];
    }
}

void copy_middle(const float* x, int64_t outer, int64_t n, int64_t inner, int64_t start, int64_t m, float* out) {
    if (outer * m * inner == 0) return;  // an empty slice may have no storage (memcpy of null is UB)
    for (int64_t o = 0; o < outer; o++)
        std::memcpy(out + o * m * inner, x + (o * n + start) * inner, m * inner * sizeof(float));
}

void place_middle(const float* src, int64_t outer, int64_t n, int64_t inner, int64_t start, int64_t m, float* out) {
    if (outer * m * inner == 0) return;
    for (int64_t o = 0; o < outer; o++)
        std::memcpy(out + (o * n + start) * inner, src + o * m * inner, m * inner * sizeof(float));
}

void index_select(const float* x, int64_t outer, int64_t n, int64_t inner, const int32_t* index, int64_t m, float* out) {
    if (outer * m * inner == 0) return;
    #pragma omp parallel for if (outer * m * inner > (1 << 15))
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < m; i++)
            std::memcpy(out + (o * m + i) * inner, x + (o * n + index[i]) * inner, inner * sizeof(float));
}

void index_add(const float* g, int64_t outer, int64_t n, int64_t inner, const int32_t* index, int64_t m, float* dx) {
    // Serial over i: two positions may hold the same index.
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < m; i++) {
            float* d = dx + (o * n + index[i]) * inner;
            const float* s = g + (o * m + i) * inner;
            for (int64_t j = 0; j < inner; j++) d[j] += s[j];
        }
}

void gather(const float* x, int64_t outer, int64_t n, int64_t inner, const int32_t* index, int64_t m, float* out) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < m; j++)
            for (int64_t i = 0; i < inner; i++) {
                int64_t k = (o * m + j) * inner + i;
                out[k] = x[(o * n + index[k]) * inner + i];
            }
}

void gather_backward(const float* g, int64_t outer, int64_t n, int64_t inner, const int32_t* index, int64_t m, float* dx) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < m; j++)
            for (int64_t i = 0; i < inner; i++) {
                int64_t k = (o * m + j) * inner + i;
                dx[(o * n + index[k]) * inner + i] += g[k];
            }
}

void masked_fill(const float* x, const Shape& xs, const float* mask, const Shape& ms, float value, float* out) {
    // Mask strides per dim of x (0 where the mask repeats), dims aligned from the right.
    int nd = xs.ndim;
    int64_t mstride[kMaxDims] = {};
    int64_t s = 1;
    for (int i = ms.ndim - 1, d = nd - 1; i >= 0; i--, d--) {
        if (ms[i] != 1) mstride[d] = s;
        s *= ms[i];
    }
    int64_t n = xs.numel();
    #pragma omp parallel for if (n > (1 << 15))
    for (int64_t i = 0; i < n; i++) {
        int64_t rem = i, off = 0;
        for (int d = nd - 1; d >= 0 && rem > 0; d--) {
            off += (rem % xs[d]) * mstride[d];
            rem /= xs[d];
        }
        out[i] = mask[off] != 0.f ? value : x[i];
    }
}

}  // namespace engine::cpu
