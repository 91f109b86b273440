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
//   follows, per unit j in forward order: b_j = −v_j with v_j the (1 − f) quantile of the unit's r
//   pre-activations (r = samples, × positions for tokens and conv outputs): the paper takes the
//   value at index ⌊r − f·r⌋ of them sorted ascending; here v_j lies halfway between the sorted
//   values at r − round(f·r) − 1 and r − round(f·r), so exactly round(f·r) are positive (within
//   half a sample of f = opt.act_prob, and none sits on 0 where rounding would decide); then W_j
//   and b_j are scaled by c_j > 0 so that the unit's post-activation std is g = opt.goal_std
//   (scaling keeps the active fraction). For ReLU c_j = g/σ_j as in the paper; for GELU/SiLU/ReLU²
//   (not homogeneous) c_j solves std(act(c_j·z)) = g on the cached pre-activations (a few secant
//   steps in log-log). The figures are measured on a second pass, which recomputes every layer:
//   float rounding there can move a sample that sat within ~1e-6 of a unit's threshold across it
//   (ViT-Tiny, 32 images, 9216 units: max |fraction − f| = 1.4/n).
//   Ablations (Options::rq_bias, rq_scale = false; --no-rq-bias, --no-rq-scale): v_j = 0 (the
//   orthonormal pre-activation decides which units are active), or c_j = 1 (the orthonormal scale).
//   The layers it adapts, in this project's models: mlp.fc1 of every transformer block (GELU,
//   ReLU, ReLU² or SiLU as the model's MLP uses), GAU's hidden projection (SiLU), and ConvMixer's
//   stem, depthwise (spatial) and pointwise convs (GELU). The other Linear/Conv layers keep the
//   orthonormal weights. The output layer ("head") is then fitted as the paper's code does
//   (Scheme 4): W = pinv(X)·T, the least-squares read-out of the features X to logits
//   +opt.output_logit for each init sample's label and −opt.output_logit elsewhere, then
//   b = mean(T) − mean(X·W) (fit_output_layer; needs the init batch's labels, InitData::labels;
//   --output-logit 0 skips it). With --output-ridge λ (opt.output_ridge; not in the paper), W
//   minimizes mean‖X·W − T‖² + λ‖W‖² instead. Until 2026-11-28 W and b were one joint least-squares fit.
//
// output-fit: the output layer alone, fitted as relu-quantile's last step (Scheme 4's least-squares
//   read-out to ±opt.output_logit of the init batch's labels); every other weight stays as the
//   scheme before it left it. "torch+output-fit" separates relu-quantile's output-layer fit from its
//   hidden layers (docs/RESULTS.md section 5). Needs a separate Linear "head" and labelled init data.
//
// attn-logits (Aguirre's proposal, seed 003): W_k orthonormal (the whole k.weight), q/k biases 0;
//   per attention layer ℓ (of L) and head h, target logits L_ij ~ N(μ_ij, s²) over query i and key j
//   with μ_ij = a_ℓ·exp(−dist(i, j)²/(2σ_h²)), a_ℓ = 4·(1 − ℓ/(L−1)) (local early, flat = global
//   late), σ_h = 1 + h/(H−1)·span/4 (heads from narrow to wide), s = 0.05 + 0.1·a_ℓ; dist is the
//   Euclidean distance of the patches on the grid (a class token is at distance 0 from everything)
//   or |i − j| for token sequences. W_q⁽ʰ⁾ then solves (X_b·W_q⁽ʰ⁾)·K_bᵀ/√k = L on the init batch in
//   the least-squares sense, X_b = the block's norm1 output for sample b (the attention's input in
//   a Pre-LN block), K_b = X_b·W_k⁽ʰ⁾. For one sample that is the slide's W_q = X⁺·L·√k·(Kᵀ)⁺; for a
//   batch, min Σ_b ‖X_b·W_q·K_bᵀ/√k − L‖², solved by conjugate gradients on its normal equations
//   Σ_b X_bᵀX_b·W·K_bᵀK_b = √k·Σ_b X_bᵀ·L·K_b, preconditioned by (ΣX_bᵀX_b)⁺·R·(mean K_bᵀK_b)⁺ (the
//   one-sample formula), started from that preconditioner's solution. The fit happens during one
//   forward pass: norm1's hook solves the block's W_q before its attention runs. V/proj keep theirs.
//   Pre-LN ViT and TransformerLM; causal models fit the whole pattern (masked keys are ignored by
//   the model). Reports the relative residual ‖X·W_q·Kᵀ/√k − L‖/‖L‖ per layer.
//
// Composition ("mimetic+lsuv"): init::apply passes one Report along the chain, so a scheme that
// finds lines in it runs after another one. Then lsuv skips its orthonormal step and rescales the
// weights it finds (a per-layer scalar: the earlier scheme's structure, e.g. mimetic's W_qW_kᵀ ≈
// α₁Z + β₁I, survives up to scale), and relu-quantile orthonormalizes only the layers it adapts.
//
// All four need InitData (an error naming the scheme and the model otherwise). During the fit the
// model runs without dropout (eval mode) but with BatchNorm normalizing by the batch's statistics,
// as in training; afterwards the training flag, BatchNorm's running statistics and any forward
// hooks are as they were.
#pragma once
#include "init/init.h"

namespace init {

void lsuv_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);
void relu_quantile_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);
void output_fit_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);
void attn_logits_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);

// --- attn-logits building blocks, public for tests and apps/inspect_init ---------------------------

// Where tokens sit: a grid×grid patch grid in raster order (after a class token when class_token),
// or a sequence (grid 0) where the distance is |i − j|.
struct TokenGeometry {
    int64_t grid = 0;
    bool class_token = false;
    double distance(int64_t i, int64_t j) const;
};

// Target logits [T, T] of head `head` in layer `layer` (formula above); draws T² normals from the
// global generator.
engine::Tensor attn_logit_targets(const TokenGeometry& geo, int64_t T, int64_t layer, int64_t layers, int64_t head,
                                  int64_t heads);

// W_q (as head rows [k, d]) minimizing Σ_b ‖(X_b·W_q)·K_bᵀ/√k − L‖², X [B, T, d], K_b = X_b·k_rowsᵀ;
// residual = that norm relative to ‖L‖ over the batch, `baseline` the same for baseline_q_rows (when
// defined; e.g. the random W_q it replaces), iterations = conjugate-gradient steps taken.
struct QueryFit {
    engine::Tensor q_rows;
    double residual = 0, baseline = 0;
    int iterations = 0;
};
QueryFit fit_queries(const engine::Tensor& X, const engine::Tensor& k_rows, const engine::Tensor& target,
                     const engine::Tensor& baseline_q_rows = engine::Tensor());

}  // namespace init
