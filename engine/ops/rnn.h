// engine/ops/rnn.h: the LSTM: one fused cell step, and a whole layer's recurrence as one op.
#pragma once
#include "engine/tensor.h"

namespace engine {

// One LSTM step from pre-activation gates [B, 4H] (order i, f, g, o: PyTorch's and cuDNN's) and
// the previous cell state c_prev [B, H]:
//   c = σ(f)·c_prev + σ(i)·tanh(g),   h = σ(o)·tanh(c).
// Returns [2, B, H] with h at index 0 and c at index 1 (narrow(0, ...) gives views of each).
Tensor lstm_cell(const Tensor& gates, const Tensor& c_prev);

// The recurrence of one LSTM layer over T steps, time-major:
//   gates_t = x_proj[t] + b_hh + h_{t-1}·W_hhᵀ,   (h_t, c_t) = lstm_cell(gates_t, c_{t-1}),
// from x_proj [T, B, 4H] (the input projections x_t·W_ihᵀ + b_ih of every step, computed by one
// GEMM before the loop), the starting state h0, c0 [B, H], w_hh [4H, H] and b_hh [4H].
// Returns [T+1, B, H]: the outputs h_0 … h_{T-1}, then the last cell state c_{T-1}, so the outputs,
// the final h and the final c are views (narrow on dim 0).
//
// It is one op, not T cells and T linears, for the backward's sake: the gradients of all gates
// are kept, so dW_hh is one GEMM over the T·B rows and db_hh one reduction (instead of T small
// GEMMs accumulating into .grad), and dx_proj is that gate gradient itself.
Tensor lstm_sequence(const Tensor& x_proj, const Tensor& h0, const Tensor& c0, const Tensor& w_hh, const Tensor& b_hh);

// One whole LSTM layer, time-major, PyTorch's parameters: x [T, B, in], h0 and c0 [B, H],
// w_ih [4H, in], b_ih [4H], w_hh [4H, H], b_hh [4H]. Returns [T+1, B, H] as lstm_sequence does.
// On a CUDA tensor it runs through cuDNN's RNN API when engine/cuda/cudnn_rnn.h's
// cudnn_lstm_sizes() takes it (cuDNN built and on, fp32 or tf32 GEMM precision); otherwise, and on
// the CPU, it is lstm_sequence(linear(x, w_ih, b_ih), h0, c0, w_hh, b_hh), the reference.
Tensor lstm_layer(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& b_ih,
                  const Tensor& w_hh, const Tensor& b_hh);

}  // namespace engine
