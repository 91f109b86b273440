// engine/ops/shape.h: ops that move data without arithmetic. All results are contiguous copies.
#pragma once
#include <vector>
#include "engine/tensor.h"

namespace engine {

Tensor transpose(const Tensor& x, int dim0, int dim1);
Tensor permute(const Tensor& x, std::vector<int> dims);
Tensor concat(const std::vector<Tensor>& xs, int dim);
Tensor slice(const Tensor& x, int dim, int64_t start, int64_t end);  // [start, end) along dim
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int dim);
std::vector<Tensor> chunk(const Tensor& x, int chunks, int dim);      // equal parts
// out[..., i, ...] = x[..., index[i], ...] along dim; index int32 [n]. Backward: scatter-add.
Tensor index_select(const Tensor& x, int dim, const Tensor& index);
// out[i][j] = x[i][index[i][j]] along dim (torch.gather); index int32, same ndim as x.
Tensor gather(const Tensor& x, int dim, const Tensor& index);
// weight [V, D], ids int32 [...] -> [..., D]; backward scatter-adds rows into dweight.
Tensor embedding(const Tensor& weight, const Tensor& ids);
// out = mask ? value : x; mask is float (nonzero = true) and broadcasts to x.
Tensor masked_fill(const Tensor& x, const Tensor& mask, float value);
// [T, T] float mask with 1 above the diagonal (the future positions a causal model must not see).
Tensor causal_mask(int64_t T);

}  // namespace engine
