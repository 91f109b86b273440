// engine/cuda/shape.h: the data movement kernels on the GPU (engine/cuda/shape.cu), with the
// signatures of engine/cpu/shape.h (see there for what each computes) so ON_DEVICE can pick either.
// Pointers are device memory; Shapes and the permutation are host values.
#pragma once
#include <cstdint>
#include "engine/tensor.h"

namespace engine::cuda {

void permute(const float* x, const Shape& xs, const int* perm, float* out);
void copy_middle(const float* x, int64_t outer, int64_t n, int64_t inner, int64_t start, int64_t m, float* out);
void place_middle(const float* src, int64_t outer, int64_t n, int64_t inner, int64_t start, int64_t m, float* out);
// Indices are NOT checked here (a kernel cannot throw): the op checks them first with any_out_of_range.
void index_select(const float* x, int64_t outer, int64_t n, int64_t inner, const int32_t* index, int64_t m, float* out);
// Scatter-add: repeated indices accumulate, in the CPU's order (the same bits on every run).
void index_add(const float* g, int64_t outer, int64_t n, int64_t inner, const int32_t* index, int64_t m, float* dx);
void gather(const float* x, int64_t outer, int64_t n, int64_t inner, const int32_t* index, int64_t m, float* out);
// Scatter-add with atomicAdd: in no fixed order, so float sums may differ from the CPU's serial
// order in the last bits (no training path uses gather).
void gather_backward(const float* g, int64_t outer, int64_t n, int64_t inner, const int32_t* index, int64_t m, float* dx);
void masked_fill(const float* x, const Shape& xs, const float* mask, const Shape& ms, float value, float* out);

// GPU only: whether any of index[0..m) lies outside [0, n). One pass over the indices that sets a
// device flag, then a 4-byte copy back (so the host waits for the stream here). The ops call it
// before an index kernel; when it says yes they copy the indices to the host to name the first bad
// one with the CPU's message (the error path only).
bool any_out_of_range(const int32_t* index, int64_t m, int64_t n);

}  // namespace engine::cuda
