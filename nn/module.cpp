// nn/module.cpp: parameter/buffer registration and the recursive walks over a module tree.
#include "nn/module.h"

#include "engine/error.h"

namespace nn {

using engine::check;

void Module::register_parameter(const std::string& name, Tensor& t) {
    check(t.defined(), "{}: parameter '{}' registered before it was created", type_name(), name);
    check(t.dtype() == engine::DType::F32, "{}: parameter '{}' must be float32", type_name(), name);
    t.requires_grad_(true);
    params_.push_back({name, &t});
}

void Module::register_buffer(const std::string& name, Tensor& t) { buffers_.push_back({name, &t}); }

void Module::collect(const std::string& prefix, bool buffers, std::vector<NamedTensor>& out) const {
    for (auto& [name, t] : buffers ? buffers_ : params_) out.push_back({prefix + name, t});
    for (auto& [name, m] : children_) m->collect(prefix + name + ".", buffers, out);
}

std::vector<NamedTensor> Module::named_parameters() const {
    std::vector<NamedTensor> out;
    collect("", false, out);
    return out;
}

std::vector<NamedTensor> Module::named_buffers() const {
    std::vector<NamedTensor> out;
    collect("", true, out);
    return out;
}

std::vector<Tensor> Module::parameters() const {
    std::vector<Tensor> out;
    for (auto& p : named_parameters()) out.push_back(*p.tensor);
    return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
    std::vector<std::pair<std::string, Module*>> out;
    // Iterative preorder walk (models are shallow, but the order must be parents first).
    std::vector<std::pair<std::string, Module*>> stack{{"", this}};
    while (!stack.empty()) {
        auto [path, m] = stack.back();
        stack.pop_back();
        out.push_back({path, m});
        for (auto it = m->children_.rbegin(); it != m->children_.rend(); ++it)
            stack.push_back({path.empty() ? it->first : path + "." + it->first, it->second});
    }
    return out;
}

void Module::visit(const std::function<void(const std::string&, Module&)>& fn) {
    for (auto& [path, m] : named_modules()) fn(path, *m);
}

bool Module::has_parameter(const std::string& path) const {
    for (auto& p : named_parameters())
        if (p.name == path) return true;
    return false;
}

Tensor& Module::parameter(const std::string& path) const {
    for (auto& p : named_parameters())
        if (p.name == path) return *p.tensor;
    engine::fail("{}: no parameter named '{}'", type_name(), path);
}

int64_t Module::num_parameters() const {
    int64_t n = 0;
    for (auto& p : named_parameters()) n += p.tensor->numel();
    return n;
}

void Module::train(bool on) {
    training_ = on;
    for (auto& [name, m] : children_) m->train(on);
}

Module& Module::to(engine::Device device) {
    for (auto& p : named_parameters()) {
        if (p.tensor->device() == device) continue;
        bool grad = p.tensor->requires_grad();
        Tensor moved = p.tensor->detach().to(device);
        moved.requires_grad_(grad);
        *p.tensor = moved;
    }
    for (auto& b : named_buffers())
        if (b.tensor->defined() && b.tensor->device() != device) *b.tensor = b.tensor->detach().to(device);
    return *this;
}

void Module::zero_grad() {
    for (auto& p : named_parameters()) p.tensor->zero_grad();
}

}  // namespace nn
