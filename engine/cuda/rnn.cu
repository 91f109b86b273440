// engine/cuda/rnn.cu: the LSTM cell (engine/cuda/rnn.h), forward and backward, one thread per
// (b, j) element of the [B, H] state: consecutive threads take consecutive j, so the four gate
// reads (rows i, f, g, o of the same b, H apart) and the state reads and writes are coalesced.
// The math is the CPU's (engine/cpu/rnn.cpp), with the accurate expf/tanhf (not the fast
// intrinsics), so the two agree to a few ulps.
#include "engine/cuda/kernel.h"
#include "engine/cuda/rnn.h"

namespace engine::cuda {

__device__ __forceinline__ float sigmoidf_(float x) { return 1.f / (1.f + expf(-x)); }

__global__ void lstm_forward_kernel(const float* gates, const float* c_prev, float* h, float* c, int64_t B,
                                    int64_t H) {
    GRID_STRIDE_LOOP(k, B * H) {
        int64_t b = k / H, j = k % H;
        const float* g = gates + b * 4 * H;
        float i = sigmoidf_(g[j]), f = sigmoidf_(g[H + j]), gg = tanhf(g[2 * H + j]), o = sigmoidf_(g[3 * H + j]);
        float cj = f * c_prev[k] + i * gg;
        c[k] = cj;
        h[k] = o * tanhf(cj);
    }
}

// With tc = tanh(c): dc_total = dc + dh·o·(1 − tc²); di = dc_total·g·i(1−i),
// df = dc_total·c_prev·f(1−f), dg = dc_total·i·(1−g²), do = dh·tc·o(1−o); dc_prev = dc_total·f.
__global__ void lstm_backward_kernel(const float* gates, const float* c_prev, const float* c, const float* dh,
                                     const float* dc, float* dgates, float* dc_prev, int64_t B, int64_t H) {
    GRID_STRIDE_LOOP(k, B * H) {
        int64_t b = k / H, j = k % H;
        const float* g = gates + b * 4 * H;
        float i = sigmoidf_(g[j]), f = sigmoidf_(g[H + j]), gg = tanhf(g[2 * H + j]), o = sigmoidf_(g[3 * H + j]);
        float tc = tanhf(c[k]);
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

void lstm_cell_forward(const float* gates, const float* c_prev, float* h, float* c, int64_t B, int64_t H) {
    if (B * H == 0) return;
    KERNEL_LAUNCH(lstm_forward_kernel, blocks_for(B * H), kBlockSize, 0, gates, c_prev, h, c, B, H);
}

void lstm_cell_backward(const float* gates, const float* c_prev, const float* c, const float* dh, const float* dc,
                        float* dgates, float* dc_prev, int64_t B, int64_t H) {
    if (B * H == 0 || (!dgates && !dc_prev)) return;
    KERNEL_LAUNCH(lstm_backward_kernel, blocks_for(B * H), kBlockSize, 0, gates, c_prev, c, dh, dc, dgates, dc_prev,
                  B, H);
}

}  // namespace engine::cuda
