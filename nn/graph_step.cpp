// nn/graph_step.cpp: the captured training step (nn/graph_step.h).
#include "nn/graph_step.h"

#include <cstring>
#include "engine/error.h"
#include "engine/multi_tensor.h"
#include "engine/ops/elementwise.h"
#include "engine/rng.h"
#include "engine/tensor.h"

namespace nn {

using namespace engine;

#ifdef ENGINE_CUDA

GraphStep::GraphStep(Optimizer& opt, std::function<Tensor()> loss_fn, std::vector<Tensor> clip_params, float max_norm,
                     Tensor backward_scale)
    : opt_(opt), loss_fn_(std::move(loss_fn)), clip_params_(std::move(clip_params)), max_norm_(max_norm),
      backward_scale_(std::move(backward_scale)) {
    check(max_norm >= 0.f, "GraphStep: max_norm {} must be >= 0", max_norm);
    check(cuda::available(), "GraphStep: CUDA graphs need a CUDA device");
    if (backward_scale_.defined())
        check(backward_scale_.is_cuda() && backward_scale_.ndim() == 0 && backward_scale_.dtype() == DType::F32,
              "GraphStep: the backward scale must be a float32 CUDA scalar, got {} {} on {}",
              dtype_name(backward_scale_.dtype()), backward_scale_.shape().str(),
              device_name(backward_scale_.device()));
    loss_ = Tensor::zeros(Shape{}, DType::F32, Device::CUDA);
    if (max_norm_ > 0.f) norm_ = Tensor::zeros(Shape{}, DType::F32, Device::CUDA);
    scalars_ = Tensor::zeros({kStepScalars + 2}, DType::F32, Device::CUDA);
}

Tensor GraphStep::run() {
    if (runs_++ == 0) eager_step();
    else if (!graph_) capture_step();
    else {
        uint64_t first = global_generator().advance(step_blocks_);
        write_scalars(first - capture_offset_);
        graph_->launch();
    }
    return loss_;
}

// The warm-up: an eager step as the apps take it (the gradients dropped and made anew).
void GraphStep::eager_step() {
    opt_.zero_grad();
    Tensor loss = loss_fn_();
    check(loss.is_cuda() && loss.numel() == 1, "GraphStep: the loss must be a CUDA scalar, got {} on {}",
          loss.shape().str(), device_name(loss.device()));
    cuda::copy_on_device(loss_.raw_f32(), loss.raw_f32(), sizeof(float));
    backward(loss);
    if (max_norm_ > 0.f) cuda::copy_on_device(norm_.raw_f32(), clip_grad_norm_device(clip_params_, max_norm_).raw_f32(), sizeof(float));
    opt_.step();
}

void GraphStep::backward(const Tensor& loss) {
    if (backward_scale_.defined()) mul(loss, backward_scale_).backward();
    else loss.backward();
}

// Capture the step (nothing runs), then launch it: the first launch is this run's step. Every
// tensor made inside is freed inside, so the graph keeps no memory between launches.
void GraphStep::capture_step() {
    Generator& gen = global_generator();
    capture_offset_ = gen.offset();
    write_scalars(0);
    cuda::set_rng_shift(reinterpret_cast<const uint64_t*>(scalars_.raw_f32() + kStepScalars));
    try {
        graph_ = std::make_shared<cuda::CudaGraph>(cuda::capture([&] {
            opt_.zero_grad_in_place();
            Tensor loss = loss_fn_();
            cuda::copy_on_device(loss_.raw_f32(), loss.raw_f32(), sizeof(float));
            backward(loss);
            if (max_norm_ > 0.f)
                cuda::copy_on_device(norm_.raw_f32(), clip_grad_norm_device(clip_params_, max_norm_).raw_f32(), sizeof(float));
            opt_.step_device(scalars_.raw_f32());
        }));
    } catch (const Error& e) {
        cuda::set_rng_shift(nullptr);
        fail("GraphStep: the training step cannot be captured into a CUDA graph (run it eagerly: --cuda-graph off): {}",
             e.what());
    }
    cuda::set_rng_shift(nullptr);
    step_blocks_ = gen.offset() - capture_offset_;  // the capture reserved the step's blocks, as an eager step
    graph_->launch();
}

// The step's scalars and the shift of its Philox blocks from the captured ones, in one copy.
void GraphStep::write_scalars(uint64_t shift) {
    struct {
        float s[kStepScalars];
        uint64_t shift;
    } host;
    static_assert(sizeof(host) == (kStepScalars + 2) * sizeof(float), "scalars then one uint64");
    opt_.next_step_scalars(host.s);
    host.shift = shift;
    cuda::copy_to_device(scalars_.raw_f32(), &host, sizeof(host));
}

void copy_into(const Tensor& dst, const Tensor& src) {
    check(dst.shape() == src.shape() && dst.dtype() == src.dtype(), "copy_into: {} {} into {} {}", src.shape().str(),
          dtype_name(src.dtype()), dst.shape().str(), dtype_name(dst.dtype()));
    size_t bytes = (size_t)src.numel() * 4;
    void* d = dst.dtype() == DType::I32 ? (void*)dst.raw_i32() : (void*)dst.raw_f32();
    const void* s = src.dtype() == DType::I32 ? (const void*)src.raw_i32() : (const void*)src.raw_f32();
    if (dst.is_cuda() && src.is_cuda()) cuda::copy_on_device(d, s, bytes);
    else if (dst.is_cuda()) cuda::copy_to_device(d, s, bytes);
    else if (src.is_cuda()) cuda::copy_to_host(d, s, bytes);
    else std::memcpy(d, s, bytes);
}

#else  // a build without the CUDA backend

GraphStep::GraphStep(Optimizer& opt, std::function<Tensor()>, std::vector<Tensor>, float, Tensor)
    : opt_(opt), max_norm_(0.f) {
    fail("GraphStep: CUDA graphs need the CUDA backend (this build has none)");
}
Tensor GraphStep::run() { fail("GraphStep: no CUDA backend"); }
void GraphStep::eager_step() {}
void GraphStep::capture_step() {}
void GraphStep::write_scalars(uint64_t) {}

void copy_into(const Tensor& dst, const Tensor& src) {
    check(dst.shape() == src.shape() && dst.dtype() == src.dtype() && !dst.is_cuda() && !src.is_cuda(),
          "copy_into: {} into {} (CPU tensors of one shape and dtype in this build)", src.shape().str(), dst.shape().str());
    std::memcpy(dst.dtype() == DType::I32 ? (void*)dst.raw_i32() : (void*)dst.raw_f32(),
                src.dtype() == DType::I32 ? (const void*)src.raw_i32() : (const void*)src.raw_f32(),
                (size_t)src.numel() * 4);
}

#endif

}  // namespace nn
