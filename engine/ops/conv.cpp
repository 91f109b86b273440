// engine/ops/conv.cpp: conv2d, depthwise_conv2d and batch_norm, forward and backward side by side.
// Shape checks and autograd here; the kernels run on the inputs' device (ON_DEVICE:
// engine/cpu/conv.cpp or engine/cuda/conv.cu), and every tensor made here is on that device
// (the running statistics of batch_norm live on x's device too).
#include "engine/ops/conv.h"

#include "engine/autograd.h"
#include "engine/cpu/conv.h"
#include "engine/ops/common.h"
#include "engine/ops/dispatch.h"
#ifdef ENGINE_CUDA
#include "engine/cuda/conv.h"
#endif

namespace engine {

// Gradient buffer (on the input's device) for an input that needs one, else an undefined Tensor
// (and a null pointer).
static Tensor grad_buffer(const Tensor& input) {
    return input.defined() && input.requires_grad() ? input.new_empty(input.shape()) : Tensor();
}

// The data on the tensor's own device, for the kernel ON_DEVICE picks; null when undefined.
static float* raw_or_null(const Tensor& t) { return t.defined() ? t.raw_f32() : nullptr; }

// A CUDA tensor, and cuDNN built and switched on (engine/cuda/cudnn.h): its batch-norm calls are tried
// first (each may decline, and the own kernels run).
#ifdef ENGINE_CUDA
static bool cudnn_for(Device dev) { return dev == Device::CUDA && cuda::cudnn_enabled(); }
#endif

// A per-channel parameter (bias, weight, running statistic) must be a float [C] on x's device.
static void expect_channel_vector(const char* op, const Tensor& t, const char* what, int64_t C, const Tensor& x,
                                  const char* x_name) {
    expect_f32(op, t, what);
    expect_same_device(op, x, t);
    check(t.ndim() == 1 && t.size(0) == C, "{}: {} {} does not match the {} channels of {} {}", op, what,
          t.shape().str(), C, x_name, x.shape().str());
}

// ---------------------------------------------------------------------------------------------
// conv2d: y_n = W·cols(x_n) + b, with W viewed as [Cout, Cin·kh·kw].
//   dW = Σ_n dY_n·cols(x_n)ᵀ,   dx_n = col2im(Wᵀ·dY_n),   db = Σ_n Σ_pixels dY_n.

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, int stride, int padding) {
    const char* op = "conv2d";
    expect_f32(op, x, "input");
    expect_f32(op, w, "weight");
    expect_same_device(op, x, w);
    check(x.ndim() == 4, "conv2d: input must be [N, Cin, H, W], got {}", x.shape().str());
    check(w.ndim() == 4, "conv2d: weight must be [Cout, Cin, kh, kw], got {}", w.shape().str());
    check(x.size(1) == w.size(1), "conv2d: input {} has {} channels but weight {} expects {}", x.shape().str(),
          x.size(1), w.shape().str(), w.size(1));
    check(stride >= 1 && padding >= 0, "conv2d: input {}, weight {}: stride {} must be >= 1 and padding {} >= 0",
          x.shape().str(), w.shape().str(), stride, padding);
    if (b.defined()) expect_channel_vector(op, b, "bias", w.size(0), w, "weight");

    cpu::ConvGeometry g{};
    g.N = x.size(0), g.Cin = x.size(1), g.H = x.size(2), g.W = x.size(3);
    g.Cout = w.size(0), g.kh = w.size(2), g.kw = w.size(3);
    g.stride = stride, g.pad = padding;
    // (H + 2p − kh) may be negative, where C++ division would round up to a bogus size 1.
    int64_t span_h = g.H + 2 * g.pad - g.kh, span_w = g.W + 2 * g.pad - g.kw;
    g.OH = span_h < 0 ? 0 : span_h / g.stride + 1;
    g.OW = span_w < 0 ? 0 : span_w / g.stride + 1;
    check(g.OH >= 1 && g.OW >= 1 && g.kh >= 1 && g.kw >= 1,
          "conv2d: input {}, weight {}, stride {}, padding {}: empty output ({}x{})", x.shape().str(),
          w.shape().str(), stride, padding, g.OH, g.OW);

    const Device dev = x.device();
    Tensor y = x.new_empty({g.N, g.Cout, g.OH, g.OW});
    ON_DEVICE(dev, conv2d_forward)(x.raw_f32(), w.raw_f32(), raw_or_null(b), y.raw_f32(), g);

    return attach(y, "conv2d", {x, w, b}, [x, w, b, g, dev](const Tensor& dy) {
        Tensor dx = grad_buffer(x), dw = grad_buffer(w), db = grad_buffer(b);
        ON_DEVICE(dev, conv2d_backward)(x.raw_f32(), w.raw_f32(), dy.raw_f32(), raw_or_null(dx), raw_or_null(dw),
                                        raw_or_null(db), g);
        return std::vector<Tensor>{dx, dw, db};
    });
}

