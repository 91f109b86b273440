// engine/autograd.cpp: grad mode, Node attachment, and the backward pass.
#include "engine/autograd.h"

#include <unordered_set>
#include "engine/error.h"
#include "engine/cpu/elementwise.h"
#include "engine/ops.h"
#include "engine/ops/dispatch.h"
#include "engine/profile.h"
#ifdef ENGINE_CUDA
#include "engine/cuda/elementwise.h"
#endif

namespace engine {

static thread_local bool g_grad_enabled = true;

bool grad_enabled() { return g_grad_enabled; }
NoGrad::NoGrad() : prev_(g_grad_enabled) { g_grad_enabled = false; }
NoGrad::~NoGrad() { g_grad_enabled = prev_; }

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
    if (!g_grad_enabled) return false;
    for (const Tensor* t : inputs)
        if (t && t->defined() && t->requires_grad()) return true;
    return false;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
    if (!g_grad_enabled) return false;
    for (const Tensor& t : inputs)
        if (t.defined() && t.requires_grad()) return true;
    return false;
}

static double tensor_bytes(const Tensor& t) { return t.defined() ? 4.0 * (double)t.numel() : 0.0; }

Tensor attach(Tensor out, const char* name, std::vector<Tensor> inputs,
              std::function<std::vector<Tensor>(const Tensor&)> backward) {
    if (profile::active()) {  // the op's forward ends here (engine/profile.h)
        double bytes = tensor_bytes(out);
        for (const Tensor& t : inputs) bytes += tensor_bytes(t);
        profile::boundary(name, profile::Phase::Forward, bytes);
    }
    if (!any_requires_grad(inputs)) return out;
    auto node = std::make_shared<Node>();
    node->name = name;
    node->inputs = std::move(inputs);
    for (const Tensor& in : node->inputs)
        if (in.defined()) in.impl()->node_refs++;
    node->backward = std::move(backward);
    out.impl()->grad_fn = std::move(node);
    out.impl()->requires_grad = true;
    return out;
}

Node::~Node() {
    for (const Tensor& in : inputs)
        if (in.defined()) in.impl()->node_refs--;
}

// Add g into t's .grad (allocating it on first use), on t's device. t may have no storage left
// (released while only graphs held it: TensorImpl::node_refs); its gradient goes on g's device.
// Returns the bytes an add read and wrote (0 where g became the gradient as it is), for the profile.
static double accumulate(TensorImpl* t, const Tensor& g, const char* op) {
    check(g.shape() == t->shape, "backward of {}: gradient shape {} does not match input shape {}",
          op, g.shape().str(), t->shape.str());
    Device dev = t->storage ? t->storage->device : g.device();
    check(g.device() == dev, "backward of {}: gradient {} is on {} but its input is on {}", op, g.shape().str(),
          device_name(g.device()), device_name(dev));
    // A leaf's .grad belongs to the user and the optimizer (which may keep and update it in place,
    // as a captured step does): it gets memory of its own. An intermediate's gradient is only read,
    // by its own node's backward, and then freed: it may share memory with g or with another
    // tensor's gradient (a residual add hands the same g to both inputs), which saves a copy of
    // every such gradient (on an H200, 99 copies a ViT-Tiny step, 1.5 of its 38 ms); adding into a
    // shared one then makes a new tensor instead of writing into the other's.
    const bool leaf = !t->grad_fn;
    if (t->grad && g.impl() == t->grad.get()) return 0;  // the closure added into it (accumulated_grad)
    const double add_bytes = 3.0 * (double)g.numel() * sizeof(float);
    if (!t->grad) {
        bool sole_owner = g.impl_ptr().use_count() == 1 && g.impl()->storage.use_count() == 1;
        bool may_share = !g.impl()->grad_fn && (sole_owner || !leaf);
        t->grad = may_share ? g.impl_ptr() : g.clone().impl_ptr();
        return may_share ? 0 : 2.0 * (double)g.numel() * sizeof(float);
    }
    if (!leaf && (t->grad.use_count() > 1 || t->grad->storage.use_count() > 1)) {
        t->grad = add(Tensor(t->grad), g).impl_ptr();  // under NoGrad (run_backward): no node
        return add_bytes;
    }
    ON_DEVICE(dev, add_inplace)(Tensor(t->grad).raw_f32(), g.raw_f32(), g.numel());
    return add_bytes;
}

