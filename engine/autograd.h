// engine/autograd.h: define-by-run autograd.
//
// Every op that gets an input requiring grad (while grad mode is on) attaches a Node to its
// output. The Node holds the inputs and a backward closure written next to the op's forward
// (engine/ops/*.cpp). Tensor::backward() orders the graph topologically with an explicit stack
// (no recursion, so 10,000-op chains are fine), runs the closures in reverse, accumulates
// gradients into .grad, and then releases the graph: non-leaf grads and grad_fns are dropped.
//
// Rule for closures: capture inputs freely, but never the output Tensor itself (that would be a
// reference cycle output -> node -> output); capture out.detach() instead.
#pragma once
#include <functional>
#include <vector>
#include "engine/tensor.h"

namespace engine {

struct Node {
    const char* name;  // op name, for debugging and error messages
    std::vector<Tensor> inputs;  // counted in each input's TensorImpl::node_refs while the node lives
    ~Node();
    // Receives dL/d(output) and returns dL/d(input i) for each input (an undefined Tensor for an
    // input that needs no gradient). Runs with grad mode off.
    std::function<std::vector<Tensor>(const Tensor& grad_output)> backward;
};

// Grad mode: on by default; NoGrad turns it off for a scope (evaluation, optimizer updates,
// initializers, and every backward closure).
bool grad_enabled();
struct NoGrad {
    NoGrad();
    ~NoGrad();
    NoGrad(const NoGrad&) = delete;
    NoGrad& operator=(const NoGrad&) = delete;
private:
    bool prev_;
};

// True when an op with these inputs must record a Node.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Inside a backward closure: the gradient accumulated so far for `input` (one of the node's
// inputs) when the closure may add its own contribution into it in place (a GEMM with beta = 1)
// and return that same tensor as the input's gradient, which autograd then does not add again.
// Undefined when there is none yet, when it shares memory with another tensor's gradient (a
// residual add hands one gradient to both its inputs), and for leaves (their .grad is added into
// by autograd, the same way in an eager and in a captured step). Saves an add and a
// gradient-sized buffer where several ops consume one intermediate (the q, k and v projections of
// one LayerNorm output).
Tensor accumulated_grad(const Tensor& input);
// Where a backward writes input t's gradient: accumulated_grad(t), to add into (adding = true), or
// else a new tensor of t's shape on like's device (adding = false).
Tensor grad_target(const Tensor& t, const Tensor& like, bool& adding);
// Inside a backward closure that holds one handle to `input` (captured) and whose node lists it:
// whether nothing else holds it or its memory (no other node, no handle of the caller's, no view),
// so that the closure may write the input's gradient over it. A language model's logits, which
// only cross-entropy reads: the [rows, vocabulary] gradient then takes no second buffer that size.
// Leaves never qualify (they belong to the caller).
bool input_memory_reusable(const Tensor& input);

// Attach a Node to `out` if any input requires grad and grad mode is on; returns `out`.
Tensor attach(Tensor out, const char* name, std::vector<Tensor> inputs,
              std::function<std::vector<Tensor>(const Tensor&)> backward);

}  // namespace engine
