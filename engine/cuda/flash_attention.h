// engine/cuda/flash_attention.h: fused ("flash") attention on the GPU, forward and backward
// (engine/cuda/flash_attention.cu). Same semantics as engine/cuda/nn.h's attention_forward and
// attention_backward without dropout: q [BH, T, D], k and v [BH, S, D], scores q·kᵀ·scale, causal
// meaning query i sees keys j <= i + S − T, a query that sees no key gets an all-zero output row
// and zero gradient. The difference is what is kept: the probabilities P [BH, T, S] are never
// written; the forward keeps lse [BH, T], the log-sum-exp of each row of scaled scores, and the
// backward recomputes P tile by tile from q, k and lse.
//
// CUDA only (no CPU twin): engine/ops/nn.cpp's `attention` picks this path on a CUDA tensor when
// there is no dropout mask, the head dim is supported and the fused path is enabled; otherwise the
// unfused path of engine/cuda/nn.cu (batched GEMMs, P saved) runs, which stays the reference.
//
// Two sets of kernels, picked at each call by gemm_precision() (engine/cuda/matmul.h):
//   fp32        the fp32-core kernels (every product on the CUDA cores, in fp32); they have run on
//               an H200 (docs/results/gpu-h200-2026-11-26.md) and stay the reference;
//   tf32, bf16  the tensor-core kernels: every matrix product of a tile (q·kᵀ, P·v; dout·vᵀ, Pᵀ·dout,
//               dSᵀ·q, dS·k) through nvcuda::wmma with fp32 accumulators, its inputs (and P, dS)
//               rounded to TF32 (m16n16k8) under tf32, to bf16 (m16n16k16) under bf16; the softmax,
//               masks and rescaling in fp32 on regular threads. The TF32 ones have run on an H200
//               (docs/results/gpu-h200-2026-11-26-second.md: the [cuda] suite, compute-sanitizer's
//               memcheck and racecheck clean): their forward is about as fast as the unfused path's,
//               their backward 1.8× slower, so the fused path stays off by default. The bf16 ones,
//               the split dq, the padding skip and the asynchronous copies (session 11) have run
//               only in the emulator.
// Same semantics and the same lse either way (a backward may follow a forward of the other kind).
// Where the device gives a block less shared memory than a tensor-core kernel takes (an RTX 30/40
// card's 99 KiB against 110-155 KB for some at D = 128), that call runs the fp32 kernels.
//
// Deterministic: no atomics; every sum has an order fixed by the shape, so the same input gives
// the same bits on every run.
#pragma once
#include <cstdint>
#include "engine/attention_layout.h"

