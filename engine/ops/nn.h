// engine/ops/nn.h: the fused neural-network ops. Each has one forward kernel and one backward
// kernel (no chain of small ops), as in llm.c.
#pragma once
#include "engine/rng.h"
#include "engine/tensor.h"

namespace engine {

Tensor softmax(const Tensor& x);      // over the last dim
Tensor log_softmax(const Tensor& x);  // over the last dim
// LayerNorm over the last dim: (x - mean)/sqrt(var + eps)·weight + bias; weight/bias optional.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps = 1e-5f);
// Inverted dropout: keep with probability 1-p and scale by 1/(1-p); identity when !training or p=0.
// The mask comes from the Philox stream of the global generator (reproducible, GPU-identical).
Tensor dropout(const Tensor& x, float p, bool training);
// Mean cross-entropy of logits [N, C] (or [..., C]) against int32 targets [N] (or [...]).
// Fused log-softmax + NLL; targets equal to ignore_index are skipped (and not counted in the
// mean); label_smoothing ε mixes the one-hot target with the uniform distribution.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int ignore_index = -100,
                     float label_smoothing = 0.f);
Tensor mse_loss(const Tensor& pred, const Tensor& target);  // mean of squared differences
// Scaled dot-product attention, one op: q, k, v [B, H, T, D] (k, v may have their own T),
// softmax(q·kᵀ·scale + causal mask)·v with dropout on the probabilities. scale <= 0 means 1/√D.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, float dropout_p = 0.f,
                 bool training = false, float scale = 0.f);
// Rotary position embedding (RoFormer) on x [..., T, D], D even, rotating pairs (i, i + D/2) by
// angle pos·base^(-2i/D), positions 0..T-1 offset by `start_pos`.
Tensor rope(const Tensor& x, float base = 10000.f, int64_t start_pos = 0);

}  // namespace engine
