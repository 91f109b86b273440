// engine/cuda/matmul.h: GEMM on the GPU through cuBLAS, with the CPU's row-major interface
// (engine/cpu/matmul.h): a row-major C = op(A)·op(B) is the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, so
// each call passes B as cuBLAS's first operand and A as its second, with the same transpose flags.
//
// Implemented in engine/cuda/matmul.cu: one cuBLAS handle (created on first use, on the backend's
// stream), and the precision of gemm_precision() (below) at the time of each call.
// Errors throw engine::Error naming the function, M, N, K (batch) and the transposes: a cuBLAS
// status other than success (with cublasGetStatusName/String), or a size beyond INT_MAX (cuBLAS
// takes int sizes), refused before any call. M = 0 or N = 0 (or batch = 0) does nothing.
#pragma once
#include <cstdint>
#include "engine/host_device.h"

namespace engine::cuda {

// The precision of every cuBLAS GEMM, process-wide (the apps' --precision; default fp32):
//   fp32  cublasSgemm in full fp32;
//   tf32  cublasSgemm with TF32 tensor-op math (the inputs rounded to a 10-bit mantissa by cuBLAS);
//   bf16  both inputs rounded to bf16 (round to nearest even, a conversion kernel into packed
//         scratch: only the elements the GEMM reads, see bf16_rounded_elements),
//         then cublasGemmEx / cublasGemmStridedBatchedEx: bf16 inputs, fp32 output, fp32
//         accumulation (CUBLAS_COMPUTE_32F). Everything outside the GEMMs stays fp32: parameters,
//         optimizer state, stored activations, reductions, normalization, softmax, the loss, and
//         the fused (flash) attention kernel, which does its own products in fp32.
// The flag lives in engine/cuda/runtime.cu next to the older set_tf32()/tf32() (engine/cuda/runtime.h),
// which are this flag seen as a bool: set_tf32(true) is tf32, set_tf32(false) is fp32.
enum class GemmPrecision { fp32, tf32, bf16 };
void set_gemm_precision(GemmPrecision p);
GemmPrecision gemm_precision();
const char* gemm_precision_name(GemmPrecision p);  // "fp32", "tf32", "bf16"
// bf16 GEMMs need bf16 tensor cores: compute capability 8.0 (Ampere) or newer. The emulator
// reports sm_90, so it says yes.
bool bf16_supported();
// Elements the bf16 GEMMs have rounded into scratch so far, process-wide (tests check that a
// strided operand converts only what the GEMM reads).
uint64_t bf16_rounded_elements();
// Under bf16, whether a GEMM hands cuBLAS its fp32 inputs as they are and lets its kernels round
// them to bf16 (cublasGemmEx with fp32 A and B and CUBLAS_COMPUTE_32F_FAST_16BF: no conversion
// pass, no scratch) instead of rounding them into bf16 scratch first. Off by default: it has never
// run on a GPU, and cuBLAS documents neither its rounding nor which kernels it takes (the
// emulator rounds to nearest even; tests/cuda/test_cuda_bf16.cpp runs its rounding tests both
// ways, so a GPU run says). INITLAB_BF16_GEMM_FAST=1 turns it on (read once), set_bf16_fast_gemm
// overrides either; `vit-bf16fast` in bench/gpu.sh times it.
bool bf16_fast_gemm_enabled();
void set_bf16_fast_gemm(bool on);

// C[M,N] = alpha·op(A)·op(B) + beta·C, where op(A) is [M,K] (A stored [K,M] when trans_a) and
// op(B) is [K,N] (B stored [N,K] when trans_b). All row-major, contiguous, device memory.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          const float* B, float beta, float* C);
// Whether gemm (and gemm_bias's cuBLASLt path) run through cuBLASLt with an algorithm tuned for
// each shape: the first time a shape comes (outside a graph capture), up to 8 candidates of
// cuBLASLt's heuristic are each timed on the device and the fastest is kept for the process.
// cuBLAS's own choice for ViT-Tiny's weight gradients (K = 32,896 tokens) was an sm_80 split-K
// kernel with a reduction pass on the H100 (session 12). Off by default: never run on a GPU, and
// a tuned choice may differ from run to run (timing noise), so results are not bit-repeatable
// across processes. INITLAB_GEMM_AUTOTUNE=1 turns it on (read once), set_gemm_autotune overrides
// either; gemm_autotune_stats counts the shapes tuned and the calls that took a tuned algorithm.
struct GemmAutotuneStats {
    uint64_t tunings = 0, tuned_calls = 0;
};
bool gemm_autotune_enabled();
void set_gemm_autotune(bool on);
GemmAutotuneStats gemm_autotune_stats();
// C[M,N] = op(A)·op(B) + bias + residual, bias [N] added to every row, residual [M,N] (either null:
// left out): linear's forward. With cuBLASLt's bias epilogue where lt_bias_enabled() and there is a
// bias (one pass over C; a residual is cuBLASLt's C, read by that pass, with C written as its D),
// else the rows of bias + residual (engine/cuda/elementwise.h) then gemm with beta = 1 (C written
// twice, read once more), also where cuBLASLt declines the shapes. lt_bias_enabled: off by
// default, as it has never run on a GPU (the emulator models cuBLASLt's documented semantics);
// INITLAB_LT_BIAS=1 turns it on (read once), set_lt_bias overrides either; `vit-lt` in
// bench/gpu.sh times it.
void gemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, const float* B,
               const float* bias, float* C, const float* residual = nullptr);
