// engine/cpu/shape.h: CPU data movement kernels (permute, slice/concat, gather/scatter).
// Many view a tensor as [outer, n, inner] around one dim.
#pragma once
#include <cstdint>
#include "engine/tensor.h"

namespace engine::cpu {

// out = x permuted: out dim i is x dim perm[i].
void permute(const float* x, const Shape& xs, const int* perm, float* out);
// Copy rows [start, start+m) of the middle dim: x [outer, n, inner] -> out [outer, m, inner].
void copy_middle(const float* x, int64_t outer, int64_t n, int64_t inner, int64_t start, int64_t m, float* out);
// The reverse: write src [outer, m, inner] into rows [start, start+m) of out [outer, n, inner].
void place_middle(const float* src, int64_t outer, int64_t n, int64_t inner, int64_t start, int64_t m, float* out);
// out[o, i, :] = x[o, index[i], :] for x [outer, n, inner], index [m] (checked in range).
void index_select(const float* x, int64_t outer, int64_t n, int64_t inner, const int32_t* index, int64_t m, float* out);
// dx[o, index[i], :] += g[o, i, :] (dx must be zeroed by the caller).
void index_add(const float* g, int64_t outer, int64_t n, int64_t inner, const int32_t* index, int64_t m, float* dx);
// torch.gather along the middle dim: out[o, j, i] = x[o, index[o, j, i], i], index [outer, m, inner].
void gather(const float* x, int64_t outer, int64_t n, int64_t inner, const int32_t* index, int64_t m, float* out);
void gather_backward(const float* g, int64_t outer, int64_t n, int64_t inner, const int32_t* index, int64_t m, float* dx);
// out = mask != 0 ? value : x, elementwise over x [xs]; mask [ms] broadcasts to xs (dims aligned
// from the right, size-1 or missing dims repeat). The backward of masked_fill is the same call on
// the gradient with value 0.
void masked_fill(const float* x, const Shape& xs, const float* mask, const Shape& ms, float value, float* out);

}  // namespace engine::cpu
