// nn/optim.cpp: optimizer updates (fused loops or kernels, engine/cpu/optim.h or engine/cuda/optim.h
// by the parameter's device: SGD, Adam/AdamW, the gradient norm and the clipping one call per list
// of up to kMaxListTensors tensors), schedules.
#include "nn/optim.h"

#include <algorithm>
#include <cmath>
#include <set>
#include "engine/cpu/optim.h"
#include "engine/error.h"
#include "engine/ops/dispatch.h"
#include "nn/layers.h"
#ifdef ENGINE_CUDA
#include "engine/cuda/optim.h"
#include "engine/cuda/runtime.h"
#endif

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

Optimizer::Optimizer(std::vector<ParamGroup> groups, float lr) : lr(lr), groups_(std::move(groups)) {
    for (auto& g : groups_) param_steps_.emplace_back(g.params.size(), 0);
}

std::pair<size_t, size_t> Optimizer::find_param(const std::string& name) const {
    for (size_t g = 0; g < groups_.size(); g++)
        for (size_t i = 0; i < groups_[g].params.size(); i++)
            if (groups_[g].params[i].name == name) return {g, i};
    return {groups_.size(), 0};
}

int64_t Optimizer::param_steps(const std::string& name) const {
    auto [g, i] = find_param(name);
    check(g < groups_.size(), "optimizer: no parameter {}", name);
    return param_steps_[g][i];
}

std::map<std::string, int64_t> Optimizer::param_steps_unlike_steps() const {
    std::map<std::string, int64_t> out;
    for (size_t g = 0; g < groups_.size(); g++)
        for (size_t i = 0; i < groups_[g].params.size(); i++)
            if (param_steps_[g][i] != steps) out[groups_[g].params[i].name] = param_steps_[g][i];
    return out;
}

void Optimizer::restore_param_steps(const std::map<std::string, int64_t>& counts) {
    for (auto& group : param_steps_) std::fill(group.begin(), group.end(), steps);
    for (auto& [name, n] : counts) {
        auto [g, i] = find_param(name);
        check(g < groups_.size(), "optimizer state: a step count for {}, which this optimizer does not update", name);
        check(n >= 0 && n <= steps, "optimizer state: {} has taken {} updates in {} steps", name, n, steps);
        param_steps_[g][i] = n;
    }
}

int64_t Optimizer::advance_param_steps_uniformly(const char* opt) {
    int64_t common = -1;
    std::string first;
    for (size_t g = 0; g < groups_.size(); g++)
        for (size_t i = 0; i < groups_[g].params.size(); i++) {
            const NamedTensor& p = groups_[g].params[i];
            if (!p.tensor->grad().defined()) continue;
            if (common < 0) {
                common = param_steps_[g][i];
                first = p.name;
            }
            check(param_steps_[g][i] == common,
                  "{}: a captured step updates every parameter with one set of scalars, but {} has taken {} updates "
                  "and {} {} (frozen for part of the run?): take eager steps (--cuda-graph off)",
                  opt, first, common, p.name, param_steps_[g][i]);
            param_steps_[g][i]++;
        }
    return common < 0 ? steps : common + 1;
}

void Optimizer::zero_grad() {
    for (auto& g : groups_)
        for (auto& p : g.params) p.tensor->zero_grad();
}

void Optimizer::zero_grad_in_place() {
    for (auto& g : groups_)
        for (auto& p : g.params) {
            Tensor grad = p.tensor->grad();
            if (!grad.defined()) continue;
#ifdef ENGINE_CUDA
            if (grad.is_cuda()) {
                cuda::memset_zero(grad.raw_f32(), grad.numel() * sizeof(float));
                continue;
            }
#endif
            std::fill(grad.data_f32(), grad.data_f32() + grad.numel(), 0.f);
        }
}

// The device updates of a captured step exist on CUDA only.
static void expect_cuda_list(const char* opt, Device dev) {
    check(dev == Device::CUDA, "{}: step_device needs CUDA parameters (a CUDA graph step), got {}", opt, device_name(dev));
}

// One zero state tensor per parameter, per group, on the parameter's device (build the optimizer
// after moving the model).
static std::vector<std::vector<Tensor>> zeros_like_params(const std::vector<ParamGroup>& groups) {
    std::vector<std::vector<Tensor>> out;
    for (auto& g : groups) {
        out.emplace_back();
        for (auto& p : g.params) out.back().push_back(p.tensor->new_zeros(p.tensor->shape()));
    }
    return out;
}

// The parameter's gradient, checked to be where the parameter and its state are.
static Tensor grad_on_device(const char* opt, const NamedTensor& p, const Tensor* state = nullptr) {
    Tensor grad = p.tensor->grad();
    if (!grad.defined()) return grad;
    check(grad.device() == p.tensor->device(), "{}: {} is on {} but its gradient is on {}", opt, p.name,
          device_name(p.tensor->device()), device_name(grad.device()));
    if (state && state->device() != p.tensor->device())
        fail("{}: {} is on {} but its state is on {} (build the optimizer after moving the model)", opt, p.name,
             device_name(p.tensor->device()), device_name(state->device()));
    return grad;
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
    update(nullptr);
}

