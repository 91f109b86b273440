// init/smallemb.h: SmallInitEmb (BlinkDL, github.com/BlinkDL/SmallInitEmb, seed 004; notes §4).
//
// The token embedding starts tiny, E ~ U(−1e-4, 1e-4), and a LayerNorm right after it turns the
// small per-step updates of each row into large changes of its direction, so the model trains
// fast from the start (and Post-LN trains without warmup). A learned absolute position embedding
// starts at 0 (the repo's advice). A fixed sinusoidal one cannot: it outweighs the tokens in
// front of the LayerNorm about 12,000 times, which hides them at init, so the report says so and
// suggests rotary PE (RESULTS.md section 2 measures what it costs). Nothing else changes: compose
// with another scheme for the rest ("timm+smallemb", "mimetic+smallemb").
//
// The LayerNorm is part of the model, not of the init, so the scheme checks it is there:
//   TransformerLM, Pre-LN: LMConfig::emb_norm builds it (module "emb_norm", BlinkDL's lnPre);
//   TransformerLM, Post-LN: block 0's norm1 normalizes x + attn(x) already (BlinkDL's note);
//   GAULM, Post-Norm: likewise its first norm.
// Anything else (Pre-LN without emb_norm, GAULM Pre-Norm, LSTM, ViT's patch embedding) is an
// error that says how to build the model.
#pragma once
#include "init/init.h"

namespace init {

void smallemb_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);

constexpr float kSmallEmbBound = 1e-4f;

}  // namespace init
