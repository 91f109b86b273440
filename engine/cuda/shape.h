// engine/cuda/shape.h: the data movement kernels on the GPU (engine/cuda/shape.cu), with the
// signatures of engine/cpu/shape.h (see there for what each computes) so ON_DEVICE can pick either.
// Pointers are device memory; Shapes and the permutation are host values.
#pragma once
#include <cstdint>
#include "engine/cuda/runtime.h"
#include "engine/tensor.h"

namespace engine::cuda {

void permute(const float* x, const Shape& xs, const int* perm, float* out);
void copy_middle(const float* x, int64_t outer, int64_t n, int64_t inner, int64_t start, int64_t m, float* out);
void place_middle(const float* src, int64_t outer, int64_t n, int64_t inner, int64_t start, int64_t m, float* out);
// Indices out of range are left alone (no read or write; index_select and gather write 0 there):
// a kernel cannot throw, so the op checks them with check_indices, which the host reports later.
void index_select(const float* x, int64_t outer, int64_t n, int64_t inner, const int32_t* index, int64_t m, float* out);
// Scatter-add: repeated indices accumulate, in the CPU's order (the same bits on every run).
void index_add(const float* g, int64_t outer, int64_t n, int64_t inner, const int32_t* index, int64_t m, float* dx);
void gather(const float* x, int64_t outer, int64_t n, int64_t inner, const int32_t* index, int64_t m, float* out);
// Scatter-add with atomicAdd: in no fixed order, so float sums may differ from the CPU's serial
// order in the last bits (no training path uses gather).
void gather_backward(const float* g, int64_t outer, int64_t n, int64_t inner, const int32_t* index, int64_t m, float* dx);
void masked_fill(const float* x, const Shape& xs, const float* mask, const Shape& ms, float value, float* out);

// GPU only: checks index[0..m) against [0, bound) (an index equal to *skip passes, when skip is
// given) without waiting for the device: the first bad one goes into the bad index record and the
// host's next wait for the device throws the op's error (engine/cuda/runtime.h).
void check_indices(const int32_t* index, int64_t m, int64_t bound, IndexOp op, const int32_t* skip = nullptr);

}  // namespace engine::cuda