void SGD::next_step_scalars(float* out) {
    steps++;
    out[0] = lr;
    out[1] = advance_param_steps_uniformly("SGD") == 1 ? 1.f : 0.f;
    out[2] = out[3] = 0.f;
}

void SGD::step_device(const float* scalars) { update(scalars); }

// In lists of up to kMaxListTensors, as Adam::update. With device_scalars the list's lr holds each
// group's lr_scale (the kernel multiplies it by the learning rate it reads).
void SGD::update(const float* device_scalars) {
    SgdTensorList list;
    Device list_device = Device::CPU;
    bool list_first = false;  // eager: whether the list's tensors take their first update (buf = g)
    auto flush = [&] {
        if (list.count > 0 && device_scalars) {
            expect_cuda_list("SGD", list_device);
#ifdef ENGINE_CUDA
            cuda::sgd_step_multi_device(list, momentum, nesterov, device_scalars);
#endif
        } else if (list.count > 0) {
            ON_DEVICE(list_device, sgd_step_multi)(list, momentum, nesterov, list_first);
        }
        list.count = 0;
    };
    for (size_t gi = 0; gi < groups_.size(); gi++) {
        const ParamGroup& g = groups_[gi];
        for (size_t i = 0; i < g.params.size(); i++) {
            Tensor& p = *g.params[i].tensor;
            Tensor* buf = momentum > 0.f ? &buf_[gi][i] : nullptr;
            Tensor grad = grad_on_device("SGD", g.params[i], buf);
            if (!grad.defined()) continue;
            // (a captured step's counts were advanced by next_step_scalars)
            bool first = !device_scalars && ++param_steps_[gi][i] == 1;
            if (list.count == kMaxListTensors || (list.count > 0 && (p.device() != list_device || first != list_first)))
                flush();
            list_device = p.device();
            list_first = first;
            int t = list.count++;
            list.w[t] = p.raw_f32();
            list.g[t] = grad.raw_f32();
            list.buf[t] = buf ? buf->raw_f32() : nullptr;
            list.lr[t] = device_scalars ? g.lr_scale : lr * g.lr_scale;
            list.weight_decay[t] = g.weight_decay;
            list.offset[t + 1] = list.offset[t] + p.numel();
        }
    }
    flush();
}

std::map<std::string, Tensor*> SGD::state() { return momentum > 0.f ? named_state(groups_, buf_, "momentum") : std::map<std::string, Tensor*>{}; }

Adam::Adam(std::vector<ParamGroup> groups, float lr, float beta1, float beta2, float eps, bool decoupled)
    : Optimizer(std::move(groups), lr), beta1(beta1), beta2(beta2), eps(eps), decoupled(decoupled) {
    m_ = zeros_like_params(groups_);
    v_ = zeros_like_params(groups_);
}

// The parameters go to the update in lists of up to kMaxListTensors (engine/multi_tensor.h), one
// call (one kernel launch on CUDA) per list; a list holds tensors of one device and, in an eager
// step, of one update count (its bias corrections are the list's).
void Adam::step() {
    steps++;
    update(nullptr);
}

// sqrt(bc2) as the eager launch computes it (engine/cuda/optim.cu: sqrtf on the host).
void Adam::next_step_scalars(float* out) {
    steps++;
    int64_t t = advance_param_steps_uniformly("Adam");
    out[0] = lr;
    out[1] = 1.f - std::pow(beta1, (float)t);
    out[2] = std::sqrt(1.f - std::pow(beta2, (float)t));
    out[3] = 0.f;
}

void Adam::step_device(const float* scalars) { update(scalars); }

// With device_scalars the list's lr holds each group's lr_scale, and the bias corrections come
// from the device too.
void Adam::update(const float* device_scalars) {
    AdamTensorList list;
    Device list_device = Device::CPU;
    int64_t list_updates = 0;  // eager: the update count of the list's tensors
    auto flush = [&] {
        if (list.count > 0 && device_scalars) {
            expect_cuda_list("Adam", list_device);
#ifdef ENGINE_CUDA
            cuda::adam_step_multi_device(list, beta1, beta2, eps, decoupled, device_scalars);
#endif
        } else if (list.count > 0) {
            float bc1 = 1.f - std::pow(beta1, (float)list_updates), bc2 = 1.f - std::pow(beta2, (float)list_updates);
            ON_DEVICE(list_device, adam_step_multi)(list, beta1, beta2, eps, bc1, bc2, decoupled);
        }
        list.count = 0;
    };
    for (size_t gi = 0; gi < groups_.size(); gi++) {
        const ParamGroup& g = groups_[gi];
        for (size_t i = 0; i < g.params.size(); i++) {
            Tensor& p = *g.params[i].tensor;
            Tensor grad = grad_on_device("Adam", g.params[i], &m_[gi][i]);
            if (!grad.defined()) continue;
            // (a captured step's counts were advanced by next_step_scalars)
            int64_t updates = device_scalars ? 0 : ++param_steps_[gi][i];
            if (list.count == kMaxListTensors || (list.count > 0 && (p.device() != list_device || updates != list_updates)))
                flush();
            list_device = p.device();
            list_updates = updates;
            int t = list.count++;
            list.w[t] = p.raw_f32();
            list.g[t] = grad.raw_f32();
            list.m[t] = m_[gi][i].raw_f32();
            list.v[t] = v_[gi][i].raw_f32();
            list.lr[t] = device_scalars ? g.lr_scale : lr * g.lr_scale;
            list.weight_decay[t] = g.weight_decay;
            list.offset[t + 1] = list.offset[t] + p.numel();
        }
    }
    flush();
}

