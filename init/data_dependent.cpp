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
#include <regex>
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
    void gather(int64_t j, float* dst) const {  // unit j's samples, in order
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) *dst++ = data[(o * units + j) * inner + i];
    }
    void scatter(int64_t j, const float* src) const {
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) data[(o * units + j) * inner + i] = *src++;
    }
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
    bool composed = opt.after_other_scheme;  // rescale the earlier scheme's weights, keep their structure
    if (!composed) orthonormalize(layers);

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
    report.say(fmt::format("lsuv: {} Linear/Conv layers {}, then scaled to output std 1 on {} samples: "
                           "{} rescaling round{}, max |std - 1| = {:.2e} (tolerance {:g}){}",
                           layers.size(), composed ? "as the previous schemes left them" : "orthonormal",
                           data->samples, rounds, rounds == 1 ? "" : "s", worst, opt.lsuv_tol,
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

// Population std of act(c·z_i), one pass (shifted by act(0) = 0; the values are O(1)).
double post_std(const std::vector<float>& z, double c, Act a) {
    double sum = 0, sq = 0;
    for (float v : z) {
        double y = activate(a, c * v);
        sum += y, sq += y * y;
    }
    double n = (double)z.size(), mean = sum / n;
    return std::sqrt(std::max(sq / n - mean * mean, 0.0));
}

// c > 0 with std(act(c·z)) = goal: secant steps on log std against log c (exact in one step for
// ReLU, where std is proportional to c; ReLU² has slope 2; GELU and SiLU lie in between).
double solve_scale(const std::vector<float>& z, Act a, double goal) {
    double lc = 0, ls = std::log(post_std(z, 1.0, a)), slope = a == Act::ReLU2 ? 2 : 1;
    if (!std::isfinite(ls)) return 1;  // constant output: nothing to scale
    for (int it = 0; it < 30 && std::fabs(std::log(goal) - ls) > 1e-6; it++) {
        double lc2 = lc + (std::log(goal) - ls) / slope, ls2 = std::log(post_std(z, std::exp(lc2), a));
        if (!std::isfinite(ls2)) break;
        double s = (ls2 - ls) / (lc2 - lc);
        if (std::isfinite(s) && std::fabs(lc2 - lc) > 1e-9) slope = std::clamp(s, 0.25, 4.0);
        lc = lc2, ls = ls2;
    }
    return std::exp(lc);
}

// The output layer as Aguirre & Fuentes' Scheme 4: W = pinv(X)·T, the least-squares read-out of
// the features alone, with T = +logit for each row's label and −logit for the other classes; then,
// when the layer has a bias, b = mean(T) − mean(X·W) over the init batch (after W, not fitted
// jointly with it: with features of non-zero mean the two differ). The classifier starts at the
// best linear read-out of the features the hidden layers now make.
// `name` is the scheme that fits it (its messages and figures: relu_quantile.output_*, ...).
void fit_output_layer(const std::string& scheme, nn::Linear& head, const Tensor& input, const Tensor& labels,
                      const Options& opt, Report& report) {
    const char* name = scheme.c_str();
    const float logit = opt.output_logit, ridge = opt.output_ridge;
    check(ridge >= 0.f, "{}: --output-ridge {} must be >= 0", name, ridge);
    const int64_t d = head.weight.size(1), classes = head.weight.size(0);
    check(input.numel() % d == 0, "{}: the output layer's input {} does not end in {}", name, input.shape().str(), d);
    const int64_t rows = input.numel() / d;
    check(labels.dtype() == engine::DType::I32 && labels.numel() == rows,
          "{}: {} labels ({}) for {} rows the output layer sees; one int32 label per row needed", name,
          labels.numel(), engine::dtype_name(labels.dtype()), rows);
    const bool bias = head.bias.defined();
    Tensor a = input.reshape({rows, d}), t = Tensor::full({rows, classes}, -logit);
    const int32_t* y = labels.data_i32();
    float* pt = t.data_f32();
    for (int64_t r = 0; r < rows; r++) {
        check(y[r] >= 0 && y[r] < classes, "{}: label {} of row {} is not a class of the {}-way output layer", name,
              y[r], r, classes);
        pt[r * classes + y[r]] = logit;
    }
    // [d, classes]: pinv(X)·T; with the ridge, the least-squares solution of X over √(ridge·rows)·I
    // against T over 0, whose normal equations are (XᵀX + ridge·rows·I)·W = XᵀT.
    Tensor sol;
    if (ridge > 0.f) {
        Tensor penalty = Tensor::zeros({d, d});
        for (int64_t k = 0; k < d; k++) penalty.data_f32()[k * d + k] = std::sqrt(ridge * (float)rows);
        sol = engine::lstsq(engine::concat({a, penalty}, 0), engine::concat({t, Tensor::zeros({d, classes})}, 0));
    } else {
        sol = engine::lstsq(a, t);
    }
    Tensor fitted = engine::matmul(a, sol);      // [rows, classes]: X·W
    const float* s = sol.data_f32();
    float* w = head.weight.data_f32();
    float* z = fitted.data_f32();
    for (int64_t c = 0; c < classes; c++) {
        for (int64_t k = 0; k < d; k++) w[c * d + k] = s[k * classes + c];
        if (!bias) continue;
        double gap = 0;  // mean(T) − mean(X·W) for this class
        for (int64_t r = 0; r < rows; r++) gap += (double)pt[r * classes + c] - z[r * classes + c];
        const float b = (float)(gap / (double)rows);
        head.bias.data_f32()[c] = b;
        for (int64_t r = 0; r < rows; r++) z[r * classes + c] += b;  // the read-out with its bias
    }
    // How well the fitted read-out does on the batch it was fitted to.
    double sq = 0;
    int64_t hits = 0;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < classes; c++) sq += std::pow((double)z[r * classes + c] - pt[r * classes + c], 2);
        hits += std::max_element(z + r * classes, z + (r + 1) * classes) - (z + r * classes) == y[r];
    }
    double rms = std::sqrt(sq / (double)(rows * classes)), acc = (double)hits / (double)rows;
    // The fitted weights' size follows how the features vary from row to row: the fewer directions
    // they vary in, the larger the weights along the weak ones. Over the feature columns: the rms of
    // each column's std across the rows and the rms of the column means; and the effective rank
    // (tr C)²/‖C‖²_F of the features' covariance C (d when they vary alike in every direction, 1 in one).
    Tensor means = engine::mean(a, {0}, true);
    Tensor centered = engine::sub(a, means);
    Tensor cov = engine::matmul(centered, centered, true, false);  // rows·C, [d, d]
    const float* c = cov.data_f32();
    double spread = 0, common = 0, cov2 = 0, w2 = 0;
    for (int64_t k = 0; k < d; k++) {
        spread += c[k * d + k] / (double)rows / (double)d;
        common += std::pow((double)means.data_f32()[k], 2) / (double)d;
    }
    for (int64_t i = 0; i < d * d; i++) cov2 += std::pow((double)c[i] / (double)rows, 2);
    const double effective_rank = cov2 > 0 ? spread * spread * (double)(d * d) / cov2 : 0;
    spread = std::sqrt(spread), common = std::sqrt(common);
    for (int64_t i = 0; i < classes * d; i++) w2 += (double)w[i] * w[i];
    report.say(fmt::format("{}: output layer{} by least squares{} to logits ±{:g} on {} rows: rms residual {:.3f}, "
                           "init-batch accuracy {:.1f}%, weight norm {:.3g}; its input features: std across rows "
                           "{:.3g}, mean {:.3g} (rms over columns), effective rank {:.1f} of {}",
                           name, bias ? "" : " (no bias)", ridge > 0 ? fmt::format(" (ridge {:g})", ridge) : "", logit,
                           rows, rms, 100 * acc, std::sqrt(w2), spread,
                           common, effective_rank, d));
    const std::string prefix = std::regex_replace(scheme, std::regex("-"), "_");
    report.figures[prefix + ".output_rms_residual"] = rms;
    report.figures[prefix + ".output_batch_acc"] = acc;
    report.figures[prefix + ".output_weight_norm"] = std::sqrt(w2);
    report.figures[prefix + ".feature_std"] = spread;
    report.figures[prefix + ".feature_mean"] = common;
    report.figures[prefix + ".feature_effective_rank"] = effective_rank;
}

