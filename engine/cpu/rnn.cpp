// engine/cpu/rnn.cpp: the LSTM cell, forward and backward in one pass each. The sigmoids and tanhs
// are the vectorizable ones of engine/ops/pointwise.h (this file is compiled with
// -fno-trapping-math, see the Makefile): with libm's scalar expf/tanhf the cells took about 180 ms
// more of a 1.1 s LSTM step (apps/bench lstm, 1 thread).
#include "engine/cpu/rnn.h"

#include "engine/ops/pointwise.h"

namespace engine::cpu {

using pointwise::act_exp;
using pointwise::act_tanh;
static inline float sigmoid(float x) { return 1.f / (1.f + act_exp(-x)); }

void lstm_cell_forward(const float* gates, const float* c_prev, float* h, float* c, int64_t B, int64_t H) {
    #pragma omp parallel for if (B * H > 16384)
    for (int64_t b = 0; b < B; b++) {
        const float* g = gates + b * 4 * H;
        for (int64_t j = 0; j < H; j++) {
            float i = sigmoid(g[j]), f = sigmoid(g[H + j]), gg = act_tanh(g[2 * H + j]), o = sigmoid(g[3 * H + j]);
            float cj = f * c_prev[b * H + j] + i * gg;
            c[b * H + j] = cj;
            h[b * H + j] = o * act_tanh(cj);
        }
    }
}

// With tc = tanh(c): dc_total = dc + dh·o·(1 − tc²); then each gate's derivative through its
// nonlinearity: di = dc_total·g·i(1−i), df = dc_total·c_prev·f(1−f), dg = dc_total·i·(1−g²),
// do = dh·tc·o(1−o); dc_prev = dc_total·f.
void lstm_cell_backward(const float* gates, const float* c_prev, const float* c, const float* dh, const float* dc,
                        float* dgates, float* dc_prev, int64_t B, int64_t H) {
    #pragma omp parallel for if (B * H > 16384)
    for (int64_t b = 0; b < B; b++) {
        const float* g = gates + b * 4 * H;
        for (int64_t j = 0; j < H; j++) {
            int64_t k = b * H + j;
            float i = sigmoid(g[j]), f = sigmoid(g[H + j]), gg = act_tanh(g[2 * H + j]), o = sigmoid(g[3 * H + j]);
            float tc = act_tanh(c[k]);
            float dct = dc[k] + dh[k] * o * (1.f - tc * tc);
            if (dgates) {
                float* dg = dgates + b * 4 * H;
                dg[j] = dct * gg * i * (1.f - i);
                dg[H + j] = dct * c_prev[k] * f * (1.f - f);
                dg[2 * H + j] = dct * i * (1.f - gg * gg);
                dg[3 * H + j] = dh[k] * tc * o * (1.f - o);
            }
            if (dc_prev) dc_prev[k] = dct * f;
        }
    }
}

}  // namespace engine::cpu
