// engine/cpu/rnn.h: the LSTM cell's pointwise kernels.
#pragma once
#include <cstdint>

namespace engine::cpu {

// gates [B, 4H] (i, f, g, o), c_prev [B, H] -> h [B, H], c [B, H].
void lstm_cell_forward(const float* gates, const float* c_prev, float* h, float* c, int64_t B, int64_t H);
// dh, dc [B, H] (the gradients reaching this step's h and c; c is this step's cell state) ->
// dgates [B, 4H], dc_prev [B, H] (either may be null: not wanted). dc_prev may be dc itself:
// each element is read before it is overwritten, so the recurrence can carry dc in place.
void lstm_cell_backward(const float* gates, const float* c_prev, const float* c, const float* dh, const float* dc,
                        float* dgates, float* dc_prev, int64_t B, int64_t H);

}  // namespace engine::cpu
