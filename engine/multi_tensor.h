// engine/multi_tensor.h: a list of up to kMaxListTensors tensors that one call updates or reduces
// together: the optimizers' multi-tensor SGD and AdamW steps, the gradient norm's sum of squares
// and the clipping's scale (engine/cpu/optim.h, engine/cuda/optim.h). On CUDA the list travels by value in the kernel's
// arguments (about 1.8 KB, under the 4 KB limit), so one launch covers every tensor of the list
// with no table copied to the device and no wait; a thread finds its tensor by a binary search of
// the offsets. Longer lists are cut into several calls (nn/optim.cpp).
#pragma once
#include <cstdint>

namespace engine {

constexpr int kMaxListTensors = 36;

// The per-step scalars of an optimizer step captured into a CUDA graph (nn/graph_step.h), read from
// device memory by the update kernels: the learning rate and the optimizer's step-dependent values.
constexpr int kStepScalars = 4;

// For the Adam/AdamW update: parameters, gradients, first and second moments, and each tensor's
// learning rate and weight decay (its parameter group's).
struct AdamTensorList {
    int count = 0;
    int64_t offset[kMaxListTensors + 1] = {0};  // tensor t holds the list's elements [offset[t], offset[t+1])
    float* w[kMaxListTensors];
    const float* g[kMaxListTensors];
    float* m[kMaxListTensors];
    float* v[kMaxListTensors];
    float lr[kMaxListTensors];
    float weight_decay[kMaxListTensors];
};

// For the SGD update: parameters, gradients, momentum buffers (each null without momentum), and
// each tensor's learning rate and weight decay.
struct SgdTensorList {
    int count = 0;
    int64_t offset[kMaxListTensors + 1] = {0};
    float* w[kMaxListTensors];
    const float* g[kMaxListTensors];
    float* buf[kMaxListTensors];
    float lr[kMaxListTensors];
    float weight_decay[kMaxListTensors];
};

// Tensors updated in place by one elementwise rule (x *= s for gradient clipping).
struct TensorList {
    int count = 0;
    int64_t offset[kMaxListTensors + 1] = {0};
    float* x[kMaxListTensors];
};

// For a reduction over several tensors (Σ x² over all of them).
struct ConstTensorList {
    int count = 0;
    int64_t offset[kMaxListTensors + 1] = {0};
    const float* x[kMaxListTensors];
};

}  // namespace engine
