// nn/transformer.cpp: position embeddings, TransformerBlock, ViT, TransformerLM.
#include "nn/transformer.h"

#include <cmath>
#include "engine/error.h"
#include "engine/ops.h"

namespace nn {

using namespace engine;

Tensor sincos_1d(int64_t T, int64_t dim) {
    check(dim % 2 == 0, "sincos_1d: dim {} must be even", dim);
    Tensor pe = Tensor::empty({T, dim});
    float* p = pe.data_f32();
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < dim / 2; i++) {
            double angle = t / std::pow(10000.0, 2.0 * i / dim);
            p[t * dim + 2 * i] = (float)std::sin(angle);
            p[t * dim + 2 * i + 1] = (float)std::cos(angle);
        }
    return pe;
}

Tensor sincos_2d(int64_t gh, int64_t gw, int64_t dim) {
    check(dim % 4 == 0, "sincos_2d: dim {} must be divisible by 4", dim);
    int64_t quarter = dim / 4;
    Tensor pe = Tensor::empty({gh * gw, dim});
    float* p = pe.data_f32();
    for (int64_t r = 0; r < gh; r++)
        for (int64_t c = 0; c < gw; c++) {
            float* row = p + (r * gw + c) * dim;
            for (int64_t i = 0; i < quarter; i++) {
                double omega = 1.0 / std::pow(10000.0, (double)i / quarter);
                row[i] = (float)std::sin(r * omega);
                row[quarter + i] = (float)std::cos(r * omega);
                row[2 * quarter + i] = (float)std::sin(c * omega);
                row[3 * quarter + i] = (float)std::cos(c * omega);
            }
        }
    return pe;
}

// ---------------------------------------------------------------------------------------------

TransformerBlock::TransformerBlock(const BlockConfig& c) : pre_norm(c.pre_norm) {
    norm1 = register_module("norm1", std::make_shared<LayerNorm>(c.dim));
    attn = register_module("attn", std::make_shared<MultiHeadAttention>(c.dim, c.heads, c.causal, c.attn_dropout,
                                                                        c.dropout));
    norm2 = register_module("norm2", std::make_shared<LayerNorm>(c.dim));
    mlp = register_module("mlp", std::make_shared<MLP>(c.dim, c.mlp_hidden, c.act, c.dropout));
    drop = register_module("drop", std::make_shared<Dropout>(c.dropout));
    if (c.layerscale > 0.f) {
        ls1 = register_module("ls1", std::make_shared<LayerScale>(c.dim, c.layerscale));
        ls2 = register_module("ls2", std::make_shared<LayerScale>(c.dim, c.layerscale));
    }
}

// Pre-LN: each norm is handed to its branch, whose first GEMM takes it in (layer_norm_linear), so
// neither norm's output is kept for the backward; with a hook on the norm or on that GEMM, the
// branch runs on norm.forward(x) (forward_normed). The residual is handed to the branch too, whose
// last GEMM adds it (engine::linear's residual: no separate add, which read two [B, T, dim] tensors
// and wrote a third), unless a LayerScale or the block's dropout comes between.
Tensor TransformerBlock::forward(const Tensor& x) const {
    auto scaled = [](const std::shared_ptr<LayerScale>& ls, const Tensor& t) { return ls ? ls->forward(t) : t; };
    if (pre_norm) {
        Tensor sum = ls1 ? add(x, ls1->forward(attn->forward_normed(*norm1, x))) : attn->forward_normed(*norm1, x, x);
        if (ls2 || drop->active()) return add(sum, scaled(ls2, drop->forward(mlp->forward_normed(*norm2, sum))));
        return mlp->forward_normed(*norm2, sum, sum);
    }
    // Post-LN: the sums are used only through their norms (forward_sum: one pass for each add and norm).
    Tensor h = norm1->forward_sum(x, scaled(ls1, attn->forward(x)));
    return norm2->forward_sum(h, scaled(ls2, drop->forward(mlp->forward(h))));
}

// ---------------------------------------------------------------------------------------------

ViTConfig ViTConfig::tiny() { return ViTConfig{}; }

ViTConfig ViTConfig::small() {
    ViTConfig c;
    c.dim = 384;
    c.heads = 6;
    return c;
}

