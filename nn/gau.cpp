// nn/gau.cpp: the Gated Attention Unit and the GAU language model.
#include "nn/gau.h"

#include "engine/error.h"
#include "engine/ops.h"

namespace nn {

using namespace engine;

GAU::GAU(int64_t d, int64_t expansion, int64_t s_, bool causal, bool rope, bool bias)
    : dim(d), e(expansion), s(s_), causal(causal), use_rope(rope) {
    check(d > 0 && e > 0 && s > 0 && (!rope || s % 2 == 0), "GAU: invalid sizes dim={} e={} s={}", d, e, s);
    hidden = register_module("hidden", std::make_shared<Linear>(d, 2 * e + s, bias));
    out = register_module("out", std::make_shared<Linear>(e, d, bias));
    gamma_q = Tensor::ones({s});
    beta_q = Tensor::zeros({s});
    gamma_k = Tensor::ones({s});
    beta_k = Tensor::zeros({s});
    register_parameter("gamma_q", gamma_q);
    register_parameter("beta_q", beta_q);
    register_parameter("gamma_k", gamma_k);
    register_parameter("beta_k", beta_k);
}

Tensor GAU::forward(const Tensor& x, const Tensor& residual) const {
    check(x.ndim() == 3 && x.size(2) == dim, "GAU: input {} is not [B, n, {}]", x.shape().str(), dim);
    int64_t n = x.size(1);
    // U = silu(x·W_u + b_u) gates A·V at the end; where bias_silu_gate applies the SiLU there, the
    // pre-activation hu is kept instead of U.
    Tensor u, hu, v, z;
    if (hidden->hooked_io()) {
        // A data-dependent initializer observes hidden's whole output: one GEMM, then a split.
        std::vector<Tensor> parts = split(silu(hidden->forward(x)), {e, e, s}, 2);
        u = parts[0];
        v = parts[1];
        z = parts[2];
    } else {
        // One GEMM per row block of hidden's weight (views, no copies): the same products as the
        // single GEMM, without splitting its [tokens, 2e + s] output. That split copied the
        // activations, and its backward made three zero-filled gradients of that size and added
        // them: 39% of a GAU step's non-GEMM bytes (apps/bench gau --profile). The views' backward
        // does the same to the weight's gradient, (2e + s)·dim floats instead of tokens·(2e + s).
        // Each bias joins its SiLU (bias_silu: one pass instead of the GEMM's bias pass and the
        // SiLU's), and U's SiLU joins the gate (bias_silu_gate: U is never stored).
        auto pre = [&](int64_t start, int64_t rows) { return linear(x, hidden->weight.narrow(0, start, rows)); };
        auto act = [&](int64_t start, int64_t rows) {
            Tensor h = pre(start, rows);
            return hidden->bias.defined() ? bias_silu(h, hidden->bias.narrow(0, start, rows)) : silu(h);
        };
        if (hidden->bias.defined()) hu = pre(0, e);
        else u = act(0, e);
        v = act(e, e);
        z = act(2 * e, s);
    }
    // Q = rope(Z⊙γ_q + β_q), K likewise: one pass each (scale_shift_rope), K's backward adding into Q's dZ.
    const float base = use_rope ? 10000.f : 0.f;
    Tensor q = scale_shift_rope(z, gamma_q, beta_q, base), k = scale_shift_rope(z, gamma_k, beta_k, base);
    Tensor a = masked_relu2(matmul(q, k, false, true), 1.f / (float)(n * s), causal);  // [B, n, n]
    Tensor av = matmul(a, v);
    Tensor gated = hu.defined() ? bias_silu_gate(hu, hidden->bias.narrow(0, 0, e), av) : mul(u, av);
    return out->forward_plus(gated, residual);
}

GAULM::GAULM(const GAUConfig& c) : cfg(c) {
    tok_emb = register_module("tok_emb", std::make_shared<Embedding>(c.vocab, c.dim));
    drop = register_module("drop", std::make_shared<Dropout>(c.dropout));
    layers = register_module("layers", std::make_shared<ModuleList<GAU>>());
    norms = register_module("norms", std::make_shared<ModuleList<LayerNorm>>());
    for (int64_t i = 0; i < c.depth; i++) {
        layers->push_back(std::make_shared<GAU>(c.dim, c.expansion, c.s, true, c.rope));
        norms->push_back(std::make_shared<LayerNorm>(c.dim));
    }
    if (!c.post_norm) final_norm = register_module("final_norm", std::make_shared<LayerNorm>(c.dim));
    if (!c.tie_weights) head = register_module("head", std::make_shared<Linear>(c.dim, c.vocab, false));
}

Tensor GAULM::forward(const Tensor& ids) const {
    Tensor x = trunk(ids);
    return head ? head->forward(x) : linear(x, tok_emb->weight);
}

Tensor GAULM::loss(const Tensor& ids, const Tensor& targets) const {
    if (!output_loss_fused(head.get())) return cross_entropy(forward(ids), targets);
    return linear_cross_entropy(trunk(ids), head ? head->weight : tok_emb->weight, head ? head->bias : Tensor(),
                                targets);
}

Tensor GAULM::trunk(const Tensor& ids) const {
    check(ids.ndim() == 2, "GAULM: ids {} are not [B, T]", ids.shape().str());
    Tensor x = drop->forward(tok_emb->forward(ids));
    // Post-Norm: each sum is used only through its norm (forward_sum: the add and the norm in one
    // pass). Pre-Norm: out's GEMM adds the residual, unless the dropout comes between.
    for (size_t i = 0; i < layers->size(); i++) {
        const GAU& layer = (*layers)[i];
        const LayerNorm& norm = (*norms)[i];
        if (cfg.post_norm) x = norm.forward_sum(x, drop->forward(layer.forward(x)));
        else if (drop->active()) x = add(x, drop->forward(layer.forward(norm.forward(x))));
        else x = layer.forward(norm.forward(x), x);
    }
    if (final_norm) x = final_norm->forward(x);
    return x;
}

}  // namespace nn
