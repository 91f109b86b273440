// engine/ops/matmul.h: matrix products through cblas_sgemm (OpenBLAS).
#pragma once
#include "engine/tensor.h"

namespace engine {

// C = op(A)·op(B), op = transpose when the flag is set (of the last two dims).
//   A [..., M, K] (or [..., K, M] transposed), B [K, N] (or [N, K]): leading dims of A are
//   flattened into rows, B is shared;
//   A [batch..., M, K], B [batch..., K, N] with equal batch dims: one GEMM per batch entry.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// y = x·Wᵀ + b with PyTorch's layout: W [out, in], b [out] (optional), x [..., in]. With a residual
// (the output's shape), y = residual + x·Wᵀ + b: a residual block's add done by the GEMM, which adds
// into the rows of residual + b (beta = 1) instead of a separate pass that reads two tensors and
// writes a third. The same value as add(residual, linear(x, w, b)) up to the order of the sums.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), const Tensor& residual = Tensor());
// y = linear(bias_gelu(h, b1, approximate), w, b): a transformer MLP's GELU and second linear as one
// op that keeps h, not the GELU's output, for its backward, which recomputes that output (the same
// bits) where it needs it. The same values and gradients as the two ops, and one [rows, hidden]
// tensor less alive from the forward to the backward. A residual is added by the GEMM, as linear's.
Tensor gelu_linear(const Tensor& h, const Tensor& b1, const Tensor& w, const Tensor& b = Tensor(),
                   bool approximate = false, const Tensor& residual = Tensor());
// y = linear(layer_norm(x, norm_weight, norm_bias, eps), w, b): a Pre-LN branch's LayerNorm and
// first linear as one op that keeps x (as layer_norm does), not the norm's output, for its backward,
// which recomputes that output (the same bits) for the weight gradient. The same values and
// gradients as the two ops, and one tensor of x's size less alive from the forward to the backward.
Tensor layer_norm_linear(const Tensor& x, const Tensor& norm_weight, const Tensor& norm_bias, float eps,
                         const Tensor& w, const Tensor& b = Tensor());

}  // namespace engine
