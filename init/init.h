// init/init.h: the initialization library's interface.
//
// A scheme is a function that rewrites a model's parameters in place, addressing them by their
// dotted names (nn/module.h), drawing every random number from engine::global_generator() (so
// --seed reproduces it). Schemes compose with '+', applied left to right: "mimetic+smallemb".
// A scheme that cannot apply to the model it is given (impulse on an LSTM, mimetic without
// attention) throws an engine::Error naming the scheme, the model and the reason.
//
// Data-dependent schemes (lsuv, relu-quantile, attn-logits) also need `InitData`: a callback that
// runs the model forward on the init batch (the caller knows the model's input), during which
// they observe layer outputs through Module::forward_hook.
//
// Every scheme writes a short report (what it did, and for the fitted ones the fit figures) to
// `Report`, which apps print and tests read.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>
#include "nn/module.h"

namespace init {

// Every option of every scheme, with the defaults of ../shared/specs/README.md.
struct Options {
    // normal:STD, and the std of timm's trunc-normal
    float normal_std = 0.02f;
    // uniform:A: U(±A) on every weight and bias (Zaremba et al.'s LSTM init; plain "uniform": 0.1)
    float uniform_bound = 0.1f;
    float gain = 1.f;  // xavier / kaiming / orthogonal gain
    // mimetic (Trockman & Kolter): W_qW_kᵀ ≈ α₁Z + β₁I per head, W_vW_proj ≈ α₂Z − β₂I per layer
    float mimetic_alpha1 = 0.7f, mimetic_beta1 = 0.7f, mimetic_alpha2 = 0.4f, mimetic_beta2 = 0.4f;
    std::string mimetic_noise = "normal";  // normal: Z ~ N(0, 1/d); uniform: U(±√(3/d)), same variance
    bool mimetic_qk = true, mimetic_vo = true;  // ablations: QK only, VO only
    // impulse (Zheng, Li, Lucey): Q/K fitted with Adam so softmax maps ≈ impulse filters
    int impulse_iters = 10000;
    float impulse_lr = 1e-4f;
    bool impulse_per_layer = false;
    // impulse3-closed: singular values of LN(PE) below closed_rcond × the largest are dropped
    // from its pseudo-inverse (on top of the authors' rank cap, the head dim)
    float closed_rcond = 1e-5f;
    // impulse3-closed: multiplies a learned position embedding after the solve (the authors'
    // norm_p, which makes the tokens' PE part large against the patches'; LN(PE) does not see it).
    // A fixed sin-cos PE is left alone: its scale is the model's --pe-scale.
    float closed_pe_scale = 18.f;
    // data-dependent
    int lsuv_max_iters = 10;
    float lsuv_tol = 0.1f;
    float act_prob = 0.8f;  // relu-quantile: fraction of units active on the init set
    float goal_std = 1.f;   // relu-quantile: post-activation std
    // relu-quantile ablations: without the quantile bias (biases 0: each unit active where its
    // orthonormal pre-activation is positive), without the per-unit scaling (c_j = 1)
    bool rq_bias = true, rq_scale = true;
    // relu-quantile and output-fit: the output layer ("head") by least squares to logits
    // +output_logit for the label and −output_logit elsewhere on the init batch (relu-quantile
    // with 0: leave the output layer alone; output-fit refuses 0)
    float output_logit = 2.f;
    // ... with a ridge penalty: W minimizes mean‖X·W − T‖² + output_ridge·‖W‖² (0: plain least
    // squares). It shrinks W along the directions the features hardly vary in.
    float output_ridge = 0.f;
    // Set by apply() for every scheme after the first in "a+b": schemes that would otherwise
    // replace all weights (lsuv, relu-quantile orthonormalize) then keep the earlier structure.
    bool after_other_scheme = false;
    // T-Fixup needs the depth of the encoder/decoder it scales (0: the model's depth)
    int tfixup_layers = 0;
};

// Runs the model forward on the init batch (for data-dependent schemes).
struct InitData {
    InitData(std::function<void()> forward, int64_t samples, engine::Tensor labels = {})
        : forward(std::move(forward)), samples(samples), labels(std::move(labels)) {}
    InitData() = default;
    std::function<void()> forward;
    int64_t samples = 0;  // how many samples the batch holds (for reports)
    // The batch's class labels (int32, one per row the output layer sees), when the caller has
    // them; relu-quantile fits the output layer to them. Undefined: no output-layer fit.
    engine::Tensor labels;
};

// Lines of text describing what each scheme did, plus named figures (e.g. "impulse.hit_rate").
struct Report {
    std::vector<std::string> lines;
    std::map<std::string, double> figures;
    void say(const std::string& line) { lines.push_back(line); }
};

using SchemeFn = std::function<void(nn::Module& model, const Options& opt, const InitData* data, Report& report)>;

struct SchemeInfo {
    std::string name;
    std::string summary;  // one line for --help
    bool needs_data;
    SchemeFn fn;
};

// Every registered scheme, in the order --help lists them.
const std::vector<SchemeInfo>& schemes();
// Checks every name of "a+b+c" (and the parameters of forms like normal:STD) without touching a
// model; throws the same errors apply() would. For apps, to refuse bad flags before any work.
void validate(const std::string& spec);
// Whether any part of "a+b+c" is data-dependent (needs an InitData). Throws as validate() does.
bool needs_data(const std::string& spec);
// Applies "a+b+c" left to right. Unknown names list the valid ones; data-dependent schemes
// without `data` are an error naming the scheme.
Report apply(nn::Module& model, const std::string& spec, const Options& opt = {}, const InitData* data = nullptr);

}  // namespace init
