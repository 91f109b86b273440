// engine/cuda/rnn.h: the LSTM cell's pointwise kernels on the GPU (engine/cuda/rnn.cu), with the
// signatures of engine/cpu/rnn.h so ON_DEVICE can pick either. Pointers are device memory.
#pragma once
#include <cstdint>

namespace engine::cuda {

// gates [B, 4H] (i, f, g, o), c_prev [B, H] -> h [B, H], c [B, H].
void lstm_cell_forward(const float* gates, const float* c_prev, float* h, float* c, int64_t B, int64_t H);
// dh, dc [B, H] -> dgates [B, 4H], dc_prev [B, H] (either may be null: not wanted; dc_prev may be
// dc itself: each thread reads its element before writing it).
void lstm_cell_backward(const float* gates, const float* c_prev, const float* c, const float* dh, const float* dc,
                        float* dgates, float* dc_prev, int64_t B, int64_t H);

}  // namespace engine::cuda