// The model's output layer: its Linear "head" (LMs that tie it to the embedding have none).
nn::Linear* output_layer(nn::Module& model) {
    for (auto& [path, m] : model.named_modules())
        if (path == "head") return dynamic_cast<nn::Linear*>(m);
    return nullptr;
}

// Runs one pass of the session and returns the input `head` saw (the init batch's features).
Tensor head_input(Session& session, nn::Linear& head) {
    Tensor seen;
    head.input_hook = [&](const nn::Module&, const Tensor& x) {
        if (!seen.defined()) seen = x.detach().clone();
    };
    try {
        session.pass();
    } catch (...) {
        head.input_hook = nullptr;
        throw;
    }
    head.input_hook = nullptr;
    return seen;
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
    bool composed = opt.after_other_scheme;  // leave the layers we do not adapt alone
    if (composed) {
        std::vector<Layer> own;
        for (size_t i : adapted) own.push_back(layers[i]);
        orthonormalize(own);
    } else {
        orthonormalize(layers);
    }

    const double f = opt.act_prob, g = opt.goal_std;
    Session session(model, *data);
    bool fit = true;
    double active_lo = 1, active_hi = 0, std_lo = HUGE_VAL, std_hi = 0;  // over every adapted unit
    int64_t units = 0, min_samples = std::numeric_limits<int64_t>::max();
    std::vector<char> seen(layers.size());
    for (size_t i : adapted)
        session.hook(layers[i].module, [&, i](const Tensor& out) {
            if (seen[i]) return;
            seen[i] = 1;
            const Layer& l = layers[i];
            UnitView v = unit_view(out, l.channels_first);
            int64_t r = v.samples();
            check(r >= 2, "{}: layer {} has {} sample(s) per unit on the init batch; a quantile needs more", name,
                  l.name, r);
            if (!fit) {  // measure: active fraction and post-activation std per unit
                for (int64_t j = 0; j < v.units; j++) {
                    std::vector<float> z(r);
                    v.gather(j, z.data());
                    int64_t active = 0;
                    for (float x : z) active += x > 0;
                    const double fraction = (double)active / r, sd = post_std(z, 1.0, l.act);
                    active_lo = std::min(active_lo, fraction), active_hi = std::max(active_hi, fraction);
                    std_lo = std::min(std_lo, sd), std_hi = std::max(std_hi, sd);
                }
                units += v.units;
                min_samples = std::min(min_samples, r);
                return;
            }
            engine::NoGrad ng;
            #pragma omp parallel for
            for (int64_t j = 0; j < v.units; j++) {
                std::vector<float> h(r), sorted;
                v.gather(j, h.data());
                // v_j: the (1 − f) quantile of the pre-activations, halfway between the sorted values
                // at `at` − 1 and `at` = r − round(f·r), so that exactly round(f·r) of them are positive
                // (the paper's index ⌊r − f·r⌋ leaves ⌈f·r⌉ − 1, and its unit at exactly 0) and a
                // value at the quantile does not sit on 0, where rounding would decide.
                double q = 0;
                if (opt.rq_bias) {
                    int64_t at = std::clamp<int64_t>(r - (int64_t)std::llround(f * r), 1, r - 1);
                    sorted = h;
                    std::nth_element(sorted.begin(), sorted.begin() + at, sorted.end());
                    q = 0.5 * (sorted[at] + *std::max_element(sorted.begin(), sorted.begin() + at));
                }
                std::vector<float> z(r);
                for (int64_t s = 0; s < r; s++) z[s] = (float)(h[s] - q);
                double c = opt.rq_scale ? solve_scale(z, l.act, g) : 1.0;
                scale_unit(l, j, (float)c);
                l.bias->data_f32()[j] = (float)(-q * c);
                for (int64_t s = 0; s < r; s++) z[s] = (float)(c * z[s]);
                v.scatter(j, z.data());  // what the layer now outputs
            }
        });
    session.pass();
    fit = false;
    std::fill(seen.begin(), seen.end(), 0);
    // The output layer (the model's Linear "head"; LMs that tie it to the embedding have none)
    // sees, in the measuring pass, the features of the fitted hidden layers.
    nn::Linear* head = output_layer(model);
    bool fit_output = opt.output_logit > 0 && head && data->labels.defined();
    Tensor features;
    if (fit_output) features = head_input(session, *head);
    else session.pass();

    // "blocks.*.mlp.fc1 (GELU) x12": the adapted layers, grouped over their indices.
    std::vector<std::pair<std::string, int>> groups;
    for (size_t i : adapted) {
        std::string key = std::regex_replace(layers[i].name, std::regex("\\.[0-9]+\\."), ".*.") +
                          fmt::format(" ({})", act_name(layers[i].act));
        auto it = std::find_if(groups.begin(), groups.end(), [&](auto& g) { return g.first == key; });
        if (it == groups.end()) groups.push_back({key, 1});
        else it->second++;
    }
    std::string which;
    for (auto& [key, count] : groups)
        which += fmt::format("{}{}{}", which.empty() ? "" : ", ", key, count > 1 ? fmt::format(" x{}", count) : "");
    report.say(fmt::format("relu-quantile: {} Linear/Conv layers orthonormal, zero bias; on {} samples, per unit of "
                           "{}: {}, {}",
                           composed ? adapted.size() : layers.size(), data->samples, which,
                           opt.rq_bias ? fmt::format("bias at the {:g} quantile (active fraction {:g})", 1 - f, f)
                                       : "bias left at 0 (ablation: no quantile bias)",
                           opt.rq_scale ? fmt::format("post-activation std {:g}", g)
                                        : "scale left as orthonormal (ablation: no std scaling)"));
    const double worst_active = std::max(std::fabs(active_lo - f), std::fabs(active_hi - f));
    const double worst_std = std::max(std::fabs(std_lo / g - 1), std::fabs(std_hi / g - 1));
    if (opt.rq_bias && opt.rq_scale)
        report.say(fmt::format("relu-quantile: measured over {} units: max |active fraction - {:g}| = {:.2e} (1/n = "
                               "{:.2e}), max relative |std - {:g}| = {:.2e}",
                               units, f, worst_active, 1.0 / (double)min_samples, g, worst_std));
    else
        report.say(fmt::format("relu-quantile: measured over {} units: active fraction {:.3f} to {:.3f}, "
                               "post-activation std {:.3g} to {:.3g}",
                               units, active_lo, active_hi, std_lo, std_hi));
    if (!no_bias.empty())
        report.say(fmt::format("relu-quantile: skipped (no bias to shift): {}", fmt::join(no_bias, ", ")));
    if (fit_output) fit_output_layer(name, *head, features, data->labels, opt, report);
    if (opt.output_logit > 0 && !fit_output)
        report.say(head ? "relu-quantile: output layer left as it was: the init batch has no labels"
                        : "relu-quantile: output layer left as it was: the model has no separate Linear 'head'");
    report.figures["relu_quantile.layers"] = (double)adapted.size();
    if (opt.rq_bias) report.figures["relu_quantile.max_active_error"] = worst_active;
    if (opt.rq_scale) report.figures["relu_quantile.max_std_error"] = worst_std;
    report.figures["relu_quantile.min_active"] = active_lo;
    report.figures["relu_quantile.max_active"] = active_hi;
    report.figures["relu_quantile.min_post_std"] = std_lo;
    report.figures["relu_quantile.max_post_std"] = std_hi;
}

