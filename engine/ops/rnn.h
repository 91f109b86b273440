// engine/ops/rnn.h: the fused LSTM cell.
#pragma once
#include "engine/tensor.h"

namespace engine {

// One LSTM step from pre-activation gates [B, 4H] (order i, f, g, o: PyTorch's and cuDNN's) and
// the previous cell state c_prev [B, H]:
//   c = σ(f)·c_prev + σ(i)·tanh(g),   h = σ(o)·tanh(c).
// Returns [2, B, H] with h at index 0 and c at index 1 (narrow(0, ...) gives views of each).
Tensor lstm_cell(const Tensor& gates, const Tensor& c_prev);

}  // namespace engine
