// nn/module.h: Module, the base of every layer and model.
//
// A Module owns parameters (Tensors that require grad), buffers (state such as BatchNorm's
// running statistics) and child modules, each under a name. Names compose PyTorch-style into
// dotted paths ("blocks.3.attn.q.weight"); those paths are the stable interface that init/,
// checkpoints and logs use. A module registers a member Tensor by pointer, so the member must
// stay where it is: modules are always held by shared_ptr and never copied or moved.
//
// forward() is not virtual: each module has the forward signature its inputs need.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>
#include "engine/tensor.h"

namespace nn {

using engine::Shape;
using engine::Tensor;

struct NamedTensor {
    std::string name;
    Tensor* tensor;  // points at the owning module's member: assigning to it replaces the parameter
};

class Module {
public:
    Module() = default;
    Module(const Module&) = delete;
    Module& operator=(const Module&) = delete;
    virtual ~Module() = default;

    // A short type name for printing and errors ("Linear", "ViT").
    virtual std::string type_name() const = 0;

    std::vector<NamedTensor> named_parameters() const;  // recursive, in registration order
    std::vector<NamedTensor> named_buffers() const;
    std::vector<Tensor> parameters() const;
    // Every module in the tree with its dotted path ("" for this one), parents before children.
    std::vector<std::pair<std::string, Module*>> named_modules();
    void visit(const std::function<void(const std::string& path, Module& m)>& fn);
    const std::vector<std::pair<std::string, Module*>>& children() const { return children_; }

    // The parameter at a dotted path; throws naming the path and this module when absent.
    Tensor& parameter(const std::string& path) const;
    bool has_parameter(const std::string& path) const;

    int64_t num_parameters() const;
    void train(bool on = true);
    void eval() { train(false); }
    bool is_training() const { return training_; }
    void zero_grad();

    // Moves every parameter and buffer to `device`, in place: each member tensor is replaced (through
    // NamedTensor::tensor) by its copy on the device, so the module's fields, named_parameters() and
    // anything holding a NamedTensor see the moved tensors; parameters keep requires_grad (and lose
    // any gradient). Returns this module. Models are built and initialized on the CPU (the
    // initializers stay on the CPU and copy their result to the device): build, init::apply, then
    // .to(Device::CUDA), then make the optimizer (its state is made on the parameters' device).
    // Handles taken before the move (model.parameters()) still point at the CPU tensors: take them after.
    Module& to(engine::Device device);

    // Called with this module and its output at the end of forward(), when set. Data-dependent
    // initializers (init/) use it to observe each layer's output on an init batch. Set by Linear,
    // Conv2d, DepthwiseConv2d, LayerNorm and MultiHeadAttention (its output after proj; the input
    // an attention layer sees is the output of the LayerNorm before it, norm1).
    std::function<void(const Module&, const Tensor&)> forward_hook;
    // Called with this module and its input at the start of forward(), when set. Only Linear
    // sets it: relu-quantile solves the output layer from what that layer sees.
    std::function<void(const Module&, const Tensor&)> input_hook;
    // A hook must see this module's input or output: a fused path that skips either is not taken.
    bool hooked_io() const { return forward_hook || input_hook; }

protected:
    Tensor hooked(const Tensor& out) const {
        if (forward_hook) forward_hook(*this, out);
        return out;
    }

    // Registers `t` (a member of the derived class) as a parameter: it is made to require grad.
    void register_parameter(const std::string& name, Tensor& t);
    void register_buffer(const std::string& name, Tensor& t);
    template <typename M>
    std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
        owned_.push_back(m);
        children_.push_back({name, m.get()});
        return m;
    }

    bool training_ = true;

private:
    void collect(const std::string& prefix, bool buffers, std::vector<NamedTensor>& out) const;

    std::vector<std::pair<std::string, Tensor*>> params_, buffers_;
    std::vector<std::pair<std::string, Module*>> children_;
    std::vector<std::shared_ptr<Module>> owned_;
};

// A list of modules named "0", "1", ... (PyTorch's ModuleList), for blocks.
template <typename M>
class ModuleList : public Module {
public:
    std::string type_name() const override { return "ModuleList"; }
    void push_back(std::shared_ptr<M> m) { items_.push_back(register_module(std::to_string(items_.size()), m)); }
    size_t size() const { return items_.size(); }
    M& operator[](size_t i) const { return *items_[i]; }
    auto begin() const { return items_.begin(); }
    auto end() const { return items_.end(); }
private:
    std::vector<std::shared_ptr<M>> items_;
};

}  // namespace nn