std::map<std::string, Tensor*> Adam::state() {
    return named_state(groups_, v_, "exp_avg_sq", named_state(groups_, m_, "exp_avg"));
}

// Σ‖g‖² over the gradients on one device: the gradients in lists of up to kMaxListTensors, each
// list's sum of squares into its own double slot of a small buffer on that device (one reduction
// per list, no waiting), then the buffer is read back once (the only point where the host waits
// for the device) and added up in order on the host.
static Tensor sum_squares_slots(Device dev, const std::vector<Tensor>& grads, int64_t& lists) {
    lists = ((int64_t)grads.size() + kMaxListTensors - 1) / kMaxListTensors;
    // `lists` doubles in a float32 tensor of twice as many elements (storage is 8-byte aligned).
    Tensor slots = Tensor::empty({2 * lists}, DType::F32, dev);
    double* out = reinterpret_cast<double*>(slots.raw_f32());
    for (int64_t l = 0; l < lists; l++) {
        ConstTensorList list;
        for (size_t i = l * kMaxListTensors; i < grads.size() && list.count < kMaxListTensors; i++) {
            int t = list.count++;
            list.x[t] = grads[i].raw_f32();
            list.offset[t + 1] = list.offset[t] + grads[i].numel();
        }
        ON_DEVICE(dev, sum_squares_multi)(list, out + l);
    }
    return slots;
}

static double sum_squares_on(Device dev, const std::vector<Tensor>& grads) {
    if (grads.empty()) return 0.0;
    int64_t lists = 0;
    Tensor slots = sum_squares_slots(dev, grads, lists);
    Tensor host = slots.to(Device::CPU);
    const double* sq = reinterpret_cast<const double*>(host.data_f32());
    double total = 0.0;
    for (int64_t l = 0; l < lists; l++) total += sq[l];
    return total;
}

float grad_norm(const std::vector<Tensor>& params) {
    std::vector<Tensor> on_cpu, on_cuda;
    for (const Tensor& p : params) {
        Tensor g = p.grad();
        if (g.defined()) (g.is_cuda() ? on_cuda : on_cpu).push_back(g);
    }
    return (float)std::sqrt(sum_squares_on(Device::CPU, on_cpu) + sum_squares_on(Device::CUDA, on_cuda));
}

float clip_grad_norm(const std::vector<Tensor>& params, float max_norm) {
    float norm = grad_norm(params);
    if (norm > max_norm && norm > 0.f) {
        float s = max_norm / (norm + 1e-6f);
        TensorList list;  // the gradients scaled in lists of up to kMaxListTensors, as the norm read them
        Device list_device = Device::CPU;
        auto flush = [&] {
            if (list.count > 0) ON_DEVICE(list_device, scale_multi)(list, s);
            list.count = 0;
        };
        for (const Tensor& p : params) {
            Tensor g = p.grad();
            if (!g.defined()) continue;
            if (list.count == kMaxListTensors || (list.count > 0 && g.device() != list_device)) flush();
            list_device = g.device();
            int t = list.count++;
            list.x[t] = g.raw_f32();
            list.offset[t + 1] = list.offset[t] + g.numel();
        }
        flush();
    }
    return norm;
}

Tensor clip_grad_norm_device(const std::vector<Tensor>& params, float max_norm) {
#ifdef ENGINE_CUDA
    std::vector<Tensor> grads;
    for (const Tensor& p : params) {
        Tensor g = p.grad();
        if (!g.defined()) continue;
        check(g.is_cuda(), "clip_grad_norm_device: a gradient {} is on {}: CUDA only", g.shape().str(),
              device_name(g.device()));
        grads.push_back(g);
    }
    int64_t lists = 0;
    Tensor slots = sum_squares_slots(Device::CUDA, grads, lists);
    Tensor out = Tensor::empty({2}, DType::F32, Device::CUDA);  // norm, scale
    cuda::clip_scale(reinterpret_cast<const double*>(slots.raw_f32()), lists, max_norm, out.raw_f32(), out.raw_f32() + 1);
    TensorList list;  // in lists as clip_grad_norm scales them
    auto flush = [&] {
        if (list.count > 0) cuda::scale_multi_device(list, out.raw_f32() + 1);
        list.count = 0;
    };
    for (const Tensor& g : grads) {
        if (list.count == kMaxListTensors) flush();
        int t = list.count++;
        list.x[t] = g.raw_f32();
        list.offset[t + 1] = list.offset[t] + g.numel();
    }
    flush();
    return out;
#else
    (void)params;
    (void)max_norm;
    fail("clip_grad_norm_device: this build has no CUDA backend");
#endif
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
