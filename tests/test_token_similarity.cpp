// tests/test_token_similarity.cpp: apps::token_cosine, the rank-collapse figure of inspect_init
// and train_lm, and apps::position_share, on inputs whose answer is known.
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

TEST_CASE("position_share: 1 for the position's vector alone, 0 without it, the variance ratio between", "[apps]") {
    // Two windows of three tokens in 2-d: channel 0 is the position's (a_t = -1, 0, 1: variance
    // 2/3), channel 1 the window's (e_b = ±2: variance 4). The share is (2/3) / (2/3 + 4) = 1/7.
    std::vector<float> v;
    for (float e : {2.f, -2.f})
        for (float a : {-1.f, 0.f, 1.f}) v.insert(v.end(), {a, e});
    CHECK(apps::position_share(tokens(v, {2, 3, 2})) == Approx(1.0 / 7).epsilon(1e-12));
    // The position's channel alone (the same in every window): 1; the window's alone: 0.
    std::vector<float> pos, win;
    for (size_t i = 0; i < v.size(); i += 2) pos.insert(pos.end(), {v[i], 0.f}), win.insert(win.end(), {0.f, v[i + 1]});
    CHECK(apps::position_share(tokens(pos, {2, 3, 2})) == Approx(1.0).epsilon(1e-12));
    CHECK(apps::position_share(tokens(win, {2, 3, 2})) == Approx(0.0).margin(1e-12));
    // A shared offset changes nothing; a constant input has no variance to share: 0.
    for (size_t i = 0; i < v.size(); i++) v[i] += 5.f;
    CHECK(apps::position_share(tokens(v, {2, 3, 2})) == Approx(1.0 / 7).epsilon(1e-12));
    CHECK(apps::position_share(Tensor::ones({2, 3, 2})) == 0.0);
    // Noise with no position in it: the batch means keep about 1/B of it.
    engine::manual_seed(3);
    CHECK(apps::position_share(Tensor::normal({32, 64, 16})) == Approx(1.0 / 32).epsilon(0.1));
    CHECK_THROWS_AS(apps::position_share(Tensor::normal({5, 4})), engine::Error);
}
