// engine/ops/nn.h: the fused neural-network ops. Each has one forward kernel and one backward
// kernel (no chain of small ops), as in llm.c; the kernels are in engine/cpu/nn.h. Sums across
// rows (layer_norm's dweight/dbias, the losses) run in a fixed order: the same bits on any number
// of threads.
#pragma once
#include "engine/rng.h"
#include "engine/tensor.h"

namespace engine {

// Over the last dim, with the row max subtracted so large logits do not overflow.
Tensor softmax(const Tensor& x);
Tensor log_softmax(const Tensor& x);
// LayerNorm over the last dim: (x - mean)/sqrt(var + eps)·weight + bias, biased variance;
// weight and bias [D] are optional (pass an undefined Tensor).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps = 1e-5f);
// The Pre-LN block's residual add and the LayerNorm after it in one pass: sum = x + residual (same
// shapes) and norm = layer_norm(sum, weight, bias, eps). Both are differentiable: sum feeds the
// next residual add, norm the next branch. Bitwise the same as add then layer_norm.
struct AddLayerNorm {
    Tensor sum, norm;
};
AddLayerNorm add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                            float eps = 1e-5f);
// Inverted dropout: keep with probability 1-p and scale by 1/(1-p); returns x itself when
// !training or p = 0, zeros when p = 1; 0 <= p <= 1. Element i is kept when value i of a
// global_generator().uniform draw over numel(x) values is >= p, so the mask is a function of
// (seed, offset, i): reproducible, and a GPU kernel can draw the identical one.
Tensor dropout(const Tensor& x, float p, bool training);
// Mean cross-entropy of logits [N, C] (or [..., C]) against int32 targets [N] (or [...]), as
// PyTorch: per row (1-ε)·(-log p_target) + ε·mean_c(-log p_c). Fused log-softmax + NLL; targets
// equal to ignore_index are skipped (and not counted in the mean; no counted row gives 0); any
// other target outside [0, C) is an error. The backward recomputes the softmax from the logits.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int ignore_index = -100,
                     float label_smoothing = 0.f);
// cross_entropy(linear(x, w, b), targets) without the logits [rows, V]: x [..., D], w [V, D], b [V]
// (or undefined), targets [...]. The rows go through in chunks of about 4 M logits (16 MB), each
// chunk's logits made, turned into their gradient in place and multiplied out into x's, w's and b's
// gradients, all in the forward (under NoGrad, or with no input wanting a gradient, the loss
// alone). The backward multiplies those by the loss's gradient. A language model's output layer and
// loss: at 8192 tokens and 10,000 words the logits were 328 MB, and the gradients are x's and w's
// sizes. The values are cross_entropy's and linear's within rounding (the chunks' sums).
Tensor linear_cross_entropy(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& targets,
                            int ignore_index = -100, float label_smoothing = 0.f);
// Whether the language models' loss() takes linear_cross_entropy: on unless the environment says
// INITLAB_LINEAR_CE=0 at start (then they make the logits and take cross_entropy, for a
// comparison: `lm-ce` in bench/gpu.sh); set_linear_cross_entropy overrides, returning the previous.
bool linear_cross_entropy_enabled();
bool set_linear_cross_entropy(bool on);
Tensor mse_loss(const Tensor& pred, const Tensor& target);  // mean of squared differences
// Scaled dot-product attention, one op: q [B, H, T, D], k and v [B, H, S, D],
// dropout(softmax(q·kᵀ·scale + causal mask))·v. scale <= 0 means 1/√D. With causal, query i sees
// keys j <= i + S - T (the last query sees every key); a query that sees no key outputs zeros.
// Dropout on the probabilities (mask drawn as in dropout) only when training and dropout_p > 0.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, float dropout_p = 0.f,
                 bool training = false, float scale = 0.f);
// The same attention on q [B, T, H·D], k and v [B, S, H·D] as the q, k and v linears write them
// (head h: the columns [h·D, (h+1)·D)), out [B, T, H·D] as the output linear reads it: the unfused
// path's GEMMs address the heads in place, with no permute to [B, H, T, D] and back (four copies
// of q's size in the forward and four in the backward). Where the fused path runs (it takes
// [B, H, T, D]), this is the permutes around `attention`.
Tensor attention_tokens(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, bool causal,
                        float dropout_p = 0.f, bool training = false, float scale = 0.f);
// Self-attention on one projection qkv [B, T, 3·H·D] whose column blocks are q, k and v (each
// [B, T, H·D] as in attention_tokens), out [B, T, H·D]: the q, k and v linears as one GEMM (one
// read of the input, one dX GEMM with K = 3·H·D in the backward), the heads addressed in place.
// Its gradient is one [B, T, 3·H·D] tensor. The fused path permutes as attention_tokens does.
Tensor attention_qkv(const Tensor& qkv, int64_t heads, bool causal, float dropout_p = 0.f, bool training = false,
                     float scale = 0.f);
// Rotary position embedding (RoFormer) on x [..., T, D], D even, rotating pairs (i, i + D/2) by
// angle pos·base^(-2i/D) (the GPT-NeoX "rotate half" layout), positions 0..T-1 offset by
// `start_pos`. The backward is the rotation by the negative angle.
Tensor rope(const Tensor& x, float base = 10000.f, int64_t start_pos = 0);
// rope(x ⊙ gamma + beta, base) for x [..., T, D], gamma and beta [D] (both needed), positions from 0;
// base <= 0: x ⊙ gamma + beta without rotation. The GAU's per-dimension scale and offset of Q and K
// and their rotation as one op: one pass forward (where mul, add and rope made three and kept
// two tensors), one backward pass for dx (added into x's gradient so far where there is one:
// Q's and K's share one z) and the partial sums of dgamma and dbeta. The same values as the three
// ops up to roundings: x·gamma + beta is one fused multiply-add, the parameters' sums run in
// another order.
Tensor scale_shift_rope(const Tensor& x, const Tensor& gamma, const Tensor& beta, float base = 10000.f);

}  // namespace engine
