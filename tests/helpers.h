// tests/helpers.h: shared test helpers: finite-difference gradient checks and tensor comparison.
//
// gradcheck(f, inputs): for every float input that requires grad, compares the gradient of
// L = Σ f(inputs)·w (w fixed random weights, so every output element matters differently)
// from backward() with central differences (L(x+ε) − L(x−ε)) / 2ε, element by element.
// float32 finite differences carry rounding noise of about 1e-7·|L|/ε, hence the tolerances.
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>
#include "engine/ops.h"
#include "engine/rng.h"
#include "nn/optim.h"

namespace test {

using engine::Tensor;

// std::max for error figures: a NaN error makes the result infinite, so a check `err < tol` fails
// (std::max(m, NaN) returns m, and a NaN output would pass).
inline double max_err(double m, double err) { return std::isnan(err) ? INFINITY : std::max(m, err); }

struct GradcheckOptions {
    float eps = 3e-3f;
    float atol = 5e-3f;
    float rtol = 2e-2f;
    int max_elements = 200;  // per input; larger inputs are checked at an evenly spread subset
};

inline void gradcheck(const std::string& name, const std::function<Tensor(const std::vector<Tensor>&)>& f,
                      std::vector<Tensor> inputs, GradcheckOptions opt = {}) {
    engine::Generator wgen(1234);
    Tensor out0;
    {
        engine::NoGrad ng;
        out0 = f(inputs);
    }
    Tensor w = Tensor::empty(out0.shape());
    wgen.uniform(w.data_f32(), w.numel(), -1.f, 1.f);
    auto loss_of = [&](const std::vector<Tensor>& xs) { return engine::sum(engine::mul(f(xs), w)); };

    for (Tensor& x : inputs)
        if (x.requires_grad()) x.zero_grad();
    loss_of(inputs).backward();

    for (size_t i = 0; i < inputs.size(); i++) {
        Tensor& x = inputs[i];
        if (!x.defined() || !x.requires_grad()) continue;
        Tensor analytic = x.grad();
        REQUIRE(analytic.defined());
        int64_t n = x.numel();
        int64_t step = n > opt.max_elements ? (n + opt.max_elements - 1) / opt.max_elements : 1;
        float worst = 0.f, worst_a = 0.f, worst_num = 0.f;
        int64_t worst_at = -1;
        engine::NoGrad ng;
        float* p = x.data_f32();
        for (int64_t j = 0; j < n; j += step) {
            float orig = p[j];
            p[j] = orig + opt.eps;
            double lp = loss_of(inputs).item();
            p[j] = orig - opt.eps;
            double lm = loss_of(inputs).item();
            p[j] = orig;
            float num = (float)((lp - lm) / (2.0 * opt.eps));
            float a = analytic.data_f32()[j];
            float excess = std::fabs(a - num) - (opt.atol + opt.rtol * std::fabs(num));
            if (std::isnan(excess)) excess = INFINITY;  // a NaN gradient fails (a comparison would skip it)
            if (worst_at < 0 || excess > worst) { worst = excess; worst_a = a; worst_num = num; worst_at = j; }
        }
        INFO(name << ": input " << i << " " << x.shape().str() << ", worst element " << worst_at << ": analytic "
                  << worst_a << " vs numeric " << worst_num);
        CHECK(worst <= 0.f);
    }
}

// Largest |a − b| over the elements. A NaN on one side only, or infinities that differ, count as
// infinitely far apart (std::max alone would skip a NaN and pass a poisoned output); the same
// infinity or NaN on both sides counts as equal (a masked score, a row's lse at +inf).
inline float max_abs_diff(const Tensor& a, const Tensor& b) {
    REQUIRE(a.shape() == b.shape());
    auto va = a.to_vector(), vb = b.to_vector();
    float m = 0.f;
    for (size_t i = 0; i < va.size(); i++) {
        if (va[i] == vb[i] || (std::isnan(va[i]) && std::isnan(vb[i]))) continue;
        float d = std::fabs(va[i] - vb[i]);
        m = std::max(m, std::isfinite(d) ? d : INFINITY);
    }
    return m;
}

// A float tensor of the given shape with values U(lo, hi) from a fixed seed, requiring grad.
inline Tensor param(const engine::Shape& shape, uint64_t seed, float lo = -1.f, float hi = 1.f) {
    engine::Generator g(seed);
    Tensor t = Tensor::empty(shape);
    g.uniform(t.data_f32(), t.numel(), lo, hi);
    t.requires_grad_();
    return t;
}

// A residual around a LayerNorm, r = h + 2·layer_norm(h, w, b) with h = 1.5·x: the add hands its
// gradient to h first, and layer_norm's backward then adds its dx into that gradient in place
// (engine/ops/nn.cpp, accumulated_grad). The largest difference, over x's, w's and b's gradients,
// from the same function with h's two uses as leaves of their own and their gradients added
// afterwards. Not zero: the kernels may fuse dx's last multiply with the add (an FMA, rounded
// once). On x's device; w and b may be undefined.
inline float residual_layer_norm_grad_diff(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& g) {
    using namespace engine;
    auto grads = [&](bool separate_uses) {
        std::vector<Tensor> leaves;
        for (const Tensor& t : {x, w, b}) leaves.push_back(t.defined() ? t.detach().requires_grad_() : Tensor());
        Tensor h = mul(leaves[0], 1.5f);
        if (!separate_uses) {
            sum(mul(add(h, mul(layer_norm(h, leaves[1], leaves[2]), 2.f)), g)).backward();
        } else {
            Tensor h1 = h.detach().requires_grad_(), h2 = h.detach().requires_grad_();
            sum(mul(add(h1, mul(layer_norm(h2, leaves[1], leaves[2]), 2.f)), g)).backward();
            h.backward(add(h1.grad(), h2.grad()));
        }
        return leaves;
    };
    std::vector<Tensor> in_place = grads(false), separate = grads(true);
    float worst = 0.f;
    for (size_t i = 0; i < in_place.size(); i++)
        if (in_place[i].defined()) worst = std::max(worst, max_abs_diff(in_place[i].grad(), separate[i].grad()));
    return worst;
}

// attention_tokens's reference: q, k, v [B, T, H·D] permuted to [B, H, T, D], engine::attention,
// and its output permuted back to [B, T, H·D].
inline Tensor attention_by_permutes(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, bool causal,
                                    float dropout_p = 0.f, bool training = false) {
    using namespace engine;
    const int64_t B = q.size(0), D = q.size(2) / heads;
    auto heads_first = [&](const Tensor& x) { return permute(x.reshape({B, x.size(1), heads, D}), {0, 2, 1, 3}); };
    Tensor o = attention(heads_first(q), heads_first(k), heads_first(v), causal, dropout_p, training);
    return permute(o, {0, 2, 1, 3}).reshape(q.shape());
}

// q, k and v, the column blocks of qkv [B, T, 3·W], as tensors of their own (through autograd):
// attention_qkv's reference is attention_tokens on them.
inline std::vector<Tensor> split_qkv(const Tensor& qkv) {
    const int64_t B = qkv.size(0), T = qkv.size(1), W = qkv.size(2) / 3;
    Tensor parts = engine::permute(qkv.reshape({B, T, 3, W}), {2, 0, 1, 3});
    std::vector<Tensor> qkv_parts;
    for (int64_t i = 0; i < 3; i++) qkv_parts.push_back(parts.narrow(0, i, 1).reshape({B, T, W}));
    return qkv_parts;
}

// Trains `steps` Adam steps (no weight decay) of `model` on `loss_fn()`, one fixed batch;
// returns the first and the last loss. The overfit tests of every model family use it.
template <typename LossFn>
std::pair<float, float> train_steps(nn::Module& model, LossFn loss_fn, int steps, float lr) {
    nn::Adam opt(nn::param_groups(model, 0.f), lr);
    float first = 0, last = 0;
    for (int s = 0; s < steps; s++) {
        opt.zero_grad();
        Tensor loss = loss_fn();
        loss.backward();
        opt.step();
        if (s == 0) first = loss.item();
        last = loss.item();
    }
    return {first, last};
}

}  // namespace test