// ---------------------------------------------------------------------------------------------
// depthwise_conv2d: channel c of y is channel c of x correlated with the k×k filter w[c] (zero
// padding k/2, so y has x's size), plus b[c].
//   dx = dy correlated with the flipped filter,  dw[c] = Σ dy·(shifted x),  db[c] = Σ dy.

Tensor depthwise_conv2d(const Tensor& x, const Tensor& w, const Tensor& b) {
    const char* op = "depthwise_conv2d";
    expect_f32(op, x, "input");
    expect_f32(op, w, "weight");
    expect_same_device(op, x, w);
    check(x.ndim() == 4, "depthwise_conv2d: input must be [N, C, H, W], got {}", x.shape().str());
    int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    check(w.ndim() == 4 && w.size(0) == C && w.size(1) == 1 && w.size(2) == w.size(3),
          "depthwise_conv2d: weight {} must be [C, 1, k, k] with C = {} (input {})", w.shape().str(), C,
          x.shape().str());
    int64_t k = w.size(2);
    check(k % 2 == 1, "depthwise_conv2d: weight {}: kernel size {} must be odd for 'same' padding (input {})",
          w.shape().str(), k, x.shape().str());
    if (b.defined()) expect_channel_vector(op, b, "bias", C, x, "input");

    const Device dev = x.device();
    Tensor y = x.new_empty(x.shape());
    ON_DEVICE(dev, depthwise_conv2d_forward)(x.raw_f32(), w.raw_f32(), raw_or_null(b), y.raw_f32(), N, C, H, W, k);

    // Only dw reads x: with the filters frozen (ConvMixer's frozen spatial layer) x is not kept.
    Tensor x_saved = w.requires_grad() ? x : Tensor();
    return attach(y, "depthwise_conv2d", {x, w, b},
                  [x_saved, x_grad = x.requires_grad(), w, b, N, C, H, W, k, dev](const Tensor& dy) {
        Tensor dx = x_grad ? dy.new_empty(dy.shape()) : Tensor(), dw = grad_buffer(w), db = grad_buffer(b);
        ON_DEVICE(dev, depthwise_conv2d_backward)(raw_or_null(x_saved), w.raw_f32(), dy.raw_f32(), raw_or_null(dx),
                                                  raw_or_null(dw), raw_or_null(db), N, C, H, W, k);
        return std::vector<Tensor>{dx, dw, db};
    });
}

