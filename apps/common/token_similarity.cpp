// apps/common/token_similarity.cpp: see the header.
#include "apps/common/token_similarity.h"

#include <cmath>
#include <vector>
#include "engine/error.h"

namespace apps {

// With u_i the unit vectors of one sequence, Σ_{i≠j} u_i·u_j = |Σ_i u_i|² − Σ_i |u_i|²: one pass
// over the tokens instead of T² dot products.
double token_cosine(const engine::Tensor& x) {
    engine::check(x.ndim() == 3 && x.size(1) >= 2, "token_cosine: {} is not [B, T >= 2, D]", x.shape().str());
    engine::Tensor h = x.to(engine::Device::CPU);
    int64_t B = h.size(0), T = h.size(1), D = h.size(2);
    const float* p = h.data_f32();
    double total = 0;
    for (int64_t b = 0; b < B; b++) {
        std::vector<double> sum(D, 0.0);
        double units = 0;  // Σ |u_i|²: T, less the zero vectors
        for (int64_t t = 0; t < T; t++) {
            const float* v = p + (b * T + t) * D;
            double n2 = 0;
            for (int64_t d = 0; d < D; d++) n2 += (double)v[d] * v[d];
            if (n2 == 0) continue;
            double inv = 1 / std::sqrt(n2);
            for (int64_t d = 0; d < D; d++) sum[d] += v[d] * inv;
            units += 1;
        }
        double s2 = 0;
        for (double v : sum) s2 += v * v;
        total += (s2 - units) / ((double)T * (T - 1));
    }
    return total / B;
}

double position_share(const engine::Tensor& x) {
    engine::check(x.ndim() == 3 && x.size(0) >= 1 && x.size(1) >= 1, "position_share: {} is not [B, T, D]",
                  x.shape().str());
    engine::Tensor h = x.to(engine::Device::CPU);
    int64_t B = h.size(0), T = h.size(1), D = h.size(2);
    const float* p = h.data_f32();
    std::vector<double> mean_t(T * D, 0.0), mean(D, 0.0);
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < T * D; i++) mean_t[i] += p[b * T * D + i] / (double)B;
    for (int64_t i = 0; i < T * D; i++) mean[i % D] += mean_t[i] / (double)T;
    double between = 0, total = 0;
    for (int64_t i = 0; i < T * D; i++) between += (mean_t[i] - mean[i % D]) * (mean_t[i] - mean[i % D]) / T;
    for (int64_t i = 0; i < B * T * D; i++) total += (p[i] - mean[i % D]) * (p[i] - mean[i % D]) / ((double)B * T);
    return total > 0 ? between / total : 0.0;
}

}  // namespace apps
