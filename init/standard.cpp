// init/standard.cpp: torch, timm, xavier, kaiming, lecun, normal:STD, orthogonal (formulas in
// init/standard.h), and the in-place write helpers the other scheme families share.
#include "init/standard.h"

#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include "engine/error.h"
#include "engine/linalg.h"
#include "engine/ops.h"
#include "engine/rng.h"
#include "nn/gau.h"
#include "nn/lstm.h"
#include "nn/transformer.h"

namespace init {

using engine::Tensor;

// ---------------------------------------------------------------------------------------------
// In-place writes

static float* host_data(Tensor& t, const char* who) {
    engine::check(t.defined(), "init: {}: tensor is undefined", who);
    engine::check(t.device() == engine::Device::CPU,
                  "init: {}: tensor {} is on {}; initialize the model on the CPU, then move it", who, t.shape().str(),
                  engine::device_name(t.device()));
    return t.data_f32();
}

void fill_uniform(Tensor& t, float low, float high) {
    engine::NoGrad ng;
    engine::global_generator().uniform(host_data(t, "fill_uniform"), t.numel(), low, high);
}

void fill_normal(Tensor& t, float mean, float std) {
    engine::NoGrad ng;
    engine::global_generator().normal(host_data(t, "fill_normal"), t.numel(), mean, std);
}

void fill_trunc_normal(Tensor& t, float mean, float std, float a, float b) {
    engine::NoGrad ng;
    engine::global_generator().trunc_normal(host_data(t, "fill_trunc_normal"), t.numel(), mean, std, a, b);
}

void fill_value(Tensor& t, float value) {
    engine::NoGrad ng;
    float* p = host_data(t, "fill_value");
    for (int64_t i = 0; i < t.numel(); i++) p[i] = value;
}

void copy_into(Tensor& dst, const Tensor& src, const std::string& what) {
    engine::check(src.defined() && dst.defined() && dst.shape() == src.shape(),
                  "init: {}: cannot write {} into a parameter of shape {}", what,
                  src.defined() ? src.shape().str() : "an undefined tensor",
                  dst.defined() ? dst.shape().str() : "(undefined)");
    engine::NoGrad ng;
    Tensor s = src.device() == engine::Device::CPU ? src : src.to(engine::Device::CPU);
    std::memcpy(host_data(dst, what.c_str()), s.data_f32(), (size_t)dst.numel() * sizeof(float));
}

void scale_inplace(Tensor& t, float factor) {
    engine::NoGrad ng;
    float* p = host_data(t, "scale_inplace");
    for (int64_t i = 0; i < t.numel(); i++) p[i] *= factor;
}

// ---------------------------------------------------------------------------------------------
// Fans, layers, norms

Fans fans_of(const Tensor& w) {
    engine::check(w.ndim() >= 2, "init: fan in/out need a weight with >= 2 dims, got {}", w.shape().str());
    int64_t receptive = 1;
    for (int i = 2; i < w.ndim(); i++) receptive *= w.size(i);
    return {w.size(1) * receptive, w.size(0) * receptive};
}

std::vector<WeightRef> weight_layers(nn::Module& model) {
    std::vector<WeightRef> out;
    auto name = [](const std::string& path, const char* leaf) { return path.empty() ? leaf : path + "." + leaf; };
    model.visit([&](const std::string& path, nn::Module& m) {
        if (auto* l = dynamic_cast<nn::Linear*>(&m)) out.push_back({name(path, "weight"), &l->weight, &l->bias, "Linear"});
        else if (auto* c = dynamic_cast<nn::Conv2d*>(&m))
            out.push_back({name(path, "weight"), &c->weight, &c->bias, "Conv2d"});
        else if (auto* dw = dynamic_cast<nn::DepthwiseConv2d*>(&m))
            out.push_back({name(path, "weight"), &dw->weight, &dw->bias, "DepthwiseConv2d"});
        else if (auto* e = dynamic_cast<nn::Embedding*>(&m))
            out.push_back({name(path, "weight"), &e->weight, nullptr, "Embedding"});
        else if (auto* r = dynamic_cast<nn::LSTMLayer*>(&m)) {
            out.push_back({name(path, "weight_ih"), &r->weight_ih, &r->bias_ih, "LSTM"});
            out.push_back({name(path, "weight_hh"), &r->weight_hh, &r->bias_hh, "LSTM"});
        }
    });
    return out;
}

static bool has_bias(const WeightRef& w) { return w.bias && w.bias->defined(); }

int reset_norms(nn::Module& model) {
    int count = 0;
    model.visit([&](const std::string&, nn::Module& m) {
        if (auto* ln = dynamic_cast<nn::LayerNorm*>(&m)) {
            if (ln->weight.defined()) fill_value(ln->weight, 1.f);
            if (ln->bias.defined()) fill_value(ln->bias, 0.f);
            count++;
        } else if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(&m)) {
            fill_value(bn->weight, 1.f);
            fill_value(bn->bias, 0.f);
            fill_value(bn->running_mean, 0.f);
            fill_value(bn->running_var, 1.f);
            count++;
        } else if (auto* g = dynamic_cast<nn::GAU*>(&m)) {
            fill_value(g->gamma_q, 1.f);
            fill_value(g->gamma_k, 1.f);
            fill_value(g->beta_q, 0.f);
            fill_value(g->beta_k, 0.f);
        }
    });
    return count;
}

