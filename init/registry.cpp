// init/registry.cpp: the table of every initialization scheme (name, one-line summary, whether it
// needs an init batch, function) and apply(), which runs "a+b+c" left to right.
//
// The table is written out by hand, one line per scheme, so --help lists exactly what exists.
// "normal:STD" and "uniform:A" are the parameterized names: the registry parses the number into
// Options::normal_std / Options::uniform_bound.
#include <cerrno>
#include <cstdlib>
#include <fmt/format.h>
#include "engine/error.h"
#include "init/data_dependent.h"
#include "init/fixup.h"
#include "init/impulse.h"
#include "init/init.h"
#include "init/mimetic.h"
#include "init/smallemb.h"
#include "init/standard.h"

namespace init {

const std::vector<SchemeInfo>& schemes() {
    static const std::vector<SchemeInfo> table = {
        {"torch", "PyTorch defaults: Linear/Conv U(±1/√fan_in) weight and bias, Embedding N(0,1), LSTM U(±1/√H), "
                  "norms 1/0", false, torch_init},
        {"timm", "trunc-normal(0, 0.02) Linear weights, zero biases (the patch conv keeps PyTorch's default, as in "
                 "timm), norms 1/0, class token and learned PE trunc-normal 0.02 (the vision papers' baseline)",
         false, timm_init},
        {"xavier", "Glorot uniform U(±gain·√(6/(fan_in+fan_out))), zero biases", false, xavier_uniform_init},
        {"xavier-normal", "Glorot normal N(0, gain²·2/(fan_in+fan_out)), zero biases", false, xavier_normal_init},
        {"kaiming", "He normal, fan_in, ReLU gain: N(0, 2/fan_in), zero biases", false, kaiming_normal_init},
        {"kaiming-uniform", "He uniform, fan_in, ReLU gain: U(±√(6/fan_in)), zero biases", false,
         kaiming_uniform_init},
        {"kaiming-fan-out", "He normal, fan_out mode, ReLU gain: N(0, 2/fan_out), zero biases", false,
         kaiming_fan_out_init},
        {"lecun", "LeCun normal N(0, 1/fan_in), zero biases", false, lecun_normal_init},
        {"normal:STD", "N(0, STD²) weights (plain 'normal': 0.02), zero biases", false, normal_init},
        {"uniform:A", "U(±A) weights and biases (plain 'uniform': 0.1; Zaremba's LSTM init)", false, uniform_init},
        {"orthogonal", "orthogonal weights × gain (WᵀW = gain²·I), zero biases", false, orthogonal_init},
        {"mimetic", "Trockman & Kolter: per head W_qW_kᵀ = rank-k part of α₁Z+β₁I, per layer W_vW_proj = α₂Z−β₂I "
                    "(needs MultiHeadAttention)", false, mimetic_init},
        {"impulse3", "Zheng et al. (ECCV'24): per head Q/K fitted with Adam so attention is a random 3×3 impulse "
                     "filter on LN(sin-cos PE); needs average pooling", false,
         [](nn::Module& m, const Options& o, const InitData* d, Report& r) { impulse_init(m, o, d, r, 3); }},
        {"impulse5", "the same with offsets in a 5×5 window", false,
         [](nn::Module& m, const Options& o, const InitData* d, Report& r) { impulse_init(m, o, d, r, 5); }},
        {"impulse3-closed", "Zheng et al. (NeurIPS'25) closed form: truncated pseudo-inverse + rank-k SVD, factors "
                            "×7; V/proj mimetic 0.4/0.4; a learned PE then ×18 (their code's PE is learned)",
         false, impulse_closed_init},
        {"smallemb", "BlinkDL SmallInitEmb: token embedding U(±1e-4), learned PE 0; the model needs a LayerNorm "
                     "after the embedding", false, smallemb_init},
        {"lsuv", "Mishkin & Matas: orthonormal weights, then W ← W/std(output) layer by layer on the init batch "
                 "until |std−1| ≤ tol", true, lsuv_init},
        {"relu-quantile", "Aguirre & Fuentes: orthonormal; per unit bias at the (1−act_prob) quantile of its "
                          "pre-activations, then scaled to post-activation std goal_std", true, relu_quantile_init},
        {"output-fit", "the output layer alone by least squares to logits ±output_logit of the init batch's labels "
                       "(relu-quantile's last step; e.g. torch+output-fit)", true, output_fit_init},
        {"attn-logits", "Aguirre: W_k orthonormal, W_q by least squares so the init batch's logits match a "
                        "local-to-global target per head and layer", true, attn_logits_init},
        {"t-fixup", "Huang et al. 2020, encoder form: Xavier attention/MLP, then v/proj/MLP weights × 0.67·N^(-1/4); "
                    "a token embedding of std (9N)^(-1/4)", false, tfixup_init},
        {"zero-attn", "ZerO-style attention (Zhao et al.): W_q = 0, W_k = I per layer. LayerScale, the third "
                      "baseline, is a model option (--layerscale EPS), not a scheme", false, zero_attn_init},
    };
    return table;
}

static std::string trim(const std::string& s) {
    size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
    return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

static std::string valid_names() {
    std::string names;
    for (auto& s : schemes()) names += (names.empty() ? "" : ", ") + s.name;
    return names;
}

// For "base:NUMBER", the number (>= 0) into `value`; true when `name` is base or base:NUMBER.
static bool parameterized(const std::string& name, const std::string& base, const std::string& what,
                          const char* example, float& value) {
    if (name != base && name.rfind(base + ":", 0) != 0) return false;
    if (name == base) return true;
    std::string text = name.substr(base.size() + 1);
    char* end = nullptr;
    errno = 0;
    double v = std::strtod(text.c_str(), &end);
    engine::check(!text.empty() && end && *end == '\0' && errno == 0 && v >= 0 && v < 1e6,
                  "init: '{}': {} must be a number >= 0, e.g. {}", name, what, example);
    value = (float)v;
    return true;
}

// The scheme a name refers to; "normal:STD" and "uniform:A" also set their option.
static const SchemeInfo& lookup(const std::string& name, Options& opt) {
    std::string key = name;
    if (parameterized(name, "normal", "STD", "normal:0.02", opt.normal_std)) key = "normal:STD";
    if (parameterized(name, "uniform", "A", "uniform:0.05", opt.uniform_bound)) key = "uniform:A";
    for (auto& s : schemes())
        if (s.name == key) return s;
    engine::fail("init: unknown scheme '{}' (valid: {}; combine with '+', e.g. mimetic+smallemb)", name,
                 valid_names());
}

// The '+'-separated names of a spec, trimmed; empty parts are an error.
static std::vector<std::string> parts_of(const std::string& spec) {
    engine::check(!trim(spec).empty(), "init: empty scheme name (valid: {})", valid_names());
    std::vector<std::string> parts;
    size_t start = 0;
    while (true) {
        size_t plus = spec.find('+', start);
        std::string part = trim(spec.substr(start, plus == std::string::npos ? std::string::npos : plus - start));
        engine::check(!part.empty(), "init: '{}' has an empty part between '+' signs", spec);
        parts.push_back(part);
        if (plus == std::string::npos) return parts;
        start = plus + 1;
    }
}

void validate(const std::string& spec) {
    for (const std::string& part : parts_of(spec)) {
        Options opt;
        lookup(part, opt);
    }
}

bool needs_data(const std::string& spec) {
    for (const std::string& part : parts_of(spec)) {
        Options opt;
        if (lookup(part, opt).needs_data) return true;
    }
    return false;
}

Report apply(nn::Module& model, const std::string& spec, const Options& options, const InitData* data) {
    // Resolve every name first, so a typo in the last part fails before anything is written.
    std::vector<std::pair<const SchemeInfo*, Options>> steps;
    for (const std::string& part : parts_of(spec)) {
        Options opt = options;
        opt.after_other_scheme = !steps.empty();
        const SchemeInfo& info = lookup(part, opt);
        engine::check(!info.needs_data || (data && data->forward),
                      "init: scheme '{}' needs an init batch (data-dependent) and none was given", part);
        steps.push_back({&info, opt});
    }
    Report report;
    for (auto& [info, opt] : steps) info->fn(model, opt, data, report);
    return report;
}

}  // namespace init