ViT::ViT(const ViTConfig& c) : cfg(c) {
    check(c.patch > 0 && c.image_size % c.patch == 0, "ViT: image size {} is not a multiple of patch {}",
          c.image_size, c.patch);
    check(c.pool == "cls" || c.pool == "avg", "ViT: pool '{}' (choose cls or avg)", c.pool);
    check(!c.fc_norm || c.pool == "avg", "ViT: fc_norm (the LayerNorm after the pooling) needs pool avg, not {}",
          c.pool);
    check(c.pos == "sincos1d" || c.pos == "sincos2d" || c.pos == "learned",
          "ViT: position embedding '{}' (choose sincos1d, sincos2d or learned)", c.pos);
    int64_t g = grid(), n = g * g, d = c.dim;
    patch_embed = register_module("patch_embed", std::make_shared<Conv2d>(c.in_channels, d, c.patch, c.patch));
    bool cls = c.pool == "cls";
    if (cls) {
        cls_token = Tensor::zeros({1, 1, d});
        register_parameter("cls_token", cls_token);
    }
    int64_t tokens = n + (cls ? 1 : 0);
    if (c.pos == "learned") {
        pos_embed = Tensor::trunc_normal({1, tokens, d}, 0.f, 0.02f, -2.f, 2.f);
        register_parameter("pos_embed", pos_embed);
    } else {
        Tensor grid_pe = c.pos == "sincos2d" ? sincos_2d(g, g, d) : sincos_1d(n, d);
        pos_embed = cls ? concat({Tensor::zeros({1, d}), grid_pe}, 0) : grid_pe;  // class token: no position
        pos_embed = pos_embed.reshape({1, tokens, d});
        register_buffer("pos_embed", pos_embed);
    }
    BlockConfig bc;
    bc.dim = d;
    bc.heads = c.heads;
    bc.mlp_hidden = (int64_t)std::lround(d * c.mlp_ratio);
    bc.dropout = c.dropout;
    bc.attn_dropout = c.attn_dropout;
    bc.layerscale = c.layerscale;
    bc.act = c.act;
    blocks = register_module("blocks", std::make_shared<ModuleList<TransformerBlock>>());
    for (int64_t i = 0; i < c.depth; i++) blocks->push_back(std::make_shared<TransformerBlock>(bc));
    norm = register_module("norm", std::make_shared<LayerNorm>(d));
    head = register_module("head", std::make_shared<Linear>(d, c.num_classes));
}

Tensor ViT::embed(const Tensor& images) const {
    check(images.ndim() == 4 && images.size(1) == cfg.in_channels && images.size(2) == cfg.image_size &&
              images.size(3) == cfg.image_size,
          "ViT: images {} are not [B, {}, {}, {}]", images.shape().str(), cfg.in_channels, cfg.image_size,
          cfg.image_size);
    int64_t B = images.size(0);
    Tensor x = patch_embed->forward(images);  // [B, d, g, g]
    x = transpose(x.flatten(2), 1, 2);                                       // [B, g·g, d]
    if (cls_token.defined()) x = concat({add(x.new_zeros({B, 1, cfg.dim}), cls_token), x}, 1);
    return add(x, positions());
}

// A position embedding times its model's pe_scale (no op at 1).
static Tensor times_scale(const Tensor& pe, float scale) { return scale == 1.f ? pe : mul(pe, scale); }

Tensor ViT::positions() const { return times_scale(pos_embed, cfg.pe_scale); }

Tensor ViT::forward(const Tensor& images) const {
    Tensor x = embed(images);
    for (auto& b : *blocks) x = b->forward(x);
    return classify(x);
}

Tensor ViT::classify(const Tensor& x) const {
    // The norm is per token: with class-token pooling only that token is normalized.
    if (cls_token.defined()) return head->forward(norm->forward(x.narrow(1, 0, 1).reshape({x.size(0), cfg.dim})));
    if (cfg.fc_norm) return head->forward(norm->forward(mean(x, {1})));
    return head->forward(mean(norm->forward(x), {1}));
}

// ---------------------------------------------------------------------------------------------

