// init/fixup.h: the two attention baselines of the mimetic paper's Table 5 (seed 000, §6).
//
// t-fixup: T-Fixup, Huang, Perez, Ba & Volkovs, "Improving Transformer Optimization Through Better
// Initialization", ICML 2020, in its encoder form (every block here is self-attention + MLP, as in
// an encoder), applied as the mimetic paper applied it, "to both self-attention and MLPs":
//   1. q, k, v, proj, fc1, fc2 weights Xavier-uniform U(±√(6/(fan_in+fan_out))), their biases 0;
//   2. v, proj, fc1 and fc2 weights × 0.67·N^(−1/4), N = the number of blocks
//      (Options::tfixup_layers overrides it);
//   3. a token embedding (TransformerLM) N(0, d^(−1/2)) — std d^(−1/2), as the authors' code
//      draws it — then × 0.67·N^(−1/4) too (the paper scales the input embeddings with the
//      layers; its decoder factor (9N)^(−1/4) is for blocks with cross-attention, absent here).
// Variant notes: the paper also removes LayerNorm and warmup; here the model keeps its
// LayerNorms (the mimetic paper's comparison changed only the init). A ViT's patch embedding,
// class token, position embedding and head, and an LM's untied head, keep their values.
//
// zero-attn: ZerO-style attention (Zhao, Schäfer & Anandkumar 2021, "ZerO Initialization"), applied
// to self-attention only as in the mimetic paper: per layer W_q = 0 and W_k = I (q/k biases 0), so
// every attention logit is 0 and attention starts uniform (causally: uniform over the past).
// V/proj and the rest keep their values.
//
// LayerScale (Touvron et al. 2021), the table's third baseline, is an architecture option
// (ViTConfig::layerscale / LMConfig::layerscale, nn::LayerScale), not an init scheme.
#pragma once
#include "init/init.h"

namespace init {

void tfixup_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);
void zero_attn_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);

// 0.67·N^(−1/4), the encoder scale of T-Fixup.
float tfixup_scale(int64_t layers);

}  // namespace init
