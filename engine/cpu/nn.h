// engine/cpu/nn.h: CPU kernels of the fused neural-network ops (engine/ops/nn.h), one forward and
// one backward per op, on raw contiguous arrays. "rows" means the tensor viewed as [rows, n] with n
// the last dim. The CUDA backend provides the same functions in engine/cuda/nn.cu.
//
// Every reduction is deterministic: its summation order depends on the sizes only, never on the
// number of threads, so two runs give bitwise-equal results.
#pragma once
#include <cstdint>
#include "engine/attention_layout.h"

namespace engine::cpu {

// y = softmax(x) per row; dx = y·(dy − Σ dy·y).
void softmax_forward(const float* x, float* y, int64_t rows, int64_t n);
void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t n);

// y = x − logsumexp(x) per row; dx = dy − exp(y)·Σ dy.
void log_softmax_forward(const float* x, float* y, int64_t rows, int64_t n);
void log_softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t n);

// y = (x − mean)·rstd·weight + bias per row, rstd = 1/√(var + eps) (biased variance). weight and
// bias may be null (then 1 and 0). mean and rstd [rows] are written for the backward.
void layer_norm_forward(const float* x, const float* weight, const float* bias, float* y, float* mean,
                        float* rstd, int64_t rows, int64_t n, float eps);
// sum = x + residual and y = layer_norm(sum) (as layer_norm_forward) in one pass over the rows: the
// Pre-LN residual add fused with the LayerNorm after it. Its backward is layer_norm_backward on sum.
void add_layer_norm_forward(const float* x, const float* residual, const float* weight, const float* bias,
                            float* sum, float* y, float* mean, float* rstd, int64_t rows, int64_t n, float eps);
// dx, and dweight/dbias [n] (null when not wanted) in one pass. dweight and dbias are written; dx is
// written, or with add_dx added to (the gradient its input already has: engine/autograd.h,
// accumulated_grad; the bits of writing it and adding afterwards).
void layer_norm_backward(const float* x, const float* weight, const float* mean, const float* rstd,
                         const float* dy, float* dx, bool add_dx, float* dweight, float* dbias, int64_t rows,
                         int64_t n);

// On entry mask holds n uniforms in [0, 1); on exit the scaled keep mask: 1/(1−p) where u >= p,
// else 0 (all 0 when p == 1). y = x·mask (y may be null: attention only needs the mask).
void dropout_forward(const float* x, float* mask, float* y, int64_t n, float p);
void dropout_backward(const float* mask, const float* dy, float* dx, int64_t n);

// Mean cross-entropy of logits [rows, C] against targets [rows] (already validated: each is
// ignore_index or in [0, C)), with label smoothing eps. count = rows whose target is not
// ignore_index. Writes loss[0] (0 when count == 0) and lse [rows], the per-row log-sum-exp.
void cross_entropy_forward(const float* logits, const int32_t* targets, float* loss, float* lse, int64_t rows,
                           int64_t C, int64_t count, int32_t ignore_index, float smoothing);
// dlogits = (softmax − target distribution)·dloss[0]/count; 0 on ignored rows. The softmax is
// recomputed from logits and lse, never stored. dlogits may be logits itself (in place).
void cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse, const float* dloss,
                            float* dlogits, int64_t rows, int64_t C, int64_t count, int32_t ignore_index,
                            float smoothing);

// loss[0] = mean((pred − target)²) over n elements; dpred = 2(pred − target)·dloss[0]/n and
// dtarget = −dpred (either may be null).
void mse_forward(const float* pred, const float* target, float* loss, int64_t n);
void mse_backward(const float* pred, const float* target, const float* dloss, float* dpred, float* dtarget,
                  int64_t n);

// Attention over BH = B·H independent heads, in the layouts of engine/attention_layout.h: q, k, v
// and their gradients as `in` says (head-major q [BH, T, D], k and v [BH, S, D]; or token-major,
// rows ld apart), out and dout as `out_layout` says.
// P = softmax(q·kᵀ·scale, causal: query i sees keys j <= i + S − T) (masked entries exactly 0; a
// query that sees no key gets an all-zero row), out = (P ⊙ mask)·v, with mask [BH, T, S] the scaled
// dropout mask, or null for no dropout. P is not kept: stats [BH, T, 2] gets each row's max and
// 1/sum, from which the backward recomputes P bit for bit (S/2 times less memory than P; the CUDA
// path keeps P itself).
void attention_forward(const float* q, const float* k, const float* v, const float* mask, float* stats, float* out,
                       int64_t BH, int64_t T, int64_t S, int64_t D, bool causal, float scale, AttentionHeads in,
                       AttentionHeads out_layout);
// With P recomputed from the forward's stats (one more q·kᵀ GEMM a head), and the mask:
// dv = (P⊙mask)ᵀ·dout, dP = (dout·vᵀ)⊙mask, dS = P⊙(dP − rowsum(dP⊙P)), dq = dS·k·scale,
// dk = dSᵀ·q·scale. dq, dk, dv may each be null (not wanted).
void attention_backward(const float* q, const float* k, const float* v, const float* mask, const float* stats,
                        const float* dout, float* dq, float* dk, float* dv, int64_t BH, int64_t T, int64_t S,
                        int64_t D, bool causal, float scale, AttentionHeads in, AttentionHeads out_layout);

// Rotary embedding of x viewed as [outer, T, D]: pair (i, i + D/2) of position t is rotated by
// angle (start_pos + t)·base^(−2i/D). The backward rotates dy by the negative angle.
void rope_forward(const float* x, float* y, int64_t outer, int64_t T, int64_t D, float base, int64_t start_pos);
void rope_backward(const float* dy, float* dx, int64_t outer, int64_t T, int64_t D, float base, int64_t start_pos);

// y = rope(fma(x, gamma, beta)) over x viewed as [outer, T, D], gamma and beta [D], positions from 0;
// no rotation where base <= 0. The backward rotates dy back (dh = rope_backward(dy)) and writes
// dx = dh ⊙ gamma (added to dx where accumulate; dx null: not wanted), dgamma = Σ_rows dh ⊙ x and
// dbeta = Σ_rows dh (each null: not wanted).
void scale_shift_rope_forward(const float* x, const float* gamma, const float* beta, float* y, int64_t outer,
                              int64_t T, int64_t D, float base);
void scale_shift_rope_backward(const float* x, const float* gamma, const float* dy, float* dx, bool accumulate,
                               float* dgamma, float* dbeta, int64_t outer, int64_t T, int64_t D, float base);

}  // namespace engine::cpu
