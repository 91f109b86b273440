// engine/cpu/elementwise.h: CPU loops for pointwise ops, on raw contiguous float arrays.
#pragma once
#include <cstdint>
#include "engine/ops/pointwise.h"  // BiasAct
#include "engine/tensor.h"

namespace engine::cpu {

enum class BinaryOp { Add, Sub, Mul, Div };
using pointwise::BiasAct;

// out = a (op) b with numpy broadcasting; a_shape and b_shape are already left-padded with 1s to
// out_shape's ndim.
void binary(BinaryOp op, const float* a, const Shape& a_shape, const float* b, const Shape& b_shape,
            float* out, const Shape& out_shape);
// out = a (op) s for a scalar s (op applied as a op s).
void binary_scalar(BinaryOp op, const float* a, float s, float* out, int64_t n);

// y = F::f(x) and dx = dy·F::df(x, y), for each functor F of engine/ops/pointwise.h.
template <typename F> void unary_forward(const float* x, float* y, int64_t n);
// x (y) is not read, and may be null, where F::kReadsX (F::kReadsY) is false.
template <typename F> void unary_backward(const float* x, const float* y, const float* dy, float* dx, int64_t n);

// y[r, :] = bias + residual[r, :] for each of `rows` rows of n (bias or residual null: left out):
// a linear's output before its GEMM adds x·Wᵀ.
void bias_rows(const float* bias, float* y, int64_t rows, int64_t n, const float* residual = nullptr);

// Fused bias + activation over x viewed as [rows, n], bias [n]: y = act(x + bias), act the exact
// GELU (Gelu of engine/ops/pointwise.h), its tanh form (GeluTanh) or SiLU (Silu).
void bias_act_forward(const float* x, const float* bias, float* y, int64_t rows, int64_t n, BiasAct act);
// dx = dy·act'(x + bias) (dx always written) and dbias = Σ_rows dx (written, not accumulated; null
// when not wanted), x + bias recomputed. The sum's order depends on the sizes only. y (null: not
// wanted) gets the forward's output act(x + bias) again, the same bits; it may be dy itself (each
// element of dy is read before its place is written), which is how gelu_linear recomputes the
// GELU's output for its weight gradient without a buffer of its own (engine/ops/matmul.cpp).
void bias_act_backward(const float* x, const float* bias, const float* dy, float* dx, float* dbias, float* y,
                       int64_t rows, int64_t n, BiasAct act);
// Gated: y = act(x + bias)·gate, gate [rows, n] (GAU's U ⊙ A·V with U = silu(x + bias)). The
// backward writes dx = (dy·gate)·act'(x + bias) (always), dbias = Σ_rows dx and dgate =
// dy·act(x + bias) (each null: not wanted): the products of mul and bias_act's backward, in order.
void bias_act_gate_forward(const float* x, const float* bias, const float* gate, float* y, int64_t rows, int64_t n,
                           BiasAct act);
void bias_act_gate_backward(const float* x, const float* bias, const float* gate, const float* dy, float* dx,
                            float* dbias, float* dgate, int64_t rows, int64_t n, BiasAct act);

// x viewed as [outer, T, S]: y = scale·relu(x)² where key j is visible to query i (all of them, or
// with causal j <= i + S − T), else 0; dx = dy·scale·2·relu(x) where visible, else 0.
void masked_relu2_forward(const float* x, float* y, int64_t outer, int64_t T, int64_t S, float scale, bool causal);
void masked_relu2_backward(const float* x, const float* dy, float* dx, int64_t outer, int64_t T, int64_t S,
                           float scale, bool causal);

void pow_forward(const float* x, float p, float* y, int64_t n);
void pow_backward(const float* x, float p, const float* dy, float* dx, int64_t n);

// dst[i] += src[i] (gradient accumulation).
void add_inplace(float* dst, const float* src, int64_t n);

}  // namespace engine::cpu
