// engine/cuda/elementwise.h: the pointwise kernels on the GPU (engine/cuda/elementwise.cu), with the
// signatures of engine/cpu/elementwise.h (see there for what each computes) so ON_DEVICE can pick
// either. Pointers are device memory; Shapes are host values.
#pragma once
#include <cstdint>
#include "engine/cpu/elementwise.h"  // BinaryOp, BiasAct (one enum each for both backends)
#include "engine/tensor.h"

namespace engine::cuda {

using cpu::BiasAct;
using cpu::BinaryOp;

void binary(BinaryOp op, const float* a, const Shape& a_shape, const float* b, const Shape& b_shape,
            float* out, const Shape& out_shape);
void binary_scalar(BinaryOp op, const float* a, float s, float* out, int64_t n);

// Instantiated for every functor of engine/ops/pointwise.h.
template <typename F> void unary_forward(const float* x, float* y, int64_t n);
// x (y) is not read, and may be null, where F::kReadsX (F::kReadsY) is false.
template <typename F> void unary_backward(const float* x, const float* y, const float* dy, float* dx, int64_t n);

// y[r, :] = bias + residual[r, :] for each of `rows` rows of n (bias or residual null: left out):
// a linear's output before its GEMM adds x·Wᵀ.
void bias_rows(const float* bias, float* y, int64_t rows, int64_t n, const float* residual = nullptr);

// y = act(x + bias) over [rows, n]; dx = dy·act'(x + bias) and dbias = Σ_rows dx (null: not
// wanted), summed per slice of rows as dx is written, then over the slices by sum_dim
// (engine/cuda/reduce.h): deterministic. The backward's y (null:
// not wanted) gets the forward's output again, the same bits, and may be dy itself (as the CPU's,
// engine/cpu/elementwise.h).
void bias_act_forward(const float* x, const float* bias, float* y, int64_t rows, int64_t n, BiasAct act);
void bias_act_backward(const float* x, const float* bias, const float* dy, float* dx, float* dbias, float* y,
                       int64_t rows, int64_t n, BiasAct act);
// Gated, y = act(x + bias)·gate: engine/cpu/elementwise.h's, the same kernels with a gate.
void bias_act_gate_forward(const float* x, const float* bias, const float* gate, float* y, int64_t rows, int64_t n,
                           BiasAct act);
void bias_act_gate_backward(const float* x, const float* bias, const float* gate, const float* dy, float* dx,
                            float* dbias, float* dgate, int64_t rows, int64_t n, BiasAct act);

void masked_relu2_forward(const float* x, float* y, int64_t outer, int64_t T, int64_t S, float scale, bool causal);
void masked_relu2_backward(const float* x, const float* dy, float* dx, int64_t outer, int64_t T, int64_t S,
                           float scale, bool causal);

void pow_forward(const float* x, float p, float* y, int64_t n);
void pow_backward(const float* x, float p, const float* dy, float* dx, int64_t n);

// dst[i] += src[i] (gradient accumulation).
void add_inplace(float* dst, const float* src, int64_t n);

}  // namespace engine::cuda
