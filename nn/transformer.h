// nn/transformer.h: the transformer block, position embeddings, ViT and the causal TransformerLM.
#pragma once
#include "nn/attention.h"
#include "nn/layers.h"

namespace nn {

// Position embeddings, [T, dim]. 1D: Vaswani et al.'s interleaved sin/cos, pe[t, 2i] =
// sin(t/10000^(2i/dim)), pe[t, 2i+1] = cos(...). 2D (MAE/MoCo-v3 style): the first half of the
// channels encode the row, the second half the column, each as [sin..., cos...] over dim/4
// frequencies; rows of the grid in raster order.
Tensor sincos_1d(int64_t T, int64_t dim);
Tensor sincos_2d(int64_t grid_h, int64_t grid_w, int64_t dim);

struct BlockConfig {
    int64_t dim = 192, heads = 3, mlp_hidden = 768;
    bool causal = false, pre_norm = true;
    float dropout = 0.f, attn_dropout = 0.f;
    float layerscale = 0.f;  // > 0: LayerScale on both residual branches with this init
    Activation act = Activation::GELU;
};

// Pre-LN: x + attn(norm1(x)), then + mlp(norm2(.)). Post-LN: norm1(x + attn(x)), then
// norm2(. + mlp(.)). Residual branches optionally scaled by LayerScale.
class TransformerBlock : public Module {
public:
    explicit TransformerBlock(const BlockConfig& c);
    std::string type_name() const override { return "TransformerBlock"; }
    Tensor forward(const Tensor& x) const;
    std::shared_ptr<LayerNorm> norm1, norm2;
    std::shared_ptr<MultiHeadAttention> attn;
    std::shared_ptr<MLP> mlp;
    std::shared_ptr<Dropout> drop;
    std::shared_ptr<LayerScale> ls1, ls2;  // null without LayerScale
    bool pre_norm;
};

struct ViTConfig {
    int64_t image_size = 32, patch = 4, in_channels = 3, num_classes = 10;
    int64_t dim = 192, depth = 12, heads = 3;
    float mlp_ratio = 4.f;
    std::string pool = "cls";      // cls | avg (global average pooling, no class token)
    bool fc_norm = false;          // avg: the final LayerNorm after the pooling (timm's use_fc_norm), not per token
    std::string pos = "sincos2d";  // sincos1d | sincos2d | learned
    float pe_scale = 1.f;          // multiplies the position embedding (mimetic's scale factor)
    float dropout = 0.f, attn_dropout = 0.f, layerscale = 0.f;
    Activation act = Activation::GELU;  // the MLPs' (relu-quantile's own setting is ReLU)
    static ViTConfig tiny();   // 192 wide, 12 deep, 3 heads
    static ViTConfig small();  // 384 wide, 12 deep, 6 heads
};

// Patch embedding (a conv with kernel = stride = patch), class token or average pooling,
// position embedding × pe_scale, Pre-LN blocks, final LayerNorm, linear head. With average
// pooling the final LayerNorm is on every token before the mean, or with fc_norm on the mean (as
// timm's VisionTransformer with global_pool "avg", the structured-init papers' ViT).
class ViT : public Module {
public:
    explicit ViT(const ViTConfig& c);
    std::string type_name() const override { return "ViT"; }
    Tensor forward(const Tensor& images) const;     // [B, C, H, W] -> logits [B, classes]
    Tensor embed(const Tensor& images) const;       // tokens entering block 0, [B, N(+1), dim]
    Tensor classify(const Tensor& x) const;         // the last block's output -> logits: norm, pool, head
    Tensor positions() const;                       // pos_embed × pe_scale, [1, N(+1), dim]
    int64_t grid() const { return cfg.image_size / cfg.patch; }
    ViTConfig cfg;
    std::shared_ptr<Conv2d> patch_embed;  // kernel = stride = patch
    Tensor cls_token;                 // [1, 1, dim] when pool == cls
    Tensor pos_embed;                 // [1, N(+1), dim]: a buffer for sincos, a parameter when learned
    std::shared_ptr<ModuleList<TransformerBlock>> blocks;
    std::shared_ptr<LayerNorm> norm;
    std::shared_ptr<Linear> head;
};

struct LMConfig {
    int64_t vocab = 50, dim = 128, depth = 2, heads = 4, max_len = 512;
    float mlp_ratio = 4.f;
    std::string pos = "sinusoidal";  // sinusoidal | learned | rope | none
    bool tie_weights = true, pre_norm = true;
    bool head_bias = false;          // an untied output layer with a bias (the unigram log-frequencies)
    bool emb_norm = false;           // a LayerNorm right after the embedding (SmallInitEmb)
    float emb_scale = 1.f;           // token embeddings are multiplied by this (Vaswani: √dim)
    float pe_scale = 1.f;            // multiplies the sinusoidal or learned position embedding
    bool pe_every_block = false;     // add it again before every block, not only to the embedding
    float dropout = 0.f, attn_dropout = 0.f, emb_dropout = 0.f, word_dropout = 0.f;
    float layerscale = 0.f;
    Activation act = Activation::GELU;
};

// Causal transformer language model: ids [B, T] -> logits [B, T, vocab].
class TransformerLM : public Module {
public:
    explicit TransformerLM(const LMConfig& c);
    std::string type_name() const override { return "TransformerLM"; }
    Tensor forward(const Tensor& ids) const;
    // cross_entropy(forward(ids), targets) (targets [B, T], -100 ignored) without the logits: the
    // output layer and the loss in one op (engine::linear_cross_entropy) where output_loss_fused.
    Tensor loss(const Tensor& ids, const Tensor& targets) const;
    LMConfig cfg;
    std::shared_ptr<Embedding> tok_emb;
    Tensor pos_embed;                      // [max_len, dim]: buffer (sinusoidal) or parameter (learned)
    std::shared_ptr<LayerNorm> emb_norm;   // null unless cfg.emb_norm
    std::shared_ptr<Dropout> drop;
    std::shared_ptr<ModuleList<TransformerBlock>> blocks;
    std::shared_ptr<LayerNorm> norm;       // final norm (Pre-LN only)
    std::shared_ptr<Linear> head;          // null when tied to tok_emb
    // The tokens entering block 0, [B, T, dim]: embedding × emb_scale + position embedding ×
    // pe_scale, then emb_norm and dropout.
    Tensor embed(const Tensor& ids) const;
    Tensor positions(int64_t T) const;  // the first T rows of pos_embed × pe_scale, [T, dim]
    // What block i reads, given the previous block's output x: x itself, or x plus the position
    // embedding again (× pe_scale) for i > 0 with cfg.pe_every_block.
    Tensor block_input(const Tensor& x, int64_t i) const;
    // The last block's output [B, T, dim], before the final norm (train_lm's tok_cos reads it).
    Tensor trunk(const Tensor& ids) const;
};

}  // namespace nn
