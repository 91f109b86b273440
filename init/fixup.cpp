// init/fixup.cpp: T-Fixup (encoder form) and ZerO-style attention (see init/fixup.h).
#include "init/fixup.h"

#include <cmath>
#include <fmt/format.h>
#include "engine/error.h"
#include "init/standard.h"
#include "nn/transformer.h"

namespace init {

float tfixup_scale(int64_t layers) {
    engine::check(layers > 0, "init: t-fixup: the number of layers must be positive, got {}", layers);
    return 0.67f * std::pow((float)layers, -0.25f);
}

float tfixup_embedding_std(int64_t layers) {
    engine::check(layers > 0, "init: t-fixup: the number of layers must be positive, got {}", layers);
    return std::pow(9.f * (float)layers, -0.25f);
}

static std::vector<nn::TransformerBlock*> blocks_of(nn::Module& model, const char* scheme) {
    std::vector<nn::TransformerBlock*> blocks;
    model.visit([&](const std::string&, nn::Module& m) {
        if (auto* b = dynamic_cast<nn::TransformerBlock*>(&m)) blocks.push_back(b);
    });
    engine::check(!blocks.empty(), "init: {}: model {} has no transformer blocks (self-attention + MLP)", scheme,
                  model.type_name());
    return blocks;
}

static void xavier_linear(nn::Linear& l, float scale) {
    float bound = scale * std::sqrt(6.f / (float)(l.in_features + l.out_features));
    fill_uniform(l.weight, -bound, bound);
    if (l.bias.defined()) fill_value(l.bias, 0.f);
}

void tfixup_init(nn::Module& model, const Options& opt, const InitData*, Report& report) {
    auto blocks = blocks_of(model, "t-fixup");
    int64_t n = opt.tfixup_layers > 0 ? opt.tfixup_layers : (int64_t)blocks.size();
    float scale = tfixup_scale(n);
    for (auto* b : blocks) {
        xavier_linear(*b->attn->q, 1.f);
        xavier_linear(*b->attn->k, 1.f);
        xavier_linear(*b->attn->v, scale);
        xavier_linear(*b->attn->proj, scale);
        xavier_linear(*b->mlp->fc1, scale);
        xavier_linear(*b->mlp->fc2, scale);
    }
    std::string emb;
    if (auto* lm = dynamic_cast<nn::TransformerLM*>(&model)) {
        float std = tfixup_embedding_std(n);
        fill_normal(lm->tok_emb->weight, 0.f, std);
        emb = fmt::format("; token embedding std (9N)^(-1/4) = {:.4f} (the authors' d^(-1/2) table × √d in the "
                          "forward)", std);
    }
    report.say(fmt::format("t-fixup: {} blocks Xavier q/k, v/proj/fc1/fc2 × 0.67·N^(-1/4) = {:.4f} (N = {}){}; "
                           "LayerNorms kept",
                           blocks.size(), scale, n, emb));
    report.figures["t-fixup.scale"] = scale;
}

void zero_attn_init(nn::Module& model, const Options&, const InitData*, Report& report) {
    std::vector<nn::MultiHeadAttention*> layers;
    model.visit([&](const std::string&, nn::Module& m) {
        if (auto* a = dynamic_cast<nn::MultiHeadAttention*>(&m)) layers.push_back(a);
    });
    engine::check(!layers.empty(), "init: zero-attn: model {} has no MultiHeadAttention layers", model.type_name());
    for (auto* a : layers) {
        fill_value(a->q->weight, 0.f);
        fill_value(a->k->weight, 0.f);
        float* k = a->k->weight.data_f32();
        for (int64_t i = 0; i < a->dim; i++) k[i * a->dim + i] = 1.f;
        if (a->q->bias.defined()) fill_value(a->q->bias, 0.f);
        if (a->k->bias.defined()) fill_value(a->k->bias, 0.f);
    }
    report.say(fmt::format("zero-attn: {} attention layers W_q = 0, W_k = I (uniform attention at init)",
                           layers.size()));
}

}  // namespace init
