// nn/optim.h: optimizers (SGD, Adam, AdamW), parameter groups, gradient clipping, LR schedules.
//
// An optimizer holds parameter groups; each group has its own weight decay (and an lr multiplier).
// step() updates every parameter that has a gradient, in place, with one fused loop per tensor.
// The learning rate is set from outside by a schedule: opt.lr = sched.lr(step).
#pragma once
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>
#include "nn/module.h"

namespace nn {

struct ParamGroup {
    std::vector<NamedTensor> params;
    float weight_decay = 0.f;
    float lr_scale = 1.f;
};

// Two groups from a model: decayed (matrices, conv kernels) and not decayed (every 1-d tensor:
// biases, norm weights, LayerScale; plus, when no_decay_embeddings, the tables of Embedding
// modules, position embeddings and the class token), the usual timm/nanoGPT split.
std::vector<ParamGroup> param_groups(const Module& model, float weight_decay, bool no_decay_embeddings = true);

class Optimizer {
public:
    Optimizer(std::vector<ParamGroup> groups, float lr);
    virtual ~Optimizer() = default;
    virtual void step() = 0;
    void zero_grad();

    // A step for a CUDA graph (nn/graph_step.h): next_step_scalars() counts the step as step()
    // does and writes its kStepScalars scalars (engine/multi_tensor.h) for the host to copy to the
    // device; step_device(scalars) launches the update reading them from there when it runs, so it
    // can be captured once and launched at every step; its arithmetic is step()'s, bit for bit.
    // CUDA parameters only.
    virtual void next_step_scalars(float* out) = 0;
    virtual void step_device(const float* scalars) = 0;
    // Zeros the gradients in place instead of dropping them: a captured step reuses their memory.
    void zero_grad_in_place();
    // State tensors by "<param name>.<slot>" (e.g. "blocks.0.q.weight.exp_avg"), for checkpoints
    // (with `steps` and param_steps_unlike_steps()).
    virtual std::map<std::string, Tensor*> state() = 0;
    const std::vector<ParamGroup>& groups() const { return groups_; }

    // The updates each parameter has taken. torch.optim counts them per parameter (its
    // state["step"]): a parameter without a gradient at a step (frozen until then,
    // apps/common/freeze.h) is neither updated nor counted, so its first update is a first step
    // whatever `steps` is: Adam's bias correction of a fresh start, SGD's momentum buffer set to
    // the gradient.
    int64_t param_steps(const std::string& name) const;
    // For checkpoints: the counts that differ from `steps`, by parameter name.
    std::map<std::string, int64_t> param_steps_unlike_steps() const;
    // After loading `steps`: every count set to it, then `counts` by name (an unknown name is refused).
    void restore_param_steps(const std::map<std::string, int64_t>& counts);

    int64_t steps = 0;  // step() calls (each counts, whichever parameters it updated)
    float lr;

protected:
    // Advances the count of every parameter that has a gradient. A captured step has one set of
    // scalars, so they must all have taken the same number of updates; returns it, after.
    int64_t advance_param_steps_uniformly(const char* opt);
    // (group, index) of the parameter called `name`; the group is groups_.size() when there is none.
    std::pair<size_t, size_t> find_param(const std::string& name) const;

    std::vector<ParamGroup> groups_;
    std::vector<std::vector<int64_t>> param_steps_;  // per group, per parameter
};

// SGD with momentum (PyTorch's form: buf = μ·buf + g; Nesterov uses g + μ·buf) and L2 weight decay.
class SGD : public Optimizer {
public:
    SGD(std::vector<ParamGroup> groups, float lr, float momentum = 0.f, bool nesterov = false);
    void step() override;
    void next_step_scalars(float* out) override;  // lr, first step (1 or 0)
    void step_device(const float* scalars) override;
    std::map<std::string, Tensor*> state() override;
    float momentum;
    bool nesterov;
private:
    void update(const float* device_scalars);
    std::vector<std::vector<Tensor>> buf_;
};

// Adam (L2 decay added to the gradient) or AdamW (decoupled decay: p -= lr·wd·p), with bias
// correction, as torch.optim.Adam/AdamW.
class Adam : public Optimizer {
public:
    Adam(std::vector<ParamGroup> groups, float lr, float beta1 = 0.9f, float beta2 = 0.999f, float eps = 1e-8f,
         bool decoupled = true);
    void step() override;
    void next_step_scalars(float* out) override;  // lr, bias corrections 1 − β1^t and sqrt(1 − β2^t)
    void step_device(const float* scalars) override;
    std::map<std::string, Tensor*> state() override;
    float beta1, beta2, eps;
    bool decoupled;
private:
    void update(const float* device_scalars);
    std::vector<std::vector<Tensor>> m_, v_;
};

// Scales all gradients so their global L2 norm is at most max_norm; returns the norm before.
float clip_grad_norm(const std::vector<Tensor>& params, float max_norm);
// The same on the device, without waiting for it (capturable): returns [norm, scale] on the device;
// the gradients (all on CUDA) are multiplied by the scale, 1 when the norm is at most max_norm.
Tensor clip_grad_norm_device(const std::vector<Tensor>& params, float max_norm);
float grad_norm(const std::vector<Tensor>& params);

// Learning-rate schedules, as functions of the step (0-based).
struct WarmupCosine {
    float base_lr, min_lr;
    int64_t warmup_steps, total_steps;
    float lr(int64_t step) const;  // linear 0 -> base over warmup, then cosine down to min_lr
};

struct StepDecay {  // Zaremba et al.: constant, then ×factor every `every` epochs after `start`
    float base_lr, factor;
    int64_t start_epoch, every = 1;
    float lr(int64_t epoch) const;
};

// Reduce-on-plateau (Bai et al.): divide the lr by `factor` when the metric has not improved by
// `threshold` (relative) for `patience` evaluations.
struct ReduceOnPlateau {
    float lr, factor = 0.5f, min_lr = 0.f, threshold = 1e-4f;
    int patience = 0;
    float best = INFINITY;
    int bad = 0;
    float update(float metric);  // returns the (possibly reduced) lr
};

}  // namespace nn