// The class token and a learned position embedding, when the model has them.
static void for_each_token_param(nn::Module& model, const std::function<void(const char*, Tensor&)>& fn) {
    if (auto* vit = dynamic_cast<nn::ViT*>(&model)) {
        if (vit->cls_token.defined()) fn("cls_token", vit->cls_token);
        if (vit->cfg.pos == "learned") fn("pos_embed", vit->pos_embed);
    } else if (auto* lm = dynamic_cast<nn::TransformerLM*>(&model)) {
        if (lm->cfg.pos == "learned") fn("pos_embed", lm->pos_embed);
    }
}

static void require_weights(const std::vector<WeightRef>& layers, const nn::Module& model, const char* scheme) {
    engine::check(!layers.empty(), "init: {}: model {} has no Linear, Conv, Embedding or LSTM weights", scheme,
                  model.type_name());
}

// ---------------------------------------------------------------------------------------------
// torch and timm

void torch_init(nn::Module& model, const Options&, const InitData*, Report& report) {
    auto layers = weight_layers(model);
    require_weights(layers, model, "torch");
    for (auto& w : layers) {
        if (w.kind == "Embedding") {
            fill_normal(*w.weight, 0.f, 1.f);
            continue;
        }
        // LSTM: PyTorch draws every tensor from U(±1/√H), H = weight_hh's input size.
        float bound = w.kind == "LSTM" ? 1.f / std::sqrt((float)w.weight->size(0) / 4.f)
                                       : 1.f / std::sqrt((float)fans_of(*w.weight).in);
        fill_uniform(*w.weight, -bound, bound);
        if (has_bias(w)) fill_uniform(*w.bias, -bound, bound);
    }
    int norms = reset_norms(model);
    for_each_token_param(model, [](const char* name, Tensor& t) {
        if (std::string(name) == "cls_token") fill_value(t, 0.f);
        else fill_trunc_normal(t, 0.f, 0.02f, -2.f, 2.f);
    });
    report.say(fmt::format("torch: {} weights U(±1/√fan_in) (Embedding N(0,1), LSTM U(±1/√H)), {} norms 1/0",
                           layers.size(), norms));
}

void timm_init(nn::Module& model, const Options&, const InitData*, Report& report) {
    auto layers = weight_layers(model);
    require_weights(layers, model, "timm");
    float std = 0.02f;
    int linear = 0;
    for (auto& w : layers) {
        if (w.kind != "Linear") continue;  // timm's init_weights_vit_timm visits nn.Linear only
        fill_trunc_normal(*w.weight, 0.f, std, -2.f, 2.f);
        if (has_bias(w)) fill_value(*w.bias, 0.f);
        linear++;
    }
    int norms = reset_norms(model);
    int tokens = 0;
    for_each_token_param(model, [&](const char*, Tensor& t) {
        fill_trunc_normal(t, 0.f, std, -2.f, 2.f);
        tokens++;
    });
    report.say(fmt::format("timm: {} Linear weights trunc-normal(0, 0.02) on ±2, biases 0, {} other weights as "
                           "built (the patch conv: PyTorch's default), {} norms 1/0, {} token/PE tensors "
                           "trunc-normal(0, 0.02)",
                           linear, layers.size() - linear, norms, tokens));
}

// ---------------------------------------------------------------------------------------------
// The classic families: one weight rule each, the rest shared.

using WeightRule = std::function<void(Tensor& w, Fans f)>;

static void classic(nn::Module& model, const char* scheme, const std::string& rule_text, const WeightRule& rule,
                    Report& report) {
    auto layers = weight_layers(model);
    require_weights(layers, model, scheme);
    for (auto& w : layers) {
        rule(*w.weight, fans_of(*w.weight));
        if (has_bias(w)) fill_value(*w.bias, 0.f);
    }
    int norms = reset_norms(model);
    report.say(fmt::format("{}: {} weights {}, biases 0, {} norms 1/0", scheme, layers.size(), rule_text, norms));
}

