// nn/attention.h: multi-head self-attention with separate q, k, v and proj weights.
//
// Keeping four Linear layers (rather than one fused qkv) makes per-head structured inits direct:
// head h of the query map is rows [h·dh, (h+1)·dh) of q.weight (PyTorch layout [out, in]); in the
// papers' row-vector notation W_q⁽ʰ⁾ (d×dh) is the transpose of those rows. head_rows() gives
// that slice as a view, so an initializer can write one head in place.
#pragma once
#include "nn/layers.h"

namespace nn {

class MultiHeadAttention : public Module {
public:
    MultiHeadAttention(int64_t dim, int64_t heads, bool causal, float attn_dropout = 0.f, float proj_dropout = 0.f,
                       bool bias = true);
    std::string type_name() const override { return "MultiHeadAttention"; }
    // x [B, T, dim] -> [B, T, dim]. rope_base > 0 applies rotary embeddings to q and k.
    Tensor forward(const Tensor& x) const;
    // forward(norm.forward(x)), the Pre-LN branch, with the norm inside the q/k/v GEMM
    // (engine::layer_norm_linear: the norm's output is not kept for the backward) unless a hook or
    // rope needs it apart. With a residual, residual + that, the add inside proj's GEMM
    // (engine::linear's residual) unless proj's dropout or a hook on proj or on this module comes
    // between.
    Tensor forward_normed(const LayerNorm& norm, const Tensor& x, const Tensor& residual = Tensor()) const;
    // The attention probabilities [B, heads, T, T] for x (no dropout), for inspection.
    Tensor attention_map(const Tensor& x) const;
    // Rows of a [dim, dim] weight that belong to head h: a [dh, dim] view sharing storage.
    Tensor head_rows(const Tensor& weight, int64_t h) const;

    std::shared_ptr<Linear> q, k, v, proj;
    std::shared_ptr<Dropout> proj_drop;
    int64_t dim, heads, head_dim;
    bool causal;
    float attn_dropout;
    float rope_base = 0.f;  // set by models that use RoPE

private:
    Tensor split_heads(const Tensor& x) const;  // [B,T,dim] -> [B,heads,T,dh]
    bool qkv_hooked() const;                    // a hook on q, k or v
    void stacked_qkv(Tensor& w, Tensor& b) const;  // [3·dim, dim] and [3·dim] (b undefined without biases)
    // proj, its dropout and this module's hook, plus the residual where there is one
    Tensor output(const Tensor& o, const Tensor& residual = Tensor()) const;
};

}  // namespace nn