// ---------------------------------------------------------------------------------------------
// output-fit

void output_fit_init(nn::Module& model, const Options& opt, const InitData* data, Report& report) {
    const char* name = "output-fit";
    require_data(name, model, data);
    nn::Linear* head = output_layer(model);
    check(head != nullptr, "{}: model {} has no separate Linear 'head' to fit (a language model ties its output "
          "layer to the embedding unless --untied)", name, model.type_name());
    check(data->labels.defined(), "{}: model {}: the init batch has no labels to fit the output layer to", name,
          model.type_name());
    check(opt.output_logit > 0, "{}: --output-logit is {}; it must be positive (the target logits ±it)", name,
          opt.output_logit);
    Session session(model, *data);
    Tensor features = head_input(session, *head);
    check(features.defined(), "{}: model {}: the init batch's forward pass did not reach the output layer 'head'",
          name, model.type_name());
    fit_output_layer(name, *head, features, data->labels, opt, report);
}

// ---------------------------------------------------------------------------------------------
// attn-logits

double TokenGeometry::distance(int64_t i, int64_t j) const {
    if (grid <= 0) return std::fabs((double)(i - j));
    if (class_token) {
        if (i == 0 || j == 0) return 0;  // the class token is next to every patch
        i--, j--;
    }
    double dr = (double)(i / grid - j / grid), dc = (double)(i % grid - j % grid);
    return std::sqrt(dr * dr + dc * dc);
}