// C[M,N] = op(A)·op(B) + beta·C and dbias[M] = Σ_k op(A)[m, k]: linear's weight gradient and its
// bias gradient (A the output's gradient, transposed). With cuBLASLt's bias-gradient epilogue
// (BGRADB: the sums made as the GEMM reads A, one pass over it instead of two) where
// lt_bias_enabled() and A is read as fp32 (not under bf16's rounded copies), else gemm then
// reduce.h's sum_dim.
void gemm_dbias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, const float* B,
                float beta, float* C, float* dbias);
bool lt_bias_enabled();
void set_lt_bias(bool on);
uint64_t lt_bias_calls();  // GEMMs that took a cuBLASLt bias epilogue (gemm_bias's or gemm_dbias's)
// `batch` independent GEMMs (cublasSgemmStridedBatched, or cublasGemmStridedBatchedEx in bf16); a
// stride of 0 shares that operand.
void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, const float* A,
                  int64_t stride_a, const float* B, int64_t stride_b, float* C, int64_t stride_c);
// The same with row strides (leading dimensions, in floats, at least the stored row length; 0:
// packed rows) for each operand: a matrix's rows may be padded, e.g. to 16 bytes, which cuBLAS's
// fastest tensor-core kernels need of every row and every matrix of the batch (engine/cuda/nn.cu's
// attention pads P's rows for that reason). beta: C = op(A)·op(B) + beta·C (attention adds its
// edge keys' share this way).
void gemm_batched_ld(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, const float* A,
                     int64_t stride_a, int64_t lda, const float* B, int64_t stride_b, int64_t ldb, float* C,
                     int64_t stride_c, int64_t ldc, float beta = 0.f);

// Where the matrices of a batch start, in elements from the operand's pointer: matrix i at
// (i / group)·group_stride + (i % group)·stride, its rows ld apart (ld 0: packed rows); group 0:
// at i·stride. Attention's heads in a token-major [B, T, H·D] tensor (engine/attention_layout.h)
// are groups of H matrices D apart, one group a batch entry (T·ld elements) apart.
struct BatchLayout {
    int64_t ld = 0, stride = 0, group = 0, group_stride = 0;
    ENGINE_HD int64_t offset(int64_t i) const {
        return group ? (i / group) * group_stride + (i % group) * stride : i * stride;
    }
};
// gemm_batched_ld with a layout per operand. Where every layout is one stride: one strided batched
// call. Else (the grouped operands of one group size, which divides the batch) one strided call
// per position in the group, batched over the groups: attention's H calls, each batched over B;
// or, where pointer_batch_enabled(), one call over the whole batch from arrays of the matrices'
// addresses (cublasSgemmBatched / cublasGemmBatchedEx, the arrays written by a kernel so that a
// captured graph replays them): a call per head was too small to fill an H100 at the LM's batch
// 32 (session 13). Off by default: never run on a GPU, and cuBLAS does not say which kernels it
// takes for address arrays; INITLAB_GEMM_POINTER_BATCH=1 turns it on (read once),
// set_pointer_batch overrides either; pointer_batch_calls counts the calls that took it.
void gemm_batched_layout(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, const float* A,
                         BatchLayout la, const float* B, BatchLayout lb, float* C, BatchLayout lc, float beta = 0.f);
bool pointer_batch_enabled();
void set_pointer_batch(bool on);
uint64_t pointer_batch_calls();

}  // namespace engine::cuda
