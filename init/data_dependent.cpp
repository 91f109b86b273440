// init/data_dependent.cpp: lsuv, relu-quantile and attn-logits (formulas and sources in
// init/data_dependent.h).
//
// Each scheme needs every layer's statistics with the layers before it already initialized. They
// get them in a single forward pass over the init batch: the layer's forward hook sees its output,
// sets the layer's weights, and rewrites that output in place to exactly what the new weights
// produce (a per-unit affine map of it), so the layers downstream see their final inputs. A second
// pass measures the result.
#include "init/data_dependent.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <fmt/ranges.h>
#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/linalg.h"
#include "engine/ops.h"
#include "init/standard.h"
#include "nn/attention.h"
#include "nn/convmixer.h"
#include "nn/gau.h"
#include "nn/layers.h"
#include "nn/transformer.h"

namespace init {

using engine::check;
using engine::Tensor;

namespace {

// ---------------------------------------------------------------------------------------------
// The layers, their activations, and passes over the init batch.

enum class Act { None, ReLU, ReLU2, GELU, SiLU };

const char* act_name(Act a) {
    switch (a) {
        case Act::ReLU: return "ReLU";
        case Act::ReLU2: return "ReLU²";
        case Act::GELU: return "GELU";
        case Act::SiLU: return "SiLU";
        default: return "none";
    }
}

Act from_model(nn::Activation a) {
    switch (a) {
        case nn::Activation::ReLU: return Act::ReLU;
        case nn::Activation::ReLU2: return Act::ReLU2;
        case nn::Activation::GELU: return Act::GELU;
        case nn::Activation::SiLU: return Act::SiLU;
    }
    return Act::None;
}

// The same functions as the engine's relu, relu2, gelu (exact erf form) and silu.
inline double activate(Act a, double x) {
    switch (a) {
        case Act::ReLU: return x > 0 ? x : 0;
        case Act::ReLU2: return x > 0 ? x * x : 0;
        case Act::GELU: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
        case Act::SiLU: return x / (1 + std::exp(-x));
        default: return x;
    }
}

struct Layer {
    std::string name;        // module path, "blocks.0.mlp.fc1"
    nn::Module* module;
    Tensor* weight;          // [out, ...]: unit j owns row j of the weight viewed as [out, fan_in]
    Tensor* bias;            // null when the layer has none
    bool channels_first;     // conv output [B, C, H, W]; Linear output [..., out]
    Act act = Act::None;     // the activation applied to this layer's output
};

// Every Linear, Conv2d and DepthwiseConv2d in registration order, with the activation that follows
// it in this project's models (MLP.fc1, GAU.hidden, ConvMixer's convs).
std::vector<Layer> linear_conv_layers(nn::Module& model) {
    std::map<const nn::Module*, Act> follows;
    for (auto& [path, m] : model.named_modules()) {
        if (auto* mlp = dynamic_cast<nn::MLP*>(m)) follows[mlp->fc1.get()] = from_model(mlp->act);
        if (auto* gau = dynamic_cast<nn::GAU*>(m)) follows[gau->hidden.get()] = Act::SiLU;
        if (auto* cm = dynamic_cast<nn::ConvMixer*>(m)) follows[cm->stem.get()] = Act::GELU;
        if (auto* b = dynamic_cast<nn::ConvMixerBlock*>(m)) {
            follows[b->spatial.get()] = Act::GELU;
            follows[b->pointwise.get()] = Act::GELU;
        }
    }
    std::vector<Layer> out;
    auto add = [&](const std::string& path, nn::Module* m, Tensor& w, Tensor& b, bool conv) {
        Act a = follows.count(m) ? follows[m] : Act::None;
        out.push_back({path, m, &w, b.defined() ? &b : nullptr, conv, a});
    };
    for (auto& [path, m] : model.named_modules()) {
        if (auto* l = dynamic_cast<nn::Linear*>(m)) add(path, m, l->weight, l->bias, false);
        if (auto* c = dynamic_cast<nn::Conv2d*>(m)) add(path, m, c->weight, c->bias, true);
        if (auto* c = dynamic_cast<nn::DepthwiseConv2d*>(m)) add(path, m, c->weight, c->bias, true);
    }
    return out;
}

void require_data(const char* scheme, const nn::Module& model, const InitData* data) {
    check(data != nullptr && data->forward != nullptr,
          "{}: model {}: needs InitData (a batch of training data to run the model on)", scheme, model.type_name());
}

// For the lifetime of a session: our forward hooks on the modules we observe, and the model in eval
// mode (no dropout) except its BatchNorm layers, which normalize with the batch's statistics as in
// training. Afterwards the previous hooks, the training flag and the BatchNorm running statistics
// (which those passes update) come back, also when a pass throws.
class Session {
public:
    Session(nn::Module& model, const InitData& data) : model_(model), data_(data), was_training_(model.is_training()) {
        model.eval();
        for (auto& [path, m] : model.named_modules())
            if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(m)) {
                bn->train(true);
                running_.push_back({&bn->running_mean, bn->running_mean.clone()});
                running_.push_back({&bn->running_var, bn->running_var.clone()});
            }
    }
    ~Session() {
        for (auto& [m, hook] : saved_) m->forward_hook = hook;
        for (auto& [t, copy] : running_) std::memcpy(t->data_f32(), copy.data_f32(), sizeof(float) * copy.numel());
        model_.train(was_training_);
    }
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    void hook(nn::Module* m, std::function<void(const Tensor&)> fn) {
        if (!saved_.count(m)) saved_[m] = m->forward_hook;
        m->forward_hook = [fn](const nn::Module&, const Tensor& out) { fn(out); };
    }
    void pass() {
        engine::NoGrad ng;
        data_.forward();
    }

private:
    nn::Module& model_;
    const InitData& data_;
    bool was_training_;
    std::map<nn::Module*, std::function<void(const nn::Module&, const Tensor&)>> saved_;
    std::vector<std::pair<Tensor*, Tensor>> running_;
};

// Orthonormal weights (the weight viewed as [out, fan_in], as torch's orthogonal_) and zero biases.
void orthonormalize(const std::vector<Layer>& layers) {
    engine::NoGrad ng;
    for (const Layer& l : layers) {
        Tensor& w = *l.weight;
        Tensor q = orthogonal_matrix(w.size(0), w.numel() / w.size(0), 1.f);
        std::memcpy(w.data_f32(), q.data_f32(), sizeof(float) * w.numel());
        if (l.bias) std::memset(l.bias->data_f32(), 0, sizeof(float) * l.bias->numel());
    }
}

// A layer output as units × samples: unit j's values, wherever they sit in the tensor.
struct UnitView {
    float* data;
    int64_t units, outer, inner;  // element (o, j, i) at data[(o·units + j)·inner + i]
    int64_t samples() const { return outer * inner; }
    float& at(int64_t j, int64_t s) const { return data[((s / inner) * units + j) * inner + s % inner]; }
};

UnitView unit_view(const Tensor& out, bool channels_first) {
    if (channels_first) {
        check(out.ndim() >= 2, "init: conv output {} is not [B, C, ...]", out.shape().str());
        int64_t c = out.size(1);
        return {out.data_f32(), c, out.size(0), out.numel() / (out.size(0) * c)};
    }
    int64_t u = out.size(-1);
    return {out.data_f32(), u, out.numel() / u, 1};
}

double std_of_all(const Tensor& t) {
    const float* p = t.data_f32();
    int64_t n = t.numel();
    double mean = 0, sq = 0;
    for (int64_t i = 0; i < n; i++) mean += p[i];
    mean /= n;
    for (int64_t i = 0; i < n; i++) sq += (p[i] - mean) * (p[i] - mean);
    return n > 1 ? std::sqrt(sq / (n - 1)) : 0;
}

// Scales unit j's weight row and bias by c.
void scale_unit(const Layer& l, int64_t j, float c) {
    Tensor& w = *l.weight;
    int64_t fan = w.numel() / w.size(0);
    float* row = w.data_f32() + j * fan;
    for (int64_t i = 0; i < fan; i++) row[i] *= c;
    if (l.bias) l.bias->data_f32()[j] *= c;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// LSUV

void lsuv_init(nn::Module& model, const Options& opt, const InitData* data, Report& report) {
    const char* name = "lsuv";
    require_data(name, model, data);
    std::vector<Layer> layers = linear_conv_layers(model);
    check(!layers.empty(), "{}: model {} has no Linear or Conv layer", name, model.type_name());
    check(opt.lsuv_max_iters >= 1 && opt.lsuv_tol > 0.f, "{}: lsuv_max_iters {} and lsuv_tol {} must be positive",
          name, opt.lsuv_max_iters, opt.lsuv_tol);
    orthonormalize(layers);

    Session session(model, *data);
    std::vector<double> stds(layers.size());
    std::vector<char> seen(layers.size());
    int changed = 0;
    bool rescale = true;
    for (size_t i = 0; i < layers.size(); i++)
        session.hook(layers[i].module, [&, i](const Tensor& out) {
            if (seen[i]) return;  // a layer used twice already has its final weights
            seen[i] = 1;
            double s = std_of_all(out);
            stds[i] = s;
            if (!rescale || s <= 0 || std::fabs(s - 1) <= opt.lsuv_tol) return;
            float f = (float)(1 / s);
            scale_inplace(*layers[i].weight, f);
            if (layers[i].bias) scale_inplace(*layers[i].bias, f);
            float* p = out.data_f32();  // what the rescaled layer now outputs
            for (int64_t e = 0; e < out.numel(); e++) p[e] *= f;
            changed++;
        });

    int rounds = 0;  // passes that rescaled some layer
    for (int pass = 0; pass < opt.lsuv_max_iters; pass++) {
        std::fill(seen.begin(), seen.end(), 0);
        changed = 0;
        session.pass();
        if (changed == 0) break;  // every layer within tolerance: this pass measured the result
        rounds++;
    }
    if (changed != 0) {  // out of rounds: measure what we have
        rescale = false;
        std::fill(seen.begin(), seen.end(), 0);
        session.pass();
    }
    double worst = 0;
    int reached = 0;
    for (size_t i = 0; i < layers.size(); i++)
        if (seen[i]) worst = std::max(worst, std::fabs(stds[i] - 1)), reached++;
    report.say(fmt::format("lsuv: {} Linear/Conv layers orthonormal, then scaled to output std 1 on {} samples: "
                           "{} rescaling round{}, max |std - 1| = {:.2e} (tolerance {:g}){}",
                           layers.size(), data->samples, rounds, rounds == 1 ? "" : "s", worst, opt.lsuv_tol,
                           reached < (int)layers.size()
                               ? fmt::format("; {} layers not reached by the forward pass", layers.size() - reached)
                               : ""));
    report.figures["lsuv.max_std_error"] = worst;
    report.figures["lsuv.layers"] = reached;
    report.figures["lsuv.rounds"] = rounds;
}

// ---------------------------------------------------------------------------------------------
// relu-quantile

namespace {

// Population std of act(c·z_i).
double post_std(const std::vector<float>& z, double c, Act a) {
    double mean = 0, sq = 0;
    for (float v : z) mean += activate(a, c * v);
    mean /= (double)z.size();
    for (float v : z) {
        double y = activate(a, c * v) - mean;
        sq += y * y;
    }
    return std::sqrt(sq / (double)z.size());
}

// c > 0 with std(act(c·z)) = goal: secant steps on log std against log c (exact in one step for
// ReLU, where std is proportional to c; ReLU² has slope 2; GELU and SiLU lie in between).
double solve_scale(const std::vector<float>& z, Act a, double goal) {
    double lc = 0, ls = std::log(post_std(z, 1.0, a)), slope = a == Act::ReLU2 ? 2 : 1;
    if (!std::isfinite(ls)) return 1;  // constant output: nothing to scale
    for (int it = 0; it < 60 && std::fabs(std::log(goal) - ls) > 1e-7; it++) {
        double lc2 = lc + (std::log(goal) - ls) / slope, ls2 = std::log(post_std(z, std::exp(lc2), a));
        if (!std::isfinite(ls2)) break;
        double s = (ls2 - ls) / (lc2 - lc);
        if (std::isfinite(s) && std::fabs(lc2 - lc) > 1e-9) slope = std::clamp(s, 0.25, 4.0);
        lc = lc2, ls = ls2;
    }
    return std::exp(lc);
}

}  // namespace

void relu_quantile_init(nn::Module& model, const Options& opt, const InitData* data, Report& report) {
    const char* name = "relu-quantile";
    require_data(name, model, data);
    check(opt.act_prob > 0.f && opt.act_prob < 1.f && opt.goal_std > 0.f,
          "{}: act_prob {} must be in (0, 1) and goal_std {} positive", name, opt.act_prob, opt.goal_std);
    std::vector<Layer> layers = linear_conv_layers(model);
    std::vector<size_t> adapted;
    std::vector<std::string> no_bias;
    for (size_t i = 0; i < layers.size(); i++) {
        if (layers[i].act == Act::None) continue;
        if (layers[i].bias) adapted.push_back(i);
        else no_bias.push_back(layers[i].name);
    }
    check(!adapted.empty(), "{}: model {} has no Linear/Conv layer with a bias followed by ReLU/GELU/SiLU", name,
          model.type_name());
    orthonormalize(layers);

    const double f = opt.act_prob, g = opt.goal_std;
    Session session(model, *data);
    bool fit = true;
    double worst_active = 0, worst_std = 0;
    int64_t units = 0, min_samples = std::numeric_limits<int64_t>::max();
    std::vector<char> seen(layers.size());
    for (size_t i : adapted)
        session.hook(layers[i].module, [&, i](const Tensor& out) {
            if (seen[i]) return;
            seen[i] = 1;
            const Layer& l = layers[i];
            UnitView v = unit_view(out, l.channels_first);
            int64_t r = v.samples();
            if (!fit) {  // measure: active fraction and post-activation std per unit
                for (int64_t j = 0; j < v.units; j++) {
                    std::vector<float> z(r);
                    int64_t active = 0;
                    for (int64_t s = 0; s < r; s++) active += (z[s] = v.at(j, s)) > 0;
                    worst_active = std::max(worst_active, std::fabs((double)active / r - f));
                    worst_std = std::max(worst_std, std::fabs(post_std(z, 1.0, l.act) / g - 1));
                }
                units += v.units;
                min_samples = std::min(min_samples, r);
                return;
            }
            engine::NoGrad ng;
            #pragma omp parallel for
            for (int64_t j = 0; j < v.units; j++) {
                std::vector<float> h(r), sorted;
                for (int64_t s = 0; s < r; s++) h[s] = v.at(j, s);
                // v_j: the value at ⌊r − f·r⌋ of the sorted pre-activations. Halfway to the next value,
                // so the unit sitting at the quantile does not land exactly on 0, where rounding would
                // decide whether it is active.
                int64_t at = std::clamp<int64_t>((int64_t)std::floor(r - f * r), 0, r - 1);
                sorted = h;
                std::nth_element(sorted.begin(), sorted.begin() + at, sorted.end());
                double q = sorted[at];
                if (at + 1 < r) q = 0.5 * (q + *std::min_element(sorted.begin() + at + 1, sorted.end()));
                std::vector<float> z(r);
                for (int64_t s = 0; s < r; s++) z[s] = (float)(h[s] - q);
                double c = solve_scale(z, l.act, g);
                scale_unit(l, j, (float)c);
                l.bias->data_f32()[j] = (float)(-q * c);
                for (int64_t s = 0; s < r; s++) v.at(j, s) = (float)(c * z[s]);  // the layer's new output
            }
        });
    session.pass();
    fit = false;
    std::fill(seen.begin(), seen.end(), 0);
    session.pass();

    std::string which;
    for (size_t i : adapted)
        which += fmt::format("{}{} ({})", which.empty() ? "" : ", ", layers[i].name, act_name(layers[i].act));
    report.say(fmt::format("relu-quantile: {} Linear/Conv layers orthonormal, zero bias; on {} samples, per unit of "
                           "{}: bias at the {:g} quantile (active fraction {:g}), post-activation std {:g}",
                           layers.size(), data->samples, which, 1 - f, f, g));
    report.say(fmt::format("relu-quantile: measured over {} units: max |active fraction - {:g}| = {:.2e} (1/n = "
                           "{:.2e}), max relative |std - {:g}| = {:.2e}",
                           units, f, worst_active, 1.0 / (double)min_samples, g, worst_std));
    if (!no_bias.empty())
        report.say(fmt::format("relu-quantile: skipped (no bias to shift): {}", fmt::join(no_bias, ", ")));
    report.figures["relu_quantile.layers"] = (double)adapted.size();
    report.figures["relu_quantile.max_active_error"] = worst_active;
    report.figures["relu_quantile.max_std_error"] = worst_std;
}

// ---------------------------------------------------------------------------------------------
// attn-logits

void attn_logits_init(nn::Module& model, const Options&, const InitData* data, Report&) {
    require_data("attn-logits", model, data);
    engine::fail("attn-logits: model {}: not implemented yet", model.type_name());
}

}  // namespace init