Tensor attn_logit_targets(const TokenGeometry& geo, int64_t T, int64_t layer, int64_t layers, int64_t head,
                          int64_t heads) {
    check(T > 0 && layer >= 0 && layer < layers && head >= 0 && head < heads,
          "attn_logit_targets: T {}, layer {} of {}, head {} of {}", T, layer, layers, head, heads);
    if (geo.grid > 0)
        check(T == geo.grid * geo.grid + (geo.class_token ? 1 : 0), "attn_logit_targets: {} tokens for a {}x{} grid{}",
              T, geo.grid, geo.grid, geo.class_token ? " and a class token" : "");
    double depth = layers > 1 ? (double)layer / (layers - 1) : 0, width = heads > 1 ? (double)head / (heads - 1) : 0;
    double a = 4 * (1 - depth), span = geo.grid > 0 ? (double)geo.grid : (double)T;
    double sigma = 1 + width * span / 4, noise_std = 0.05 + 0.1 * a;
    Tensor l = Tensor::normal({T, T});
    float* p = l.data_f32();
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++) {
            double d = geo.distance(i, j);
            p[i * T + j] = (float)(a * std::exp(-d * d / (2 * sigma * sigma)) + noise_std * p[i * T + j]);
        }
    return l;
}

namespace {

double dot(const Tensor& a, const Tensor& b) {
    const float *pa = a.data_f32(), *pb = b.data_f32();
    double s = 0;
    for (int64_t i = 0; i < a.numel(); i++) s += (double)pa[i] * pb[i];
    return s;
}

// The least-squares problem min_W Σ_b ‖X_b·W·K_bᵀ/√k − L‖² and its normal equations
// A(W) = Σ_b X_bᵀX_b·W·K_bᵀK_b = C with C = √k·Σ_b X_bᵀ·L·K_b, everything through batched GEMMs.
struct LogitProblem {
    Tensor X, xf, H, C;  // X [B, T, d], xf [B·T, d], H = K_bᵀK_b [B, k, k], C [d, k]
    double k, target_sq;  // k; B·‖L‖²

