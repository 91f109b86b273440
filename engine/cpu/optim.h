// engine/cpu/optim.h: the optimizers' update loops and the gradient norm's pieces, one call per
// parameter tensor. engine/cuda/optim.h declares the same functions for device memory; nn/optim.cpp
// picks one with ON_DEVICE (engine/ops/dispatch.h).
#pragma once
#include <cstdint>
#include "engine/multi_tensor.h"

namespace engine::cpu {

// SGD, PyTorch's form: d = g + wd·w; with momentum buf = μ·buf + d (buf = d on the first step),
// d = nesterov ? d + μ·buf : buf; then w -= lr·d. `buf` is null without momentum.
void sgd_step(float* w, const float* g, float* buf, int64_t n, float lr, float weight_decay, float momentum,
              bool nesterov, bool first_step);

// sgd_step over every tensor of the list, each with its own lr, weight decay and buffer.
void sgd_step_multi(const SgdTensorList& list, float momentum, bool nesterov, bool first_step);

// Adam / AdamW (decoupled: w -= lr·wd·w before the update; else wd·w is added to the gradient),
// as torch.optim.Adam/AdamW: m = β1·m + (1−β1)·d, v = β2·v + (1−β2)·d², then
// w -= (lr / bc1) · m / (√v / √bc2 + eps), with bias corrections bc1 = 1 − β1^t, bc2 = 1 − β2^t.
void adam_step(float* w, const float* g, float* m, float* v, int64_t n, float lr, float weight_decay, float beta1,
               float beta2, float eps, float bias_correction1, float bias_correction2, bool decoupled);

// adam_step over every tensor of the list (engine/multi_tensor.h), each with its own lr and weight
// decay: on the CPU the same loop per tensor, on CUDA one launch for the whole list.
void adam_step_multi(const AdamTensorList& list, float beta1, float beta2, float eps, float bias_correction1,
                     float bias_correction2, bool decoupled);

// Σ x[i]² over [0, n), accumulated in double, written to *out (memory of this backend). The order
// of the additions depends on n only, so the result is deterministic.
void sum_squares(const float* x, int64_t n, double* out);

// Σ x² over every element of every tensor of the list, in double, into *out: the CPU adds the
// tensors' sums in list order; CUDA reduces the whole list in two launches (fixed trees, so the
// same list gives the same bits on every run).
void sum_squares_multi(const ConstTensorList& list, double* out);

// x[i] *= s (gradient clipping).
void scale_inplace(float* x, int64_t n, float s);
// scale_inplace over every tensor of the list.
void scale_multi(const TensorList& list, float s);

}  // namespace engine::cpu
