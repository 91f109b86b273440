// init/fixup.h: the two attention baselines of the mimetic paper's Table 5 (seed 000, §6).
//
// t-fixup: T-Fixup, Huang, Perez, Ba & Volkovs, "Improving Transformer Optimization Through Better
// Initialization", ICML 2020, in its encoder form (every block here is self-attention + MLP, as in
// an encoder), applied as the mimetic paper applied it, "to both self-attention and MLPs":
//   1. q, k, v, proj, fc1, fc2 weights Xavier-uniform U(±√(6/(fan_in+fan_out))), their biases 0;
//   2. v, proj, fc1 and fc2 weights × 0.67·N^(−1/4), N = the number of blocks
//      (Options::tfixup_layers overrides it);
//   3. a token embedding (TransformerLM) with std (9N)^(−1/4). The paper draws the input
//      embeddings N(0, d^(−1/2)) and scales the encoder's and the decoder's alike by (9N)^(−1/4)
//      (the 0.67·N^(−1/4) is for the encoder blocks' weights only). Its code (fairseq,
//      layer6ai-labs/T-Fixup) draws the table with std d^(−1/2) and multiplies it by √d in the
//      forward, so the first block sees entries of std (9N)^(−1/4). This LM has no √d in its
//      forward: the table is drawn at that std itself. (Until 2026-11-28 it was
//      0.67·N^(−1/4)/√d: 14× smaller at d = 256, 10× at d = 128; the input was nearly all
//      position embedding.)
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
// (9N)^(−1/4): the std of the token embedding's entries as the first block sees them.
float tfixup_embedding_std(int64_t layers);

}  // namespace init