// ---------------------------------------------------------------------------------------------
// batch_norm: per channel c, x̂ = (x − μ_c)·rstd_c with rstd_c = 1/sqrt(σ²_c + eps), y = x̂·w_c + b_c.
// Training: μ, σ² (biased) of the batch, so they depend on x and dx carries their gradient:
//   dx = rstd·(dy·w − mean(dy·w) − x̂·mean(dy·w·x̂)), the means over the channel's N·S values.
// Eval: μ, σ² are the running statistics, constants: dx = dy·w·rstd.
// Both: dw = Σ dy·x̂, db = Σ dy. μ and rstd are copied at forward time, so the backward sees the
// statistics the forward used even if the running ones move on in between.
// On a CUDA device with cuDNN switched on, training forward, eval forward and the training backward
// go through cuDNN (engine/cuda/cudnn.h: the same semantics, its saved mean and inverse std are μ
// and rstd); the eval-mode backward has no cuDNN form and is always the own kernel.

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                  Tensor& running_var, bool training, float momentum, float eps) {
    const char* op = "batch_norm";
    expect_f32(op, x, "input");
    check(x.ndim() >= 2 && x.ndim() <= 4, "batch_norm: input must be [N, C], [N, C, L] or [N, C, H, W], got {}",
          x.shape().str());
    const int64_t N = x.size(0), C = x.size(1);
    int64_t S = 1;  // values per channel per sample: H·W, L, or 1
    for (int d = 2; d < x.ndim(); d++) S *= x.size(d);
    if (weight.defined()) expect_channel_vector(op, weight, "weight", C, x, "input");
    if (bias.defined()) expect_channel_vector(op, bias, "bias", C, x, "input");
    check(running_mean.defined() == running_var.defined(),
          "batch_norm: input {}: give both running_mean and running_var or neither", x.shape().str());
    const bool track = running_mean.defined();
    check(training || track, "batch_norm: input {}: eval mode needs running_mean and running_var",
          x.shape().str());
    if (track) {
        expect_channel_vector(op, running_mean, "running_mean", C, x, "input");
        expect_channel_vector(op, running_var, "running_var", C, x, "input");
    }
    check(!training || N * S > 1, "batch_norm: input {}: training needs more than one value per channel",
          x.shape().str());
    check(eps >= 0.f, "batch_norm: input {}: eps {} must be >= 0", x.shape().str(), eps);

    const Device dev = x.device();
    Tensor mean = x.new_empty({C}), rstd = x.new_empty({C});
    Tensor y = x.new_empty(x.shape());
    if (training) {
        // cuDNN computes the statistics, y, mean, rstd and the running update in one call.
        bool done = false;
#ifdef ENGINE_CUDA
        done = cudnn_for(dev) && cuda::cudnn_batch_norm_training(x.raw_f32(), raw_or_null(weight), raw_or_null(bias),
                                                                 y.raw_f32(), raw_or_null(running_mean),
                                                                 raw_or_null(running_var), mean.raw_f32(),
                                                                 rstd.raw_f32(), N, C, S, momentum, eps);
#endif
        if (!done) {
            Tensor var = x.new_empty({C});
            ON_DEVICE(dev, batch_norm_stats)(x.raw_f32(), mean.raw_f32(), var.raw_f32(), N, C, S);
            ON_DEVICE(dev, batch_norm_rstd)(var.raw_f32(), eps, rstd.raw_f32(), C);
            if (track)  // in place, outside autograd: the running statistics are buffers, not inputs
                ON_DEVICE(dev, batch_norm_update_running)(running_mean.raw_f32(), running_var.raw_f32(),
                                                          mean.raw_f32(), var.raw_f32(), C, N * S, momentum);
            ON_DEVICE(dev, batch_norm_forward)(x.raw_f32(), mean.raw_f32(), rstd.raw_f32(), raw_or_null(weight),
                                               raw_or_null(bias), y.raw_f32(), N, C, S);
        }
    } else {
        // mean and rstd for the backward (the eval-mode backward is always the own kernel).
        mean = running_mean.detach().clone();
        ON_DEVICE(dev, batch_norm_rstd)(running_var.raw_f32(), eps, rstd.raw_f32(), C);
        bool done = false;
#ifdef ENGINE_CUDA
        done = cudnn_for(dev) && cuda::cudnn_batch_norm_inference(x.raw_f32(), raw_or_null(weight),
                                                                  raw_or_null(bias), running_mean.raw_f32(),
                                                                  running_var.raw_f32(), y.raw_f32(), N, C, S, eps);
#endif
        if (!done)
            ON_DEVICE(dev, batch_norm_forward)(x.raw_f32(), mean.raw_f32(), rstd.raw_f32(), raw_or_null(weight),
                                               raw_or_null(bias), y.raw_f32(), N, C, S);
    }

    return attach(y, "batch_norm", {x, weight, bias},
                  [x, weight, bias, mean, rstd, training, N, C, S, eps, dev](const Tensor& dy) {
        Tensor dx = grad_buffer(x), dw = grad_buffer(weight), db = grad_buffer(bias);
        // cuDNN's backward is the batch-statistics formula only.
        bool done = false;
#ifdef ENGINE_CUDA
        done = training && cudnn_for(dev) &&
               cuda::cudnn_batch_norm_backward(x.raw_f32(), dy.raw_f32(), mean.raw_f32(), rstd.raw_f32(),
                                               raw_or_null(weight), raw_or_null(dx), raw_or_null(dw), raw_or_null(db),
                                               N, C, S, eps);
#endif
        if (!done)
            ON_DEVICE(dev, batch_norm_backward)(x.raw_f32(), dy.raw_f32(), mean.raw_f32(), rstd.raw_f32(),
                                                raw_or_null(weight), raw_or_null(dx), raw_or_null(dw), raw_or_null(db),
                                                N, C, S, training);
        return std::vector<Tensor>{dx, dw, db};
    });
}

}  // namespace engine
