// engine/cpu/reduce.cpp: reductions over the middle dim of [outer, n, inner].
// Sums accumulate in double for rows: a float running sum over 10^5 terms loses digits.
#include "engine/cpu/reduce.h"

#include <cstring>
#include <vector>

namespace engine::cpu {

void sum_dim(const float* x, float* out, int64_t outer, int64_t n, int64_t inner) {
    if (inner == 1) {
        #pragma omp parallel for if (outer * n > (1 << 15))
        for (int64_t o = 0; o < outer; o++) {
            double s = 0;
            const float* p = x + o * n;
            for (int64_t j = 0; j < n; j++) s += p[j];
            out[o] = (float)s;
        }
        return;
    }
    #pragma omp parallel for if (outer * n * inner > (1 << 15))
    for (int64_t o = 0; o < outer; o++) {
        std::vector<double> acc(inner, 0.0);
        for (int64_t j = 0; j < n; j++) {
            const float* p = x + (o * n + j) * inner;
            for (int64_t i = 0; i < inner; i++) acc[i] += p[i];
        }
        for (int64_t i = 0; i < inner; i++) out[o * inner + i] = (float)acc[i];
    }
}

void max_dim(const float* x, float* out, int32_t* argmax, int64_t outer, int64_t n, int64_t inner) {
    #pragma omp parallel for if (outer * n * inner > (1 << 15))
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            const float* p = x + o * n * inner + i;
            float best = p[0];
            int32_t at = 0;
            for (int64_t j = 1; j < n; j++)
                if (p[j * inner] > best) { best = p[j * inner]; at = (int32_t)j; }
            out[o * inner + i] = best;
            argmax[o * inner + i] = at;
        }
    }
}

void max_dim_backward(const float* g, const int32_t* argmax, float* dx, int64_t outer, int64_t n, int64_t inner) {
    std::memset(dx, 0, sizeof(float) * outer * n * inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) dx[(o * n + argmax[o * inner + i]) * inner + i] = g[o * inner + i];
}

}  // namespace engine::cpu