    LogitProblem(const Tensor& x, const Tensor& k_rows, const Tensor& L) : X(x) {
        int64_t B = X.size(0), T = X.size(1), d = X.size(2), kk = k_rows.size(0);
        k = (double)kk;
        xf = X.reshape({B * T, d});
        Tensor K = engine::matmul(X, k_rows, false, true);  // [B, T, k]
        H = engine::matmul(K, K, true, false);
        C = engine::mul(engine::matmul(xf, engine::matmul(L, K).reshape({B * T, kk}), true, false),
                        (float)std::sqrt(k));
        target_sq = (double)B * dot(L, L);
    }
    Tensor apply(const Tensor& W) const {
        Tensor xw = engine::matmul(X, W);  // [B, T, k]
        return engine::matmul(xf, engine::matmul(xw, H).reshape({xf.size(0), W.size(1)}), true, false);
    }
    // ‖S − L‖² = ‖S‖² − 2⟨S, L⟩ + ‖L‖² with ‖S‖² = ⟨A(W), W⟩/k and ⟨S, L⟩ = ⟨W, C⟩/k: the [B, T, T]
    // logits are never formed.
    double relative_residual(const Tensor& W) const {
        double sq = (dot(apply(W), W) - 2 * dot(W, C)) / k + target_sq;
        return std::sqrt(std::max(sq, 0.0) / target_sq);
    }
};

}  // namespace