TransformerLM::TransformerLM(const LMConfig& c) : cfg(c) {
    check(c.pos == "sinusoidal" || c.pos == "learned" || c.pos == "rope" || c.pos == "none",
          "TransformerLM: position embedding '{}' (choose sinusoidal, learned, rope or none)", c.pos);
    check((!c.pe_every_block && c.pe_scale == 1.f) || c.pos == "sinusoidal" || c.pos == "learned",
          "TransformerLM: pe_scale and pe_every_block need a position embedding (pos is {})", c.pos);
    tok_emb = register_module("tok_emb", std::make_shared<Embedding>(c.vocab, c.dim, c.word_dropout));
    if (c.pos == "sinusoidal") {
        pos_embed = sincos_1d(c.max_len, c.dim);
        register_buffer("pos_embed", pos_embed);
    } else if (c.pos == "learned") {
        pos_embed = Tensor::trunc_normal({c.max_len, c.dim}, 0.f, 0.02f, -2.f, 2.f);
        register_parameter("pos_embed", pos_embed);
    }
    if (c.emb_norm) emb_norm = register_module("emb_norm", std::make_shared<LayerNorm>(c.dim));
    drop = register_module("drop", std::make_shared<Dropout>(c.emb_dropout));
    BlockConfig bc;
    bc.dim = c.dim;
    bc.heads = c.heads;
    bc.mlp_hidden = (int64_t)std::lround(c.dim * c.mlp_ratio);
    bc.causal = true;
    bc.pre_norm = c.pre_norm;
    bc.dropout = c.dropout;
    bc.attn_dropout = c.attn_dropout;
    bc.layerscale = c.layerscale;
    bc.act = c.act;
    blocks = register_module("blocks", std::make_shared<ModuleList<TransformerBlock>>());
    for (int64_t i = 0; i < c.depth; i++) {
        auto b = std::make_shared<TransformerBlock>(bc);
        if (c.pos == "rope") b->attn->rope_base = 10000.f;
        blocks->push_back(b);
    }
    if (c.pre_norm) norm = register_module("norm", std::make_shared<LayerNorm>(c.dim));
    check(!(c.tie_weights && c.head_bias), "TransformerLM: head_bias needs an untied output layer");
    if (!c.tie_weights) head = register_module("head", std::make_shared<Linear>(c.dim, c.vocab, c.head_bias));
}

Tensor TransformerLM::positions(int64_t T) const { return times_scale(pos_embed.narrow(0, 0, T), cfg.pe_scale); }

Tensor TransformerLM::embed(const Tensor& ids) const {
    check(ids.ndim() == 2, "TransformerLM: ids {} are not [B, T]", ids.shape().str());
    int64_t T = ids.size(1);
    check(T <= cfg.max_len, "TransformerLM: sequence length {} exceeds max_len {}", T, cfg.max_len);
    Tensor x = tok_emb->forward(ids);
    if (cfg.emb_scale != 1.f) x = mul(x, cfg.emb_scale);
    if (pos_embed.defined()) x = add(x, positions(T));
    if (emb_norm) x = emb_norm->forward(x);
    return drop->forward(x);
}

Tensor TransformerLM::block_input(const Tensor& x, int64_t i) const {
    if (!cfg.pe_every_block || i == 0) return x;
    return add(x, positions(x.size(1)));
}

Tensor TransformerLM::trunk(const Tensor& ids) const {
    Tensor x = embed(ids);
    for (int64_t i = 0; i < (int64_t)blocks->size(); i++) x = (*blocks)[i].forward(block_input(x, i));
    return x;
}

Tensor TransformerLM::forward(const Tensor& ids) const {
    Tensor x = trunk(ids);
    // The final norm joins the output GEMM (layer_norm_linear) unless a hook must see it or the head's input.
    bool head_hooked = head && head->hooked_io();
    if (norm && !norm->forward_hook && !head_hooked)
        return layer_norm_linear(x, norm->weight, norm->bias, norm->eps, head ? head->weight : tok_emb->weight,
                                 head ? head->bias : Tensor());
    if (norm) x = norm->forward(x);
    return head ? head->forward(x) : linear(x, tok_emb->weight);
}

Tensor TransformerLM::loss(const Tensor& ids, const Tensor& targets) const {
    if (!output_loss_fused(head.get())) return cross_entropy(forward(ids), targets);
    Tensor x = trunk(ids);
    if (norm) x = norm->forward(x);
    return linear_cross_entropy(x, head ? head->weight : tok_emb->weight, head ? head->bias : Tensor(), targets);
}

}  // namespace nn
