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
// Two passes, both deterministic (the grid depends on the list's total size only, the reduction
// tree is fixed): per-block partial sums in double, then one block adds the partials into *out (a
// device double). Nothing waits for the device: the caller reads the slots back once for all lists.
void sum_squares_multi(const ConstTensorList& list, double* out);
void scale_multi(const TensorList& list, float s);

}  // namespace engine::cuda