Tensor accumulated_grad(const Tensor& input) {
    TensorImpl* t = input.impl();
    if (!t || !t->requires_grad || !t->grad || !t->grad->storage) return Tensor();
    // Intermediates only, and only when nothing else holds the gradient or its memory. A leaf's
    // .grad is left to accumulate(): a captured step keeps it and zeroes it in place while an eager
    // step starts without one, so the first GEMM would add (beta = 1) in one and write in the
    // other, and cuBLAS may choose another kernel, with other bits, for each; the two must agree.
    if (!t->grad_fn || t->grad.use_count() > 1 || t->grad->storage.use_count() > 1) return Tensor();
    return Tensor(t->grad);
}

bool input_memory_reusable(const Tensor& input) {
    TensorImpl* t = input.impl();
    if (!t || !t->storage || !t->grad_fn) return false;
    // The handles: the closure's, this node's inputs list (node_refs 1), and run_backward's
    // topological order, which holds every tensor it visits until the backward ends.
    return t->node_refs == 1 && input.impl_ptr().use_count() == 3 && t->storage.use_count() == 1;
}

Tensor grad_target(const Tensor& t, const Tensor& like, bool& adding) {
    Tensor acc = accumulated_grad(t);
    adding = acc.defined();
    return adding ? acc : like.new_empty(t.shape());
}

void run_backward(const Tensor& root, const Tensor& grad_output) {
    check(root.requires_grad(), "backward: the tensor {} does not require grad", root.shape().str());
    check(grad_output.shape() == root.shape(), "backward: gradient shape {} does not match output shape {}",
          grad_output.shape().str(), root.shape().str());

    // Topological order by an iterative post-order DFS over tensors that have a grad_fn. `order`
    // owns its tensors, so releasing a node below cannot destroy an input still to be processed.
    std::vector<std::shared_ptr<TensorImpl>> order;
    std::unordered_set<TensorImpl*> visited;
    std::vector<std::pair<std::shared_ptr<TensorImpl>, size_t>> stack;  // (tensor, next input to visit)
    stack.push_back({root.impl_ptr(), 0});
    visited.insert(root.impl());
    while (!stack.empty()) {
        auto& [t, next] = stack.back();
        Node* node = t->grad_fn.get();
        if (node && next < node->inputs.size()) {
            const std::shared_ptr<TensorImpl>& in = node->inputs[next++].impl_ptr();
            if (in && in->requires_grad && !visited.count(in.get())) {
                visited.insert(in.get());
                stack.push_back({in, 0});
            }
            continue;
        }
        order.push_back(std::move(t));
        stack.pop_back();
    }

    NoGrad no_grad;
    accumulate(root.impl(), grad_output, "root");
    const bool profiling = profile::active();  // boundaries: engine/profile.h
    if (profiling) profile::boundary("autograd (order, release)", profile::Phase::Backward);
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
        TensorImpl* t = it->get();
        if (!t->grad_fn || !t->grad) continue;
        Node& node = *t->grad_fn;
        std::vector<Tensor> grads;
        {
            profile::InBackwardClosure in_closure;
            grads = node.backward(Tensor(t->grad));
        }
        check(grads.size() == node.inputs.size(), "backward of {}: returned {} gradients for {} inputs",
              node.name, grads.size(), node.inputs.size());
        if (profiling) {
            double bytes = tensor_bytes(Tensor(t->grad));
            for (size_t i = 0; i < grads.size(); i++) bytes += tensor_bytes(node.inputs[i]) + tensor_bytes(grads[i]);
            profile::boundary(node.name, profile::Phase::Backward, bytes);
        }
        double added_bytes = 0;
        for (size_t i = 0; i < grads.size(); i++) {
            TensorImpl* in = node.inputs[i].impl();
            if (in && in->requires_grad && grads[i].defined()) added_bytes += accumulate(in, grads[i], node.name);
        }
        // Every consumer of t came earlier in this order, so t's gradient is complete and has now
        // reached t's inputs: free it, and the node with what its closure saved, right away. Kept
        // to the end, the intermediate gradients doubled the peak memory of a training step.
        grads.clear();
        t->grad.reset();
        t->grad_fn.reset();
        if (profiling) profile::boundary("accumulate gradients", profile::Phase::Backward, added_bytes);
    }
    // Release the rest of the graph (nodes no gradient reached); leaves keep their .grad.
    for (const std::shared_ptr<TensorImpl>& t : order) {
        if (t->grad_fn) {
            t->grad_fn.reset();
            t->grad.reset();
        }
    }
    if (profiling) profile::boundary("autograd (order, release)", profile::Phase::Backward);
}

}  // namespace engine