QueryFit fit_queries(const Tensor& X, const Tensor& k_rows, const Tensor& target, const Tensor& baseline_q_rows) {
    const char* op = "fit_queries";
    check(X.ndim() == 3 && k_rows.ndim() == 2 && k_rows.size(1) == X.size(2) &&
              target.shape() == engine::Shape({X.size(1), X.size(1)}),
          "{}: X {}, k rows {}, target {} are not [B, T, d], [k, d], [T, T]", op, X.shape().str(),
          k_rows.shape().str(), target.shape().str());
    engine::NoGrad ng;
    LogitProblem lp(X, k_rows, target);
    // Preconditioner: A with every sample's Gram matrices replaced by their batch sums/means,
    // (Σ_b X_bᵀX_b)⁺·R·(mean_b K_bᵀK_b)⁺; exact when the samples are alike, and for one sample
    // W = X⁺·L·√k·(K_bᵀ)⁺, the pseudo-inverse formula of the proposal. The pseudo-inverses drop the
    // direction LayerNorm's zero-mean rows leave empty, so W is the minimum-norm solution.
    Tensor g_pinv = engine::pinv(engine::matmul(lp.xf, lp.xf, true, false), 1e-6);
    Tensor h_pinv = engine::pinv(engine::mean(lp.H, {0}), 1e-6);
    auto precondition = [&](const Tensor& r) { return engine::matmul(engine::matmul(g_pinv, r), h_pinv); };
    // Conjugate gradients on the normal equations, from the preconditioner's solution.
    Tensor w = precondition(lp.C);
    Tensor r = engine::sub(lp.C, lp.apply(w)), z = precondition(r), p = z;
    double rz = dot(r, z), c_norm = std::sqrt(dot(lp.C, lp.C));
    int iters = 0;
    for (; iters < 100 && std::sqrt(dot(r, r)) > 1e-6 * c_norm; iters++) {
        Tensor ap = lp.apply(p);
        double pap = dot(p, ap);
        if (!(pap > 0)) break;
        double alpha = rz / pap;
        w = engine::add(w, engine::mul(p, (float)alpha));
        r = engine::sub(r, engine::mul(ap, (float)alpha));
        z = precondition(r);
        double rz_next = dot(r, z);
        p = engine::add(z, engine::mul(p, (float)(rz_next / rz)));
        rz = rz_next;
    }
    QueryFit fit;
    fit.q_rows = engine::transpose(w, 0, 1);  // [k, d]
    fit.residual = lp.relative_residual(w);
    fit.iterations = iters;
    if (baseline_q_rows.defined()) fit.baseline = lp.relative_residual(engine::transpose(baseline_q_rows, 0, 1));
    return fit;
}

