// engine/cpu/optim.cpp: optimizer updates and the gradient norm's pieces (engine/cpu/optim.h),
// one fused loop per parameter tensor.
#include "engine/cpu/optim.h"

#include <cmath>

namespace engine::cpu {

void sgd_step(float* w, const float* g, float* buf, int64_t n, float lr, float wd, float momentum, bool nesterov,
              bool first) {
    #pragma omp parallel for if (n > 65536)
    for (int64_t j = 0; j < n; j++) {
        float d = g[j] + wd * w[j];
        if (buf) {
            buf[j] = first ? d : momentum * buf[j] + d;  // PyTorch starts the buffer at the first gradient
            d = nesterov ? d + momentum * buf[j] : buf[j];
        }
        w[j] -= lr * d;
    }
}

void sgd_step_multi(const SgdTensorList& list, float momentum, bool nesterov, bool first) {
    for (int t = 0; t < list.count; t++)
        sgd_step(list.w[t], list.g[t], list.buf[t], list.offset[t + 1] - list.offset[t], list.lr[t],
                 list.weight_decay[t], momentum, nesterov, first);
}

void adam_step(float* w, const float* g, float* m, float* v, int64_t n, float lr, float wd, float b1, float b2,
               float eps, float bc1, float bc2, bool decoupled) {
    float step_size = lr / bc1, sqrt_bc2 = std::sqrt(bc2);
    #pragma omp parallel for if (n > 65536)
    for (int64_t j = 0; j < n; j++) {
        float d = g[j];
        if (decoupled) w[j] -= lr * wd * w[j];
        else d += wd * w[j];
        m[j] = b1 * m[j] + (1.f - b1) * d;
        v[j] = b2 * v[j] + (1.f - b2) * d * d;
        w[j] -= step_size * m[j] / (std::sqrt(v[j]) / sqrt_bc2 + eps);
    }
}

void adam_step_multi(const AdamTensorList& list, float b1, float b2, float eps, float bc1, float bc2, bool decoupled) {
    for (int t = 0; t < list.count; t++)
        adam_step(list.w[t], list.g[t], list.m[t], list.v[t], list.offset[t + 1] - list.offset[t], list.lr[t],
                  list.weight_decay[t], b1, b2, eps, bc1, bc2, decoupled);
}

void sum_squares_multi(const ConstTensorList& list, double* out) {
    double total = 0;
    for (int t = 0; t < list.count; t++) {
        double sq;
        sum_squares(list.x[t], list.offset[t + 1] - list.offset[t], &sq);
        total += sq;
    }
    *out = total;
}

void sum_squares(const float* x, int64_t n, double* out) {
    double sq = 0;
    for (int64_t j = 0; j < n; j++) sq += (double)x[j] * x[j];
    *out = sq;
}

void scale_inplace(float* x, int64_t n, float s) {
    #pragma omp parallel for if (n > 65536)
    for (int64_t j = 0; j < n; j++) x[j] *= s;
}

void scale_multi(const TensorList& list, float s) {
    for (int t = 0; t < list.count; t++) scale_inplace(list.x[t], list.offset[t + 1] - list.offset[t], s);
}

}  // namespace engine::cpu
