// nn/layers.cpp: Linear, LayerNorm, Embedding, Dropout, BatchNorm2d, MLP, LayerScale.
#include "nn/layers.h"

#include <cmath>
#include "engine/error.h"
#include "engine/ops.h"
#include <fmt/ranges.h>

namespace nn {

using namespace engine;

Linear::Linear(int64_t in, int64_t out, bool has_bias) : in_features(in), out_features(out) {
    check(in > 0 && out > 0, "Linear: sizes must be positive, got in={} out={}", in, out);
    float bound = 1.f / std::sqrt((float)in);
    weight = Tensor::uniform({out, in}, -bound, bound);
    register_parameter("weight", weight);
    if (has_bias) {
        bias = Tensor::uniform({out}, -bound, bound);
        register_parameter("bias", bias);
    }
}

Tensor Linear::forward(const Tensor& x) const {
    if (input_hook) input_hook(*this, x);
    return hooked(linear(x, weight, bias));
}

Tensor Linear::forward_plus(const Tensor& x, const Tensor& residual) const {
    if (!residual.defined() || hooked_io()) return add_residual(residual, forward(x));
    return linear(x, weight, bias, residual);
}

Tensor add_residual(const Tensor& residual, const Tensor& branch) {
    return residual.defined() ? add(residual, branch) : branch;
}

Conv2d::Conv2d(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding, bool has_bias)
    : stride(stride), padding(padding) {
    check(in > 0 && out > 0 && kernel > 0 && stride > 0 && padding >= 0,
          "Conv2d: invalid sizes in={} out={} kernel={} stride={} padding={}", in, out, kernel, stride, padding);
    float bound = 1.f / std::sqrt((float)(in * kernel * kernel));
    weight = Tensor::uniform({out, in, kernel, kernel}, -bound, bound);
    register_parameter("weight", weight);
    if (has_bias) {
        bias = Tensor::uniform({out}, -bound, bound);
        register_parameter("bias", bias);
    }
}

Tensor Conv2d::forward(const Tensor& x) const { return hooked(conv2d(x, weight, bias, (int)stride, (int)padding)); }

DepthwiseConv2d::DepthwiseConv2d(int64_t channels, int64_t kernel, bool has_bias) {
    check(channels > 0 && kernel > 0 && kernel % 2 == 1, "DepthwiseConv2d: channels {} and odd kernel {} needed",
          channels, kernel);
    float bound = 1.f / std::sqrt((float)(kernel * kernel));
    weight = Tensor::uniform({channels, 1, kernel, kernel}, -bound, bound);
    register_parameter("weight", weight);
    if (has_bias) {
        bias = Tensor::uniform({channels}, -bound, bound);
        register_parameter("bias", bias);
    }
}

Tensor DepthwiseConv2d::forward(const Tensor& x) const { return hooked(depthwise_conv2d(x, weight, bias)); }

LayerNorm::LayerNorm(int64_t d, bool affine, float eps) : dim(d), eps(eps) {
    if (affine) {
        weight = Tensor::ones({d});
        bias = Tensor::zeros({d});
        register_parameter("weight", weight);
        register_parameter("bias", bias);
    }
}

Tensor LayerNorm::forward(const Tensor& x) const {
    check(x.size(-1) == dim, "LayerNorm({}): input {} has last dim {}", dim, x.shape().str(), x.size(-1));
    return hooked(layer_norm(x, weight, bias, eps));
}

Tensor LayerNorm::forward_sum(const Tensor& x, const Tensor& branch) const {
    if (forward_hook) return forward(add(x, branch));
    check(x.size(-1) == dim, "LayerNorm({}): input {} has last dim {}", dim, x.shape().str(), x.size(-1));
    return add_layer_norm(x, branch, weight, bias, eps).norm;
}

bool output_loss_fused(const Linear* head) {
    return linear_cross_entropy_enabled() && !(head && head->hooked_io());
}

Embedding::Embedding(int64_t n, int64_t d, float wd) : num(n), dim(d), word_dropout(wd) {
    check(wd >= 0.f && wd < 1.f, "Embedding: word dropout {} must be in [0, 1)", wd);
    weight = Tensor::normal({n, d});
    register_parameter("weight", weight);
}

Tensor Embedding::forward(const Tensor& ids) const {
    if (!training_ || word_dropout == 0.f) return embedding(weight, ids);
    // The rows kept, drawn on the host from the global generator (the same draws on every device),
    // then copied to the table's device: num floats per step.
    Tensor keep = Tensor::empty({num, 1});
    global_generator().bernoulli(keep.data_f32(), num, 1.f - word_dropout);
    keep = keep.to(weight.device());
    return embedding(mul(weight, mul(keep, 1.f / (1.f - word_dropout))), ids);
}

Tensor Dropout::forward(const Tensor& x) const { return dropout(x, p, training_); }

BatchNorm2d::BatchNorm2d(int64_t c, float momentum, float eps) : momentum(momentum), eps(eps) {
    weight = Tensor::ones({c});
    bias = Tensor::zeros({c});
    running_mean = Tensor::zeros({c});
    running_var = Tensor::ones({c});
    register_parameter("weight", weight);
    register_parameter("bias", bias);
    register_buffer("running_mean", running_mean);
    register_buffer("running_var", running_var);
}

Tensor BatchNorm2d::forward(const Tensor& x) {
    return batch_norm(x, weight, bias, running_mean, running_var, training_, momentum, eps);
}

static const std::pair<const char*, Activation> kActivations[] = {
    {"gelu", Activation::GELU}, {"relu", Activation::ReLU}, {"relu2", Activation::ReLU2}, {"silu", Activation::SiLU}};

std::vector<std::string> activation_names() {
    std::vector<std::string> names;
    for (const auto& [name, a] : kActivations) names.push_back(name);
    return names;
}

Activation parse_activation(const std::string& name) {
    for (const auto& [known, a] : kActivations)
        if (name == known) return a;
    if (name == "swish") return Activation::SiLU;
    fail("unknown activation '{}' (choose {})", name, fmt::join(activation_names(), ", "));
}

Tensor activate(const Tensor& x, Activation a) {
    switch (a) {
        case Activation::GELU: return gelu(x);
        case Activation::ReLU: return relu(x);
        case Activation::ReLU2: return relu2(x);
        case Activation::SiLU: return silu(x);
    }
    return x;
}

MLP::MLP(int64_t dim, int64_t hidden, Activation a, float p) : act(a) {
    fc1 = register_module("fc1", std::make_shared<Linear>(dim, hidden));
    fc2 = register_module("fc2", std::make_shared<Linear>(hidden, dim));
    drop = register_module("drop", std::make_shared<Dropout>(p));
}

// With GELU, fc1's bias is added inside the fused bias_gelu (one pass instead of the bias pass, the
// GELU's read and write): fc1's GEMM runs without it, and the parameters (names, checkpoints,
// inits) are fc1's as always. fc1's output without its bias is not what a hook on fc1 expects to
// see or rewrite (the data-dependent inits set fc1's bias from it), so while fc1 has a hook the
// unfused path runs. Where nothing comes between the GELU and fc2 (no active dropout, no hook on
// fc2), the GELU and fc2 are one op, gelu_linear, which does not keep the GELU's output for the
// backward: a fifth less activation memory in a ViT step (engine/ops/matmul.h).
Tensor MLP::forward(const Tensor& x) const {
    if (!gelu_fused()) return after_fc1(fc1->forward(x));
    return after_fc1_gemm(linear(x, fc1->weight, Tensor()));
}

// The norm joins fc1's GEMM (layer_norm_linear: its output is not kept for the backward) unless a
// hook on the norm or on fc1 must see it.
Tensor MLP::forward_normed(const LayerNorm& norm, const Tensor& x, const Tensor& residual) const {
    if (norm.forward_hook || fc1->hooked_io())
        return add_residual(residual, forward(norm.forward(x)));
    if (!gelu_fused())
        return after_fc1(layer_norm_linear(x, norm.weight, norm.bias, norm.eps, fc1->weight, fc1->bias), residual);
    return after_fc1_gemm(layer_norm_linear(x, norm.weight, norm.bias, norm.eps, fc1->weight, Tensor()), residual);
}

bool MLP::gelu_fused() const {
    return act == Activation::GELU && fc1->bias.defined() && !fc1->hooked_io();
}

Tensor MLP::after_fc1(const Tensor& h, const Tensor& residual) const {
    return fc2->forward_plus(drop->forward(activate(h, act)), residual);
}

Tensor MLP::after_fc1_gemm(const Tensor& h, const Tensor& residual) const {
    if (drop->active() || fc2->hooked_io())
        return fc2->forward_plus(drop->forward(bias_gelu(h, fc1->bias)), residual);
    return gelu_linear(h, fc1->bias, fc2->weight, fc2->bias, false, residual);
}

LayerScale::LayerScale(int64_t dim, float init) {
    gamma = Tensor::full({dim}, init);
    register_parameter("gamma", gamma);
}

Tensor LayerScale::forward(const Tensor& x) const { return mul(x, gamma); }

}  // namespace nn
