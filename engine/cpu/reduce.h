// engine/cpu/reduce.h: reductions of x viewed as [outer, n, inner] over the middle dim.
#pragma once
#include <cstdint>

namespace engine::cpu {

void sum_dim(const float* x, float* out, int64_t outer, int64_t n, int64_t inner);
// out = max over the middle dim, argmax = index of the first maximum (for the backward).
void max_dim(const float* x, float* out, int32_t* argmax, int64_t outer, int64_t n, int64_t inner);
// dx[o, argmax[o,i], i] = g[o, i], zero elsewhere.
void max_dim_backward(const float* g, const int32_t* argmax, float* dx, int64_t outer, int64_t n, int64_t inner);

}  // namespace engine::cpu