void attn_logits_init(nn::Module& model, const Options&, const InitData* data, Report& report) {
    const char* name = "attn-logits";
    require_data(name, model, data);
    std::vector<nn::TransformerBlock*> blocks;
    for (auto& [path, m] : model.named_modules())
        if (auto* b = dynamic_cast<nn::TransformerBlock*>(m)) blocks.push_back(b);
    check(!blocks.empty(), "{}: model {} has no transformer blocks (multi-head attention after a LayerNorm)", name,
          model.type_name());
    for (auto* b : blocks)
        check(b->pre_norm, "{}: model {} is Post-LN: the attention input is not the output of norm1, so the fit "
                           "cannot observe it (use a Pre-LN model)", name, model.type_name());
    TokenGeometry geo;
    if (auto* vit = dynamic_cast<nn::ViT*>(&model)) geo = {vit->grid(), vit->cfg.pool == "cls"};

    // W_k orthonormal, q/k biases 0, in registration order (the draws do not depend on the data).
    {
        engine::NoGrad ng;
        for (auto* b : blocks) {
            nn::MultiHeadAttention& attn = *b->attn;
            Tensor q = orthogonal_matrix(attn.dim, attn.dim, 1.f);
            std::memcpy(attn.k->weight.data_f32(), q.data_f32(), sizeof(float) * q.numel());
            for (nn::Linear* l : {attn.q.get(), attn.k.get()})
                if (l->bias.defined()) std::memset(l->bias.data_f32(), 0, sizeof(float) * l->bias.numel());
        }
    }

    Session session(model, *data);
    int64_t layers = (int64_t)blocks.size();
    std::vector<double> residual(layers, NAN), baseline(layers, NAN);
    std::vector<char> seen(layers);
    for (int64_t li = 0; li < layers; li++) {
        nn::MultiHeadAttention* attn = blocks[li]->attn.get();
        session.hook(blocks[li]->norm1.get(), [&, li, attn](const Tensor& X) {
            if (seen[li]) return;
            seen[li] = 1;
            check(X.ndim() == 3 && X.size(2) == attn->dim, "{}: norm1 output {} is not [B, T, {}]", name,
                  X.shape().str(), attn->dim);
            double r2 = 0, b2 = 0;
            for (int64_t h = 0; h < attn->heads; h++) {
                Tensor target = attn_logit_targets(geo, X.size(1), li, layers, h, attn->heads);
                Tensor q_rows = attn->head_rows(attn->q->weight, h);
                QueryFit fit = fit_queries(X, attn->head_rows(attn->k->weight, h), target, q_rows.clone());
                std::memcpy(q_rows.data_f32(), fit.q_rows.data_f32(), sizeof(float) * q_rows.numel());
                r2 += fit.residual * fit.residual, b2 += fit.baseline * fit.baseline;
            }
            residual[li] = std::sqrt(r2 / attn->heads), baseline[li] = std::sqrt(b2 / attn->heads);
        });
    }
    session.pass();

    double mean_res = 0, mean_base = 0;
    int reached = 0;
    std::string per_layer;
    for (int64_t li = 0; li < layers; li++) {
        if (!seen[li]) continue;
        reached++;
        mean_res += residual[li], mean_base += baseline[li];
        per_layer += fmt::format("{}{:.3f}", per_layer.empty() ? "" : " ", residual[li]);
    }
    check(reached > 0, "{}: model {}: the init batch's forward pass reached no attention block", name,
          model.type_name());
    report.say(fmt::format("attn-logits: {} attention layers, W_k orthonormal, W_q by least squares on {} samples "
                           "against local-to-global target logits ({}): relative residual per layer {} (mean {:.3f}; "
                           "the previous W_q gave {:.3f})",
                           reached, data->samples, geo.grid > 0 ? fmt::format("{}x{} grid", geo.grid, geo.grid)
                                                                : std::string("token distance"),
                           per_layer, mean_res / reached, mean_base / reached));
    report.figures["attn_logits.residual"] = mean_res / reached;
    report.figures["attn_logits.baseline_residual"] = mean_base / reached;
    report.figures["attn_logits.layers"] = reached;
}

}  // namespace init
