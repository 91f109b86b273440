// nn/graph_step.h: a training step captured into a CUDA graph and launched at every step, so a
// small model is not bound by the host's kernel launches (issue 12; engine/cuda/runtime.h).
//
// The step is: zero the gradients, loss = loss_fn(), backward, clip the gradients (max_norm > 0),
// optimizer update. The first run() does it eagerly (a warm-up: it allocates the gradients and
// whatever else is made once); the second captures it and launches the graph, and every later one
// launches the graph again. What changes from step to step reaches the graph through device memory:
//   - the batch: loss_fn reads tensors whose memory stays, which the caller refills before each
//     run() (copy_into); the shapes may not change (a new GraphStep, or eager steps, for another);
//   - the learning rate and the optimizer's step-dependent scalars: Optimizer::next_step_scalars,
//     copied in with the generator's shift below (one copy of 24 bytes before each launch);
//   - the random draws (dropout): the host reserves the step's Philox blocks as an eager step would
//     and the drawing kernels add the shift from the captured blocks to them (cuda::set_rng_shift),
//     so a launch draws exactly the values the same eager step would;
//   - the gradients are zeroed in place (an eager step drops them): their memory is the graph's input.
// The loss and the gradient norm land in device scalars that stay (loss(), grad_norm()).
// Results equal eager steps bit for bit (tests/cuda/test_cuda_graph_step.cpp): the same kernels on
// the same values; the only difference, 0 + g for a gradient g, changes at most the sign of a zero.
// loss_fn must not wait for the device (no .item(), no copy to the host): the capture fails then,
// naming the call. Token ids and cross-entropy targets are checked on the device, in the graph as
// in an eager step: one out of range is reported at the host's next wait for the device
// (engine/cuda/runtime.h).
#pragma once
#include <functional>
#include <memory>
#include <vector>
#include "engine/cuda/runtime.h"
#include "nn/optim.h"

namespace nn {

class GraphStep {
public:
    // clip_params / max_norm: clip the global gradient norm of these parameters (max_norm > 0).
    // backward_scale: a CUDA scalar s the caller may refill before each run; the backward then
    // starts from loss·s instead of the loss (loss() stays the loss), as an eager
    // mul(loss, s).backward() does, with the same bits.
    GraphStep(Optimizer& opt, std::function<Tensor()> loss_fn, std::vector<Tensor> clip_params = {},
              float max_norm = 0.f, Tensor backward_scale = Tensor());
    // One training step; the loss (a device scalar, valid until the next run) is returned.
    Tensor run();
    Tensor loss() const { return loss_; }
    Tensor grad_norm() const { return norm_; }  // before clipping; undefined without clipping
    bool captured() const { return graph_ != nullptr; }

private:
    void eager_step();
    void capture_step();
    void backward(const Tensor& loss);
    void write_scalars(uint64_t shift);

    Optimizer& opt_;
    std::function<Tensor()> loss_fn_;
    std::vector<Tensor> clip_params_;
    float max_norm_;
    Tensor backward_scale_;
    Tensor loss_, norm_;
    Tensor scalars_;  // kStepScalars floats, then the generator's shift (a uint64)
    std::shared_ptr<engine::cuda::CudaGraph> graph_;  // (shared_ptr: a CPU-only build never destroys one)
    uint64_t capture_offset_ = 0, step_blocks_ = 0;  // the captured step's first Philox block, and how many it draws
    int runs_ = 0;
};

// Copies src into dst's memory (same shape and dtype; any devices): a new batch into the tensor a
// captured step reads.
void copy_into(const Tensor& dst, const Tensor& src);

}  // namespace nn
