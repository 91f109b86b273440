// tests/test_attention_distance.cpp: apps::mean_attention_distance, inspect_init's attn_dist, on
// maps whose answer is known.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "apps/common/attention_distance.h"
#include "engine/error.h"

using engine::Tensor;

namespace {
// A causal map over T tokens: row i spreads its weight evenly over keys 0..i.
Tensor uniform_causal(int64_t T) {
    std::vector<float> v(T * T, 0.f);
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j <= i; j++) v[i * T + j] = 1.f / (i + 1);
    return Tensor::from_vector(v, {T, T});
}
Tensor identity(int64_t T) {
    std::vector<float> v(T * T, 0.f);
    for (int64_t i = 0; i < T; i++) v[i * T + i] = 1.f;
    return Tensor::from_vector(v, {T, T});
}
}  // namespace

TEST_CASE("attention distance: 0 on the diagonal, (T-1)/4 for uniform causal attention", "[apps]") {
    CHECK(apps::mean_attention_distance(identity(8), apps::sequence_places(8)) == Approx(0.0).margin(1e-12));
    for (int64_t T : {2, 5, 128})
        CHECK(apps::mean_attention_distance(uniform_causal(T), apps::sequence_places(T)) ==
              Approx((T - 1) / 4.0).epsilon(1e-5));
    // Each query attends only to the token before it (query 0 to itself): distance 1 for T−1 of
    // the T queries.
    Tensor prev = Tensor::from_vector(std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0}, {4, 4});
    CHECK(apps::mean_attention_distance(prev, apps::sequence_places(4)) == Approx(0.75).epsilon(1e-6));
}

TEST_CASE("attention distance: skip_self renormalizes over the other keys", "[apps]") {
    // Query i: half on itself, half on key 0. With the self weight: i/2 per query; without it,
    // all the remaining weight is at distance i (query 0 has none left and is not counted).
    int64_t T = 5;
    std::vector<float> v(T * T, 0.f);
    v[0] = 1.f;
    for (int64_t i = 1; i < T; i++) v[i * T + i] = 0.5f, v[i * T] = 0.5f;
    Tensor m = Tensor::from_vector(v, {T, T});
    CHECK(apps::mean_attention_distance(m, apps::sequence_places(T)) == Approx((0 + 0.5 + 1 + 1.5 + 2) / 5));
    CHECK(apps::mean_attention_distance(m, apps::sequence_places(T), true) == Approx((1 + 2 + 3 + 4) / 4.0));
    // The diagonal map has nothing left off itself.
    CHECK_THROWS_AS(apps::mean_attention_distance(identity(3), apps::sequence_places(3), true), engine::Error);
}

TEST_CASE("attention distance: image patches in grid units, the class token left out", "[apps]") {
    apps::TokenPlaces grid = apps::patch_places(2, true);  // class token, then (0,0) (0,1) (1,0) (1,1)
    REQUIRE(grid.size() == 5);
    CHECK(grid[0].empty());
    CHECK(grid[4] == std::vector<double>{1, 1});
    // Every patch looks at the opposite corner with 0.5 and at the class token with 0.5; the class
    // token's own row does not count and the patches' weights are renormalized: distance √2.
    std::vector<float> v(25, 0.f);
    v[0] = 1.f;
    for (int i = 1; i < 5; i++) v[i * 5] = 0.5f, v[i * 5 + (5 - i)] = 0.5f;
    CHECK(apps::mean_attention_distance(Tensor::from_vector(v, {5, 5}), grid) == Approx(std::sqrt(2.0)));
    CHECK_THROWS_AS(apps::mean_attention_distance(identity(4), grid), engine::Error);  // 4 rows, 5 places
    CHECK_THROWS_AS(apps::mean_attention_distance(identity(2), apps::TokenPlaces{{0}, {0, 1}}), engine::Error);
}
