// tests/test_token_similarity.cpp: apps::token_cosine, the rank-collapse figure of inspect_init
// and train_lm, on inputs whose answer is known.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "apps/common/token_similarity.h"
#include "engine/error.h"
#include "engine/rng.h"

using engine::Tensor;

namespace {
Tensor tokens(const std::vector<float>& v, const engine::Shape& shape) { return Tensor::from_vector(v, shape); }
}  // namespace

TEST_CASE("token_cosine: 1 for one direction, 0 for orthogonal tokens, -1/(T-1) at the least", "[apps]") {
    // One sequence whose tokens are the same direction at different lengths: 1.
    CHECK(apps::token_cosine(tokens({1, 2, 0, 2, 4, 0, 0.5f, 1, 0}, {1, 3, 3})) ==
          Approx(1.0).margin(1e-12));
    // The basis vectors: every pair orthogonal.
    CHECK(apps::token_cosine(tokens({1, 0, 0, 0, 1, 0, 0, 0, 1}, {1, 3, 3})) == Approx(0.0).margin(1e-12));
    // Two opposite tokens: -1, which is -1/(T-1) for T = 2.
    CHECK(apps::token_cosine(tokens({1, 2, -3, -6}, {1, 2, 2})) == Approx(-1.0).margin(1e-12));
    // Three tokens at 120 degrees sum to zero: -1/2 = -1/(T-1), the least T = 3 allows.
    float h = std::sqrt(3.f) / 2;
    CHECK(apps::token_cosine(tokens({1, 0, -0.5f, h, -0.5f, -h}, {1, 3, 2})) == Approx(-0.5).margin(1e-6));
    // The batch mean: a collapsed sequence (1) and an orthogonal one (0).
    CHECK(apps::token_cosine(tokens({3, 0, 1, 0, 0, 1, 1, 0}, {2, 2, 2})) == Approx(0.5).margin(1e-12));
    // A zero token is orthogonal to the others: pairs (a, a) = 1, (a, 0) = (0, a) = 0, over 6 pairs.
    CHECK(apps::token_cosine(tokens({1, 1, 2, 2, 0, 0}, {1, 3, 2})) == Approx(2.0 / 6).margin(1e-12));
}

TEST_CASE("token_cosine: the pairwise mean, on random tokens", "[apps]") {
    engine::manual_seed(7);
    Tensor x = Tensor::normal({3, 5, 4});
    const float* p = x.data_f32();
    double want = 0;
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 5; j++) {
                if (i == j) continue;
                const float *u = p + (b * 5 + i) * 4, *v = p + (b * 5 + j) * 4;
                double uv = 0, uu = 0, vv = 0;
                for (int d = 0; d < 4; d++) uv += u[d] * v[d], uu += u[d] * u[d], vv += v[d] * v[d];
                want += uv / std::sqrt(uu * vv);
            }
    CHECK(apps::token_cosine(x) == Approx(want / (3 * 20)).epsilon(1e-6));
    CHECK_THROWS_AS(apps::token_cosine(Tensor::normal({5, 4})), engine::Error);     // not [B, T, D]
    CHECK_THROWS_AS(apps::token_cosine(Tensor::normal({2, 1, 4})), engine::Error);  // one token: no pairs
}
