// nn/layers.h: the basic layers. Each initializes itself with PyTorch's defaults (the `torch`
// scheme); init/ replaces those values by name when another scheme is asked for.
#pragma once
#include <string>
#include <vector>
#include "nn/module.h"

namespace nn {

// y = x·Wᵀ + b; weight [out, in], bias [out]. Init: W, b ~ U(±1/√in) (PyTorch's
// kaiming_uniform(a=√5), which works out to that bound).
class Linear : public Module {
public:
    Linear(int64_t in, int64_t out, bool bias = true);
    std::string type_name() const override { return "Linear"; }
    Tensor forward(const Tensor& x) const;
    // residual + forward(x) (undefined residual: forward(x)), the add done by the GEMM
    // (engine::linear's residual) unless a hook must see this layer's own input and output.
    Tensor forward_plus(const Tensor& x, const Tensor& residual) const;
    Tensor weight, bias;  // bias undefined when built without one
    int64_t in_features, out_features;
};

// residual + branch, or the branch alone where there is no residual (undefined).
Tensor add_residual(const Tensor& residual, const Tensor& branch);

// Whether a language model's loss() takes engine::linear_cross_entropy (the output layer and the
// loss in one op, no logits): the op is switched on and no hook must see the output layer's input
// or its logits (head null: tied to the embedding's weight). Otherwise loss() is cross_entropy of
// the model's forward().
bool output_loss_fused(const Linear* head);

// 2D convolution, NCHW; weight [out, in, k, k], bias [out]; PyTorch's default init U(±1/√(in·k·k)).
class Conv2d : public Module {
public:
    Conv2d(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1, int64_t padding = 0, bool bias = true);
    std::string type_name() const override { return "Conv2d"; }
    Tensor forward(const Tensor& x) const;
    Tensor weight, bias;
    int64_t stride, padding;
};

// Depthwise k×k convolution with 'same' padding; weight [C, 1, k, k], bias [C].
class DepthwiseConv2d : public Module {
public:
    DepthwiseConv2d(int64_t channels, int64_t kernel, bool bias = true);
    std::string type_name() const override { return "DepthwiseConv2d"; }
    Tensor forward(const Tensor& x) const;
    Tensor weight, bias;
};

// LayerNorm over the last dim; weight 1, bias 0; affine=false has neither.
class LayerNorm : public Module {
public:
    explicit LayerNorm(int64_t dim, bool affine = true, float eps = 1e-5f);
    std::string type_name() const override { return "LayerNorm"; }
    Tensor forward(const Tensor& x) const;
    // forward(x + branch) for a Post-Norm residual, the add and the norm in one pass (add_layer_norm:
    // the same bits) unless a hook must see the output through forward.
    Tensor forward_sum(const Tensor& x, const Tensor& branch) const;
    Tensor weight, bias;
    int64_t dim;
    float eps;
};

// Token embedding, weight [V, D] ~ N(0, 1). word_dropout p drops whole rows of the table (every
// occurrence of a word at once, Gal & Ghahramani) and scales the kept rows by 1/(1−p); only in
// training.
class Embedding : public Module {
public:
    Embedding(int64_t num, int64_t dim, float word_dropout = 0.f);
    std::string type_name() const override { return "Embedding"; }
    Tensor forward(const Tensor& ids) const;
    Tensor weight;
    int64_t num, dim;
    float word_dropout;
};

class Dropout : public Module {
public:
    explicit Dropout(float p) : p(p) {}
    std::string type_name() const override { return "Dropout"; }
    Tensor forward(const Tensor& x) const;
    bool active() const { return p > 0.f && training_; }  // whether forward changes anything
    float p;
};

// BatchNorm over N,H,W of [N,C,H,W]; weight 1, bias 0; running_mean 0, running_var 1 (buffers).
class BatchNorm2d : public Module {
public:
    explicit BatchNorm2d(int64_t channels, float momentum = 0.1f, float eps = 1e-5f);
    std::string type_name() const override { return "BatchNorm2d"; }
    Tensor forward(const Tensor& x);
    Tensor weight, bias, running_mean, running_var;
    float momentum, eps;
};

enum class Activation { GELU, ReLU, ReLU2, SiLU };
std::vector<std::string> activation_names();            // "gelu", "relu", "relu2" (squared ReLU), "silu"
Activation parse_activation(const std::string& name);  // one of activation_names(), or "swish" (= silu)
Tensor activate(const Tensor& x, Activation a);

// fc1 -> activation -> dropout -> fc2 (the transformer MLP); with GELU, fc1's bias and the GELU are one
// fused op (bias_gelu) unless fc1 has a hook, and the GELU and fc2 one op (gelu_linear, which does
// not keep the GELU's output) unless dropout is active or fc2 has a hook.
class MLP : public Module {
public:
    MLP(int64_t dim, int64_t hidden, Activation act = Activation::GELU, float dropout = 0.f);
    std::string type_name() const override { return "MLP"; }
    Tensor forward(const Tensor& x) const;
    // forward(norm.forward(x)), the Pre-LN branch, with the norm inside fc1's GEMM
    // (engine::layer_norm_linear: the norm's output is not kept for the backward) unless a hook on
    // the norm or fc1 needs it apart. With a residual, residual + that, the add inside fc2's GEMM
    // (engine::linear's and gelu_linear's residual) unless a hook on fc2 needs it apart.
    Tensor forward_normed(const LayerNorm& norm, const Tensor& x, const Tensor& residual = Tensor()) const;
    std::shared_ptr<Linear> fc1, fc2;
    std::shared_ptr<Dropout> drop;
    Activation act;

private:
    bool gelu_fused() const;                      // fc1's bias inside bias_gelu or gelu_linear
    // activation, dropout, fc2 on fc1's output, plus the residual where there is one
    Tensor after_fc1(const Tensor& h, const Tensor& residual = Tensor()) const;
    // the same on fc1's GEMM without its bias (gelu_fused)
    Tensor after_fc1_gemm(const Tensor& h, const Tensor& residual = Tensor()) const;
};

// LayerScale (Touvron et al., CaiT): a learned per-channel scale on a residual branch, init ε.
class LayerScale : public Module {
public:
    LayerScale(int64_t dim, float init);
    std::string type_name() const override { return "LayerScale"; }
    Tensor forward(const Tensor& x) const;
    Tensor gamma;
};

}  // namespace nn
