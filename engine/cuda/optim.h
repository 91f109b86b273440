// engine/cuda/optim.h: the optimizers' update kernels and the gradient norm's pieces on the device,
// with the signatures of engine/cpu/optim.h (see there for the formulas; the CPU's per-tensor
// sgd_step, adam_step, sum_squares and scale_inplace are its loops, here only the list forms
// exist); every pointer is device memory. Plain C++: included by nn/optim.cpp, implemented in
// engine/cuda/optim.cu.
#pragma once
#include <cstdint>
#include "engine/multi_tensor.h"

namespace engine::cuda {

void sgd_step_multi(const SgdTensorList& list, float momentum, bool nesterov, bool first_step);
void adam_step_multi(const AdamTensorList& list, float beta1, float beta2, float eps, float bias_correction1,
                     float bias_correction2, bool decoupled);

// The same updates with the step's scalars read from device memory when the kernel runs, for a
// training step captured into a CUDA graph (nn/graph_step.h): list.lr[t] holds tensor t's lr
// multiplier (its group's lr_scale) and scalars[0] the learning rate; Adam reads its bias
// corrections bc1 and sqrt(bc2) from scalars[1], scalars[2], SGD its first-step flag (1 or 0)
// from scalars[1]. The arithmetic is that of the forms above, bit for bit.
void sgd_step_multi_device(const SgdTensorList& list, float momentum, bool nesterov, const float* scalars);
void adam_step_multi_device(const AdamTensorList& list, float beta1, float beta2, float eps, bool decoupled,
                            const float* scalars);
// Two passes, both deterministic (the grid depends on the list's total size only, the reduction
// tree is fixed): per-block partial sums in double, then one block adds the partials into *out (a
// device double). Nothing waits for the device: the caller reads the slots back once for all lists.
void sum_squares_multi(const ConstTensorList& list, double* out);
void scale_multi(const TensorList& list, float s);

// Gradient clipping without the host: from the sums of squares in slots[0, lists) (doubles, as
// sum_squares_multi left them) norm[0] = sqrt(Σ slots) and scale[0] = max_norm / (norm + 1e-6) if
// norm > max_norm, else 1 (nn::clip_grad_norm's rule, in its order of operations); then
// scale_multi_device multiplies a list by scale[0].
void clip_scale(const double* slots, int64_t lists, float max_norm, float* norm, float* scale);
void scale_multi_device(const TensorList& list, const float* scale);

}  // namespace engine::cuda
