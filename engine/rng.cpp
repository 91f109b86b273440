// engine/rng.cpp: Philox4x32-10 and the draws built on it. See rng.h for the stream layout.
#include "engine/rng.h"

#include <algorithm>
#include <cmath>
#include "engine/error.h"

namespace engine {

// Philox4x32-10: 10 rounds of two 32x32->64 multiplies, with the Weyl-sequence key schedule.
void Philox4x32::block(uint64_t seed, uint64_t counter, uint32_t out[4]) {
    const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)M0 * c0, p1 = (uint64_t)M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1; c3 = (uint32_t)p0; c0 = n0; c2 = n2;
        k0 += W0; k1 += W1;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

static inline float to_unit(uint32_t w) { return (float)(w >> 8) * (1.0f / 16777216.0f); }

void Generator::uniform(float* out, int64_t n, float low, float high) {
    uint64_t base = advance((n + 3) / 4);
    #pragma omp parallel for if (n > 65536)
    for (int64_t b = 0; b < (n + 3) / 4; b++) {
        uint32_t w[4];
        Philox4x32::block(seed_, base + b, w);
        for (int j = 0; j < 4 && b * 4 + j < n; j++) out[b * 4 + j] = low + (high - low) * to_unit(w[j]);
    }
}

void Generator::normal(float* out, int64_t n, float mean, float std) {
    uint64_t base = advance((n + 1) / 2);
    #pragma omp parallel for if (n > 65536)
    for (int64_t b = 0; b < (n + 1) / 2; b++) {
        uint32_t w[4];
        Philox4x32::block(seed_, base + b, w);
        for (int j = 0; j < 2 && b * 2 + j < n; j++) {
            // u1 in (0, 1] so the log is finite.
            double u1 = ((w[2 * j] >> 8) + 1.0) / 16777216.0, u2 = (w[2 * j + 1] >> 8) / 16777216.0;
            out[b * 2 + j] = mean + std * (float)(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
        }
    }
}

double erfinv(double x) {
    check(x > -1.0 && x < 1.0, "erfinv: argument {} outside (-1, 1)", x);
    // Initial guess (Winitzki's approximation), then Newton steps on erf(y) - x.
    const double a = 0.147;
    double ln = std::log(1.0 - x * x);
    double t = 2.0 / (M_PI * a) + ln / 2.0;
    double y = std::copysign(std::sqrt(std::sqrt(t * t - ln / a) - t), x);
    for (int i = 0; i < 3; i++) {
        double err = std::erf(y) - x;
        y -= err / (2.0 / std::sqrt(M_PI) * std::exp(-y * y));
    }
    return y;
}

void Generator::trunc_normal(float* out, int64_t n, float mean, float std, float a, float b) {
    check(std > 0 && a < b, "trunc_normal: need std > 0 and a < b (got std={}, a={}, b={})", std, a, b);
    // Map U(0,1) onto [cdf(a), cdf(b)] and invert the normal CDF there.
    auto cdf = [](double z) { return 0.5 * (1.0 + std::erf(z / std::sqrt(2.0))); };
    double lo = cdf((a - mean) / std), hi = cdf((b - mean) / std);
    uniform(out, n, 0.f, 1.f);
    for (int64_t i = 0; i < n; i++) {
        double p = lo + (hi - lo) * out[i];
        double u = std::clamp(2.0 * p - 1.0, -1.0 + 1e-15, 1.0 - 1e-15);
        double v = mean + std * std::sqrt(2.0) * erfinv(u);
        out[i] = (float)std::clamp(v, (double)a, (double)b);
    }
}

void Generator::randint(int32_t* out, int64_t n, int32_t low, int32_t high) {
    check(high > low, "randint: empty range [{}, {})", low, high);
    uint64_t range = (uint64_t)((int64_t)high - low);
    uint64_t base = advance((n + 3) / 4);
    for (int64_t b = 0; b < (n + 3) / 4; b++) {
        uint32_t w[4];
        Philox4x32::block(seed_, base + b, w);
        for (int j = 0; j < 4 && b * 4 + j < n; j++) out[b * 4 + j] = (int32_t)(low + (int64_t)((w[j] * range) >> 32));
    }
}

void Generator::bernoulli(float* out, int64_t n, float p) {
    uniform(out, n, 0.f, 1.f);
    for (int64_t i = 0; i < n; i++) out[i] = out[i] < p ? 1.f : 0.f;
}

std::vector<int32_t> Generator::permutation(int32_t n) {
    std::vector<int32_t> perm(n);
    for (int32_t i = 0; i < n; i++) perm[i] = i;
    for (int32_t i = n - 1; i > 0; i--) {
        int32_t j;
        randint(&j, 1, 0, i + 1);
        std::swap(perm[i], perm[j]);
    }
    return perm;
}

double Generator::uniform_double() {
    uint32_t w[4];
    Philox4x32::block(seed_, advance(1), w);
    return (((uint64_t)w[0] << 21) ^ (w[1] >> 11)) * (1.0 / 9007199254740992.0);
}

Generator& global_generator() {
    static Generator g(0);
    return g;
}

void manual_seed(uint64_t seed) { global_generator().manual_seed(seed); }

}  // namespace engine