void xavier_uniform_init(nn::Module& model, const Options& opt, const InitData*, Report& report) {
    float g = opt.gain;
    classic(model, "xavier", fmt::format("U(±{}·√(6/(fan_in+fan_out)))", g), [g](Tensor& w, Fans f) {
        float bound = g * std::sqrt(6.f / (float)(f.in + f.out));
        fill_uniform(w, -bound, bound);
    }, report);
}

void xavier_normal_init(nn::Module& model, const Options& opt, const InitData*, Report& report) {
    float g = opt.gain;
    classic(model, "xavier-normal", fmt::format("N(0, ({}·√(2/(fan_in+fan_out)))²)", g), [g](Tensor& w, Fans f) {
        fill_normal(w, 0.f, g * std::sqrt(2.f / (float)(f.in + f.out)));
    }, report);
}

void kaiming_normal_init(nn::Module& model, const Options& opt, const InitData*, Report& report) {
    float g = opt.gain * std::sqrt(2.f);
    classic(model, "kaiming", fmt::format("N(0, ({:.4g}/√fan_in)²)", g), [g](Tensor& w, Fans f) {
        fill_normal(w, 0.f, g / std::sqrt((float)f.in));
    }, report);
}

void kaiming_fan_out_init(nn::Module& model, const Options& opt, const InitData*, Report& report) {
    float g = opt.gain * std::sqrt(2.f);
    classic(model, "kaiming-fan-out", fmt::format("N(0, ({:.4g}/√fan_out)²)", g), [g](Tensor& w, Fans f) {
        fill_normal(w, 0.f, g / std::sqrt((float)f.out));
    }, report);
}

void kaiming_uniform_init(nn::Module& model, const Options& opt, const InitData*, Report& report) {
    float g = opt.gain * std::sqrt(2.f);
    classic(model, "kaiming-uniform", fmt::format("U(±{:.4g}·√(3/fan_in))", g), [g](Tensor& w, Fans f) {
        float bound = g * std::sqrt(3.f / (float)f.in);
        fill_uniform(w, -bound, bound);
    }, report);
}

void lecun_normal_init(nn::Module& model, const Options& opt, const InitData*, Report& report) {
    float g = opt.gain;
    classic(model, "lecun", fmt::format("N(0, ({}/√fan_in)²)", g), [g](Tensor& w, Fans f) {
        fill_normal(w, 0.f, g / std::sqrt((float)f.in));
    }, report);
}

void normal_init(nn::Module& model, const Options& opt, const InitData*, Report& report) {
    float std = opt.normal_std;
    engine::check(std >= 0.f && std::isfinite(std), "init: normal: std {} must be finite and >= 0", std);
    classic(model, "normal", fmt::format("N(0, {}²)", std), [std](Tensor& w, Fans) { fill_normal(w, 0.f, std); },
            report);
}

void uniform_init(nn::Module& model, const Options& opt, const InitData*, Report& report) {
    float a = opt.uniform_bound;
    engine::check(a >= 0.f && std::isfinite(a), "init: uniform: bound {} must be finite and >= 0", a);
    auto layers = weight_layers(model);
    require_weights(layers, model, "uniform");
    for (auto& w : layers) {
        fill_uniform(*w.weight, -a, a);
        if (has_bias(w)) fill_uniform(*w.bias, -a, a);  // biases too, as Zaremba's Torch7 code
    }
    int norms = reset_norms(model);
    report.say(fmt::format("uniform: {} weights and their biases U(±{}), {} norms 1/0", layers.size(), a, norms));
}

Tensor orthogonal_matrix(int64_t rows, int64_t cols, float gain) {
    engine::check(rows > 0 && cols > 0, "orthogonal_matrix: [{}, {}] must be non-empty", rows, cols);
    engine::NoGrad ng;
    Tensor g = Tensor::normal({rows, cols});
    bool wide = rows < cols;
    // QR of the tall orientation; Q [max, min] has orthonormal columns.
    Tensor q = engine::qr(wide ? engine::transpose(g, 0, 1) : g).Q;
    if (wide) q = engine::transpose(q, 0, 1);
    return gain == 1.f ? q : engine::mul(q, gain);
}

void orthogonal_init(nn::Module& model, const Options& opt, const InitData*, Report& report) {
    float g = opt.gain;
    classic(model, "orthogonal", fmt::format("orthogonal × {}", g), [g](Tensor& w, Fans f) {
        // The weight viewed as [out, fan_in], as torch.nn.init.orthogonal_ flattens it.
        copy_into(w, orthogonal_matrix(w.size(0), w.numel() / w.size(0), g).reshape(w.shape()), "orthogonal");
    }, report);
}

}  // namespace init
