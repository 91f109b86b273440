// nn/attention.cpp: multi-head self-attention on top of engine::attention.
#include "nn/attention.h"

#include "engine/error.h"
#include "engine/ops.h"

namespace nn {

using namespace engine;

MultiHeadAttention::MultiHeadAttention(int64_t d, int64_t h, bool causal, float attn_p, float proj_p, bool bias)
    : dim(d), heads(h), head_dim(h > 0 ? d / h : 0), causal(causal), attn_dropout(attn_p) {
    check(h > 0 && d % h == 0, "MultiHeadAttention: width {} is not divisible by {} heads", d, h);
    q = register_module("q", std::make_shared<Linear>(d, d, bias));
    k = register_module("k", std::make_shared<Linear>(d, d, bias));
    v = register_module("v", std::make_shared<Linear>(d, d, bias));
    proj = register_module("proj", std::make_shared<Linear>(d, d, bias));
    proj_drop = register_module("proj_drop", std::make_shared<Dropout>(proj_p));
}

Tensor MultiHeadAttention::split_heads(const Tensor& x) const {
    int64_t B = x.size(0), T = x.size(1);
    return permute(x.reshape({B, T, heads, head_dim}), {0, 2, 1, 3});
}

bool MultiHeadAttention::qkv_hooked() const {
    return q->hooked_io() || k->hooked_io() || v->hooked_io();
}

void MultiHeadAttention::stacked_qkv(Tensor& w, Tensor& b) const {
    w = concat({q->weight, k->weight, v->weight}, 0);
    b = q->bias.defined() ? concat({q->bias, k->bias, v->bias}, 0) : Tensor();
}

Tensor MultiHeadAttention::output(const Tensor& o, const Tensor& residual) const {
    if (residual.defined() && !forward_hook && !proj_drop->active()) return proj->forward_plus(o, residual);
    return add_residual(residual, hooked(proj_drop->forward(proj->forward(o))));
}

static void expect_tokens(const Tensor& x, int64_t dim) {
    check(x.ndim() == 3 && x.size(2) == dim, "MultiHeadAttention: input {} is not [B, T, {}]", x.shape().str(), dim);
}

Tensor MultiHeadAttention::forward(const Tensor& x) const {
    expect_tokens(x, dim);
    int64_t B = x.size(0), T = x.size(1);
    Tensor o;
    if (rope_base > 0.f) {  // rope rotates [B, H, T, D] heads
        Tensor qh = rope(split_heads(q->forward(x)), rope_base), kh = rope(split_heads(k->forward(x)), rope_base);
        o = attention(qh, kh, split_heads(v->forward(x)), causal, attn_dropout, training_);
        o = permute(o, {0, 2, 1, 3}).reshape({B, T, dim});
    } else if (qkv_hooked()) {  // a hook sees its own linear's input and output
        o = attention_tokens(q->forward(x), k->forward(x), v->forward(x), heads, causal, attn_dropout, training_);
    } else {  // q, k and v from one GEMM on the three weights stacked (the parameters stay apart)
        Tensor w, b;
        stacked_qkv(w, b);
        o = attention_qkv(linear(x, w, b), heads, causal, attn_dropout, training_);
    }
    return output(o);
}

// The norm joins the q/k/v GEMM (layer_norm_linear) only where nothing must see its output: a hook
// on the norm, or on q, k or v, and rope take forward(norm(x)).
Tensor MultiHeadAttention::forward_normed(const LayerNorm& norm, const Tensor& x, const Tensor& residual) const {
    if (norm.forward_hook || rope_base > 0.f || qkv_hooked()) return add_residual(residual, forward(norm.forward(x)));
    expect_tokens(x, dim);
    check(norm.dim == dim, "MultiHeadAttention: norm width {} is not the attention's {}", norm.dim, dim);
    Tensor w, b;
    stacked_qkv(w, b);
    Tensor qkv = layer_norm_linear(x, norm.weight, norm.bias, norm.eps, w, b);
    return output(attention_qkv(qkv, heads, causal, attn_dropout, training_), residual);
}

Tensor MultiHeadAttention::attention_map(const Tensor& x) const {
    NoGrad ng;
    Tensor qh = split_heads(q->forward(x)), kh = split_heads(k->forward(x));
    if (rope_base > 0.f) {
        qh = rope(qh, rope_base);
        kh = rope(kh, rope_base);
    }
    Tensor s = mul(matmul(qh, kh, false, true), 1.f / std::sqrt((float)head_dim));
    if (causal) s = masked_fill(s, causal_mask(x.size(1)).to(s.device()), -INFINITY);
    return softmax(s);
}

Tensor MultiHeadAttention::head_rows(const Tensor& weight, int64_t h) const {
    check(h >= 0 && h < heads, "head_rows: head {} out of range [0, {})", h, heads);
    check(weight.ndim() == 2 && weight.size(0) == dim, "head_rows: weight {} is not [{}, in]", weight.shape().str(), dim);
    return weight.detach().narrow(0, h * head_dim, head_dim);
}

}  // namespace nn
