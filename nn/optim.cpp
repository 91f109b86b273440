// nn/optim.cpp: optimizer updates (fused loops over each parameter tensor), clipping, schedules.
#include "nn/optim.h"

#include <cmath>
#include <set>
#include "engine/error.h"
#include "nn/layers.h"

namespace nn {

using namespace engine;

std::vector<ParamGroup> param_groups(const Module& model, float wd, bool no_decay_embeddings) {
    // Embedding tables are found by module type (a name test for "emb" would also catch ViT's
    // patch_embed, a conv kernel that timm decays); position embeddings and the class token by name.
    std::set<const Tensor*> embeddings;
    for (auto& [path, m] : const_cast<Module&>(model).named_modules())
        if (auto* e = dynamic_cast<const Embedding*>(m)) embeddings.insert(&e->weight);
    ParamGroup decay, no_decay;
    decay.weight_decay = wd;
    for (auto& p : model.named_parameters()) {
        bool embedding_like = embeddings.count(p.tensor) || p.name.find("pos_embed") != std::string::npos ||
                              p.name.find("cls_token") != std::string::npos;
        bool skip = p.tensor->ndim() <= 1 || (no_decay_embeddings && embedding_like);
        (skip ? no_decay : decay).params.push_back(p);
    }
    return {decay, no_decay};
}

void Optimizer::zero_grad() {
    for (auto& g : groups_)
        for (auto& p : g.params) p.tensor->zero_grad();
}

// One zero state tensor per parameter, per group.
static std::vector<std::vector<Tensor>> zeros_like_params(const std::vector<ParamGroup>& groups) {
    std::vector<std::vector<Tensor>> out;
    for (auto& g : groups) {
        out.emplace_back();
        for (auto& p : g.params) out.back().push_back(Tensor::zeros(p.tensor->shape()));
    }
    return out;
}

static std::map<std::string, Tensor*> named_state(const std::vector<ParamGroup>& groups,
                                                  std::vector<std::vector<Tensor>>& slot, const char* name,
                                                  std::map<std::string, Tensor*> out = {}) {
    for (size_t g = 0; g < groups.size(); g++)
        for (size_t i = 0; i < groups[g].params.size(); i++) out[groups[g].params[i].name + "." + name] = &slot[g][i];
    return out;
}

SGD::SGD(std::vector<ParamGroup> groups, float lr, float momentum, bool nesterov)
    : Optimizer(std::move(groups), lr), momentum(momentum), nesterov(nesterov) {
    check(!nesterov || momentum > 0.f, "SGD: Nesterov needs momentum > 0");
    if (momentum > 0.f) buf_ = zeros_like_params(groups_);
}

void SGD::step() {
    steps++;
    for (size_t gi = 0; gi < groups_.size(); gi++) {
        const ParamGroup& g = groups_[gi];
        float lr_g = lr * g.lr_scale, wd = g.weight_decay;
        for (size_t i = 0; i < g.params.size(); i++) {
            Tensor& p = *g.params[i].tensor;
            Tensor grad = p.grad();
            if (!grad.defined()) continue;
            float *w = p.data_f32(), *dw = grad.data_f32(), *b = momentum > 0.f ? buf_[gi][i].data_f32() : nullptr;
            int64_t n = p.numel();
            bool first = steps == 1;
            #pragma omp parallel for if (n > 65536)
            for (int64_t j = 0; j < n; j++) {
                float d = dw[j] + wd * w[j];
                if (b) {
                    b[j] = first ? d : momentum * b[j] + d;  // PyTorch starts the buffer at the first gradient
                    d = nesterov ? d + momentum * b[j] : b[j];
                }
                w[j] -= lr_g * d;
            }
        }
    }
}

std::map<std::string, Tensor*> SGD::state() { return momentum > 0.f ? named_state(groups_, buf_, "momentum") : std::map<std::string, Tensor*>{}; }

Adam::Adam(std::vector<ParamGroup> groups, float lr, float beta1, float beta2, float eps, bool decoupled)
    : Optimizer(std::move(groups), lr), beta1(beta1), beta2(beta2), eps(eps), decoupled(decoupled) {
    m_ = zeros_like_params(groups_);
    v_ = zeros_like_params(groups_);
}

void Adam::step() {
    steps++;
    float bc1 = 1.f - std::pow(beta1, (float)steps), bc2 = 1.f - std::pow(beta2, (float)steps);
    for (size_t gi = 0; gi < groups_.size(); gi++) {
        const ParamGroup& g = groups_[gi];
        float lr_g = lr * g.lr_scale, wd = g.weight_decay;
        for (size_t i = 0; i < g.params.size(); i++) {
            Tensor& p = *g.params[i].tensor;
            Tensor grad = p.grad();
            if (!grad.defined()) continue;
            float *w = p.data_f32(), *dw = grad.data_f32(), *m = m_[gi][i].data_f32(), *v = v_[gi][i].data_f32();
            int64_t n = p.numel();
            float step_size = lr_g / bc1, b1 = beta1, b2 = beta2, e = eps, sqrt_bc2 = std::sqrt(bc2);
            bool dec = decoupled;
            #pragma omp parallel for if (n > 65536)
            for (int64_t j = 0; j < n; j++) {
                float d = dw[j];
                if (dec) w[j] -= lr_g * wd * w[j];
                else d += wd * w[j];
                m[j] = b1 * m[j] + (1.f - b1) * d;
                v[j] = b2 * v[j] + (1.f - b2) * d * d;
                w[j] -= step_size * m[j] / (std::sqrt(v[j]) / sqrt_bc2 + e);
            }
        }
    }
}

std::map<std::string, Tensor*> Adam::state() {
    return named_state(groups_, v_, "exp_avg_sq", named_state(groups_, m_, "exp_avg"));
}

float grad_norm(const std::vector<Tensor>& params) {
    double sq = 0;
    for (const Tensor& p : params) {
        Tensor g = p.grad();
        if (!g.defined()) continue;
        const float* d = g.data_f32();
        for (int64_t j = 0; j < g.numel(); j++) sq += (double)d[j] * d[j];
    }
    return (float)std::sqrt(sq);
}

float clip_grad_norm(const std::vector<Tensor>& params, float max_norm) {
    float norm = grad_norm(params);
    if (norm > max_norm && norm > 0.f) {
        float s = max_norm / (norm + 1e-6f);
        for (const Tensor& p : params) {
            Tensor g = p.grad();
            if (!g.defined()) continue;
            float* d = g.data_f32();
            for (int64_t j = 0; j < g.numel(); j++) d[j] *= s;
        }
    }
    return norm;
}

float WarmupCosine::lr(int64_t step) const {
    if (step < warmup_steps) return base_lr * (float)(step + 1) / (float)warmup_steps;
    int64_t span = std::max<int64_t>(1, total_steps - warmup_steps);
    double t = std::min(1.0, (double)(step - warmup_steps) / span);
    return (float)(min_lr + 0.5 * (base_lr - min_lr) * (1.0 + std::cos(M_PI * t)));
}

float StepDecay::lr(int64_t epoch) const {
    if (epoch < start_epoch) return base_lr;
    return base_lr * std::pow(factor, (float)((epoch - start_epoch) / every + 1));
}

float ReduceOnPlateau::update(float metric) {
    if (metric < best * (1.f - threshold)) {
        best = metric;
        bad = 0;
    } else if (++bad > patience) {
        lr = std::max(min_lr, lr * factor);
        bad = 0;
    }
    return lr;
}

}  // namespace nn
