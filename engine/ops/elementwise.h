// engine/ops/elementwise.h: pointwise ops. Binary ops broadcast numpy-style (shapes aligned
// from the right; a dim of 1 stretches); their backward sums the gradient back to each input's
// shape (sum_to).
#pragma once
#include "engine/tensor.h"

namespace engine {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, float s);
Tensor mul(const Tensor& a, float s);
Tensor rsub(float s, const Tensor& a);  // s - a
Tensor rdiv(float s, const Tensor& a);  // s / a

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor pow(const Tensor& x, float p);  // x^p; d/dx = p x^(p-1)
Tensor abs(const Tensor& x);           // d/dx = sign(x), 0 at 0
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor relu2(const Tensor& x);         // squared ReLU: relu(x)^2 (Primer; FLASH's A = relu²(QKᵀ))
Tensor gelu(const Tensor& x);          // x·Φ(x), the exact erf form
Tensor gelu_tanh(const Tensor& x);     // 0.5x(1 + tanh(√(2/π)(x + 0.044715x³)))
Tensor silu(const Tensor& x);          // x·sigmoid(x) (Swish)
// gelu(x + bias) in one pass, bias [n] broadcast over the rows of x [..., n] (approximate: the
// gelu_tanh form). The MLP's fc1 bias and GELU fused: one read of x and one write instead of the
// bias pass, the GELU's read and write; the backward writes dx = dy·gelu'(x + bias) and sums
// dbias = Σ_rows dx (on the CPU in the same pass).
Tensor bias_gelu(const Tensor& x, const Tensor& bias, bool approximate = false);
// silu(x + bias), the same way: GAU's three projections, each a GEMM without its bias first.
Tensor bias_silu(const Tensor& x, const Tensor& bias);
// silu(x + bias) ⊙ gate, gate of x's shape: GAU's U ⊙ A·V with U = silu(x·W_u + b_u) in one pass,
// forward and backward (dx, dbias and dgate from one read of dy), and U never stored: the op keeps
// x and gate, which the two ops kept too, and recomputes silu(x + bias) for dgate. The same bits as
// mul(bias_silu(x, bias), gate) and its backward, dbias up to the order of its sum.
Tensor bias_silu_gate(const Tensor& x, const Tensor& bias, const Tensor& gate);
// scale·relu(x)² over x [..., T, S] (queries by keys), 0 where key j is hidden from query i (with
// causal: j > i + S − T, attention's convention): GAU's A = relu²(Q·Kᵀ)/(n·s) with its causal mask
// in one pass, instead of masked_fill, relu2 and a scalar multiply (the same bits).
Tensor masked_relu2(const Tensor& x, float scale, bool causal);

// Shape both inputs broadcast to; throws naming `op` and both shapes when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, float s) { return add(a, s); }
inline Tensor operator-(const Tensor& a, float s) { return add(a, -s); }
inline Tensor operator*(const Tensor& a, float s) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, float s) { return mul(a, 1.f / s); }
inline Tensor operator*(float s, const Tensor& a) { return mul(a, s); }
inline Tensor operator-(float s, const Tensor& a) { return rsub(s, a); }
inline Tensor operator-(const Tensor& a) { return neg(a); }

}  // namespace engine
