// engine/cuda/nn.h: the fused neural-network ops on the GPU (engine/cuda/nn.cu), with the
// signatures of engine/cpu/nn.h so ON_DEVICE can pick either (see that header for what each
// computes). Every pointer is device memory and nothing is read back to the host: dloss[0] is read
// by the kernels themselves.
//
// Every reduction is deterministic (a fixed tree per shape, no float atomics): the same input gives
// the same bits on every run. Numerically as the CPU: the row max is subtracted before exp, sums
// of the losses run in double.
#pragma once
#include <cstdint>
#include "engine/attention_layout.h"

namespace engine::cuda {

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
// sum = x + residual and y = layer_norm(sum) in one kernel (the sum is written once and read back by
// the thread that wrote it, not by a second kernel).
void add_layer_norm_forward(const float* x, const float* residual, const float* weight, const float* bias,
                            float* sum, float* y, float* mean, float* rstd, int64_t rows, int64_t n, float eps);
// dx, and dweight/dbias [n] (null when not wanted) in one pass. dweight and dbias are written; dx is
// written, or with add_dx added to (as the CPU's, engine/cpu/nn.h).
void layer_norm_backward(const float* x, const float* weight, const float* mean, const float* rstd,
                         const float* dy, float* dx, bool add_dx, float* dweight, float* dbias, int64_t rows,
                         int64_t n);

// On entry mask holds n uniforms in [0, 1); on exit the scaled keep mask: 1/(1−p) where u >= p,
// else 0 (all 0 when p == 1). y = x·mask (y may be null: attention only needs the mask).
void dropout_forward(const float* x, float* mask, float* y, int64_t n, float p);
void dropout_backward(const float* mask, const float* dy, float* dx, int64_t n);

// Mean cross-entropy of logits [rows, C] against targets [rows], with label smoothing eps, over
// the *count targets that are not ignore_index (count_targets writes it, in device memory, so that
// the host need not read the targets). Writes loss[0] (0 when *count == 0) and lse [rows], the
// per-row log-sum-exp. A target out of range counts as an ignored row here: the op checks the
// targets with check_indices (engine/cuda/shape.h), which reports them.
void count_targets(const int32_t* targets, int64_t rows, int32_t ignore_index, int64_t* count);
void cross_entropy_forward_counted(const float* logits, const int32_t* targets, float* loss, float* lse, int64_t rows,
                                   int64_t C, int32_t ignore_index, float smoothing, const int64_t* count);
// dlogits = (softmax − target distribution)·dloss[0]/(*count); 0 on ignored rows. The softmax is
// recomputed from logits and lse, never stored. dlogits may be logits itself (in place).
void cross_entropy_backward_counted(const float* logits, const int32_t* targets, const float* lse, const float* dloss,
                                    float* dlogits, int64_t rows, int64_t C, int32_t ignore_index, float smoothing,
                                    const int64_t* count);

// loss[0] = mean((pred − target)²) over n elements; dpred = 2(pred − target)·dloss[0]/n and
// dtarget = −dpred (either may be null).
void mse_forward(const float* pred, const float* target, float* loss, int64_t n);
void mse_backward(const float* pred, const float* target, const float* dloss, float* dpred, float* dtarget,
                  int64_t n);

// Attention over BH = B·H independent heads, in the layouts of engine/attention_layout.h: q, k, v
// and their gradients as `in` says (head-major q [BH, T, D], k and v [BH, S, D]; or token-major,
// the linears' outputs, no permute), out and dout as `out_layout` says. The unfused path,
// and the reference of the fused one (engine/cuda/flash_attention.h: no P stored), which the op
// uses without dropout for head dims 32, 64 and 128.
// P = softmax(q·kᵀ·scale, causal: query i sees keys j <= i + S − T), written to p [BH, T, ldp]
// with ldp = attention_p_stride(S) (rows padded to 16 bytes for cuBLAS's tensor cores; the padding
// is never written nor read); masked entries exactly 0; a query that sees no key gets an all-zero
// row. The mask, when there is one, is unpadded [BH, T, S].
// out = (P ⊙ mask)·v, with mask [BH, T, S] the scaled dropout mask, or null for no dropout.
// Where S keys are not a whole number of 16-byte vectors (S % 4 != 0; S % 8 != 0 where the GEMMs
// read bf16 copies; up to 512 keys, head dims 32, 64, 96, 128), the GEMMs take the first S rounded
// down to that, so that cuBLAS can take its 16-byte-aligned kernels, and the softmax kernels the
// rest (engine/cuda/nn.cu, "Edge keys"). On by default;
// INITLAB_ATTENTION_EDGE_KEYS=0 turns it off (read once), set_attention_edge_keys overrides either;
// attention_edge_key_calls counts the forward calls that split.
int64_t attention_p_stride(int64_t S);  // S rounded up to a multiple of 4
bool attention_edge_keys_enabled();
void set_attention_edge_keys(bool on);
uint64_t attention_edge_key_calls();
void attention_forward(const float* q, const float* k, const float* v, const float* mask, float* p, float* out,
                       int64_t BH, int64_t T, int64_t S, int64_t D, bool causal, float scale, AttentionHeads in,
                       AttentionHeads out_layout);
// From the saved P and mask: dv = (P⊙mask)ᵀ·dout, dP = (dout·vᵀ)⊙mask, dS = P⊙(dP − rowsum(dP⊙P)),
// dq = dS·k·scale, dk = dSᵀ·q·scale. dq, dk, dv may each be null (not wanted). causal is the
// forward's, unused here (the CPU's backward recomputes P and needs it).
void attention_backward(const float* q, const float* k, const float* v, const float* mask, const float* p,
                        const float* dout, float* dq, float* dk, float* dv, int64_t BH, int64_t T, int64_t S,
                        int64_t D, bool causal, float scale, AttentionHeads in, AttentionHeads out_layout);

// Rotary embedding of x viewed as [outer, T, D]: pair (i, i + D/2) of position t is rotated by
// angle (start_pos + t)·base^(−2i/D). The backward rotates dy by the negative angle.
void rope_forward(const float* x, float* y, int64_t outer, int64_t T, int64_t D, float base, int64_t start_pos);
void rope_backward(const float* dy, float* dx, int64_t outer, int64_t T, int64_t D, float base, int64_t start_pos);
// rope(x ⊙ gamma + beta) and its backward: engine/cpu/nn.h's, up to the sums' order.
void scale_shift_rope_forward(const float* x, const float* gamma, const float* beta, float* y, int64_t outer,
                              int64_t T, int64_t D, float base);
void scale_shift_rope_backward(const float* x, const float* gamma, const float* dy, float* dx, bool accumulate,
                               float* dgamma, float* dbeta, int64_t outer, int64_t T, int64_t D, float base);

// CUDA only (no CPU twin): out[i] = value i of a uniform [0, 1) draw whose first Philox block is
// `base`, for i in [0, n): word i % 4 of philox(seed, base + i/4), as (w >> 8)·2^-24. With
// base = global_generator().advance((n + 3) / 4) and seed = global_generator().seed() this is
// bitwise what global_generator().uniform(out, n, 0, 1) writes on the CPU, and the generator's
// offset advances the same (dropout and attention draw their masks this way on the device).
// base_shift (device memory, may be null): added to base when the kernel runs (a captured step).
void uniform_fill(float* out, int64_t n, uint64_t seed, uint64_t base, const uint64_t* base_shift = nullptr);

}  // namespace engine::cuda
