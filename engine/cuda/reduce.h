// engine/cuda/reduce.h: reductions on the GPU (engine/cuda/reduce.cu), with the signatures of
// engine/cpu/reduce.h (x viewed as [outer, n, inner], reduced over the middle dim) so ON_DEVICE can
// pick either. Pointers are device memory.
//
// Deterministic: every output is reduced by a fixed tree that depends only on the shape (no
// atomics), so the same input gives the same bits on every run. Sums accumulate in double, as the
// CPU loops do. max_dim's argmax is the index of the FIRST maximum, as on the CPU (a NaN at index 0
// wins; later NaNs are never picked).
#pragma once
#include <cstdint>

namespace engine::cuda {

void sum_dim(const float* x, float* out, int64_t outer, int64_t n, int64_t inner);
void max_dim(const float* x, float* out, int32_t* argmax, int64_t outer, int64_t n, int64_t inner);
void max_dim_backward(const float* g, const int32_t* argmax, float* dx, int64_t outer, int64_t n, int64_t inner);

}  // namespace engine::cuda
