// init/data_dependent.h: initializations fitted on a batch of training data (InitData).
//
// lsuv (Mishkin & Matas, "All you need is a good init", ICLR 2016; notes §5.2): every Linear,
//   Conv2d and DepthwiseConv2d weight orthonormal (the weight viewed as [out, fan_in]), biases 0;
//   then layer by layer in forward order on the init batch: W ← W / std(output) until
//   |std − 1| ≤ opt.lsuv_tol, at most opt.lsuv_max_iters rounds. std is over every element of the
//   layer's output (batch-level, as the authors' code).
//
// relu-quantile (Aguirre & Fuentes, ICANN 2019, "Scheme 1"; seed 003; notes §5.1): the same
//   orthonormal weights and zero biases; then, for each Linear/Conv that a ReLU-like activation
//   follows, per unit j in forward order: b_j = −v_j with v_j the value at index ⌊r − f·r⌋ of the
//   unit's r pre-activations sorted ascending (r = samples, × positions for tokens and conv
//   outputs), so a fraction f = opt.act_prob of them is positive; then W_j and b_j are scaled by
//   c_j > 0 so that the unit's post-activation std is g = opt.goal_std (scaling keeps the active
//   fraction). For ReLU c_j = g/σ_j as in the paper; for GELU/SiLU/ReLU² (not homogeneous) c_j
//   solves std(act(c_j·z)) = g on the cached pre-activations (a few secant steps in log-log).
//   The layers it adapts, in this project's models: mlp.fc1 of every transformer block (GELU,
//   ReLU, ReLU² or SiLU as the model's MLP uses), GAU's hidden projection (SiLU), and ConvMixer's
//   stem, depthwise (spatial) and pointwise convs (GELU). The other Linear/Conv layers keep the
//   orthonormal weights. The paper's output-layer scheme (least squares to logits ±2) needs the
//   labels of the init batch, which InitData does not carry; not implemented.
//
// attn-logits (Aguirre's proposal, seed 003): W_k orthonormal (the whole k.weight), q/k biases 0;
//   per attention layer ℓ (of L) and head h, target logits L_ij ~ N(μ_ij, s²) over query i and key j
//   with μ_ij = a_ℓ·exp(−dist(i, j)²/(2σ_h²)), a_ℓ = 4·(1 − ℓ/(L−1)) (local early, flat = global
//   late), σ_h = 1 + h/(H−1)·span/4 (heads from narrow to wide), s = 0.05 + 0.1·a_ℓ; dist is the
//   Euclidean distance of the patches on the grid (a class token is at distance 0 from everything)
//   or |i − j| for token sequences. W_q⁽ʰ⁾ then solves (X·W_q⁽ʰ⁾)·K_bᵀ/√k = L on the init batch,
//   X = the block's norm1 output (the attention's input in a Pre-LN block), K_b = X_b·W_k⁽ʰ⁾, by
//   the paper's two pseudo-inverses: Q*_b = L·√k·(K_bᵀ)⁺ per sample, then W_q = X⁺·Q* over all
//   samples and positions (normal equations, lstsq in double). The fit happens during one forward
//   pass: norm1's hook solves the block's W_q before its attention runs. V/proj keep their values.
//   Pre-LN ViT and TransformerLM; causal models fit the whole pattern (masked keys are ignored by
//   the model). Reports the relative residual ‖X·W_q·Kᵀ/√k − L‖/‖L‖ per layer.
//
// All three need InitData (an error naming the scheme and the model otherwise). During the fit the
// model runs without dropout (eval mode) but with BatchNorm normalizing by the batch's statistics,
// as in training; afterwards the training flag, BatchNorm's running statistics and any forward
// hooks are as they were.
#pragma once
#include "init/init.h"

namespace init {

void lsuv_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);
void relu_quantile_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);
void attn_logits_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);

}  // namespace init