namespace engine::cuda {

// Head dims with a compiled kernel: 32, 64 and 128 (other D use the unfused path).
bool flash_attention_supports(int64_t D);

// Whether `attention` may use the fused path. Off by default: on an H200, TF32, the unfused path
// (its GEMMs on cuBLAS's tensor-core kernels) is the faster one at the lengths measured (ViT-Tiny
// patch 2, T = 257: 26.5 against 32.4 ms a step; the LM at T = 256: 14.8 against 16.3; at T = 4096:
// 21.9 against 30.9). The fused path saves memory, since P is never stored: 3208 against 4378 MB
// for ViT-Tiny, 1625 against 6460 MB for the LM at T = 4096. The environment variable
// INITLAB_FUSED_ATTENTION=1 turns it on (read once, at the first call), and set_fused_attention
// overrides either (tests run both paths).
bool fused_attention_enabled();
void set_fused_attention(bool on);

// Whether the tensor-core backward may split dq: the dk/dv kernel also writes each key tile's part
// of dq (dS·k) to a scratch, and a small kernel sums the parts in tile order, instead of a dq kernel
// that recomputes the scores and dP (10·T·S·D FLOPs a head instead of 14). Used with S <= 512 (at
// most 8 key tiles: the scratch is then at most 8 × q) when dk or dv is wanted too. On by default;
// INITLAB_FLASH_SPLIT_DQ=0 turns it off (read once), set_flash_split_dq overrides either.
bool flash_split_dq_enabled();
void set_flash_split_dq(bool on);

// Whether the TF32 tensor-core kernels double-buffer their streamed tiles (k and v; q and dout)
// with asynchronous copies (cp.async): step t + 1's tiles load while step t computes, at twice
// those tiles' shared memory. bf16 kernels load synchronously (their tiles are converted on the
// way in). Off by default: on an H100 the shared memory it takes (fewer blocks an SM) cost more
// than the overlap gained, 14.7 against 11.4 ms of ViT-Tiny attention a step. INITLAB_FLASH_ASYNC=1
// turns it on (read once), set_flash_async overrides either. The results are the same bits either way.
bool flash_async_enabled();
void set_flash_async(bool on);

// Whether the tensor-core forward at head dim 64 streams 32 keys a step instead of 64 (synchronous
// loads, TF32 or bf16): 45 KB of shared memory a block instead of 71 (TF32), so four blocks an SM
// instead of three, at twice the steps and barriers. The H100 measured that blocks an SM decide
// these kernels' speed (docs/results/gpu-h100-2026-11-26.md: two blocks lost 25 % against three);
// whether four win over the extra steps is for a GPU to say. Off by default;
// INITLAB_FLASH_NARROW_FORWARD=1 turns it on (read once), set_flash_narrow_forward overrides
// either; `vit-narrow` in bench/gpu.sh times it.
bool flash_narrow_forward_enabled();
void set_flash_narrow_forward(bool on);

// out = softmax(q·kᵀ·scale, masked)·v; lse [BH, T] = log Σ_j exp(scale·q_i·k_j) over the keys
// query i sees, +inf for a query that sees none (so exp(s − lse) = 0 there). D must be supported.
// Layouts as engine/cuda/nn.h's attention_forward (engine/attention_layout.h): q, k, v (and in the
// backward dq, dk, dv) as `in` says, out (and dout) as `out_layout`: head-major [BH, rows, D], or
// token-major, e.g. q, k, v the column blocks of one [B, T, 3·H·D] projection and out [B, T, H·D],
// with no permute on either side. Under tf32/bf16 every pointer must be 16-byte aligned and rows a
// multiple of 4 floats apart (the kernels move float4s; an error says so otherwise). Notes the
// FLOPs of the two GEMMs the unfused path runs (profile::note_flops), so the step's GEMM FLOP
// count and MFU do not depend on the path.
void flash_attention_forward(const float* q, const float* k, const float* v, float* out, float* lse, int64_t BH,
                             int64_t T, int64_t S, int64_t D, bool causal, float scale, AttentionHeads in,
                             AttentionHeads out_layout);

// From q, k, v, the forward's out and lse, and dout: Δ_i = rowsum(dout ⊙ out) (one small kernel),
// then dk and dv (one kernel over key tiles) and dq (one kernel over query tiles), each with
// P = exp(scale·q·kᵀ − lse) and dS = P ⊙ (dout·vᵀ − Δ) recomputed tile by tile:
// dv = Pᵀ·dout, dk = dSᵀ·q·scale, dq = dS·k·scale. dq, dk, dv may each be null (not wanted).
void flash_attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                              const float* dout, float* dq, float* dk, float* dv, int64_t BH, int64_t T, int64_t S,
                              int64_t D, bool causal, float scale, AttentionHeads in, AttentionHeads out_layout);

// Calls of the two entry points since the process started (tests check that `attention` took the
// fused path; host-side counters, so they work on a GPU as in the emulator).
// tc_forward / tc_backward: of those, the calls that ran the tensor-core kernels; bf16_forward /
// bf16_backward: of those, the calls with bf16 inputs; split_dq: the tensor-core backwards that
// split dq.
struct FlashAttentionCalls {
    uint64_t forward = 0, backward = 0;
    uint64_t tc_forward = 0, tc_backward = 0;
    uint64_t bf16_forward = 0, bf16_backward = 0;
    uint64_t split_dq = 0;
    uint64_t async_forward = 0, async_backward = 0;  // TF32 calls with double-buffered asynchronous copies
    uint64_t narrow_forward = 0;                     // tensor-core forwards with 32 keys a step
};
FlashAttentionCalls flash_attention_calls();

}  // namespace engine::cuda
