// tests/test_reduce.cpp: sum, mean, max over dims, sum_to.
#include <catch2/catch.hpp>

#include "engine/error.h"
#include "engine/ops.h"
#include "tests/helpers.h"

using namespace engine;
using test::gradcheck;
using test::param;

TEST_CASE("reductions match direct loops", "[reduce]") {
    Tensor x = Tensor::arange(24).reshape({2, 3, 4});
    CHECK(sum(x).item() == 276.f);
    Tensor s1 = sum(x, {1});
    CHECK(s1.shape() == Shape({2, 4}));
    CHECK(s1.at({1, 2}) == 14 + 18 + 22);
    Tensor s02 = sum(x, {0, -1}, true);
    CHECK(s02.shape() == Shape({1, 3, 1}));
    CHECK(s02.at({0, 1, 0}) == (4 + 5 + 6 + 7) + (16 + 17 + 18 + 19));
    CHECK(mean(x, {2}).at({0, 0}) == 1.5f);
    CHECK(mean(x).item() == 11.5f);
    Tensor y = Tensor::from_vector(std::vector<float>{1, 5, 3, 7, 2, 6}, {2, 3});
    CHECK(max(y, {1}).to_vector() == std::vector<float>{5, 7});
    CHECK(max(y, {0}, true).shape() == Shape({1, 3}));
    CHECK(max(y).item() == 7.f);
    CHECK_THROWS_WITH(max(Tensor::zeros({2, 0}), {1}), Catch::Contains("max: reducing [2,0] over an empty dim 1"));
    // Empty, so nothing is allocated: only the length of dim 1 is past int32's argmax.
    CHECK_THROWS_WITH(max(Tensor::zeros({0, int64_t(INT32_MAX) + 1}), {1}),
                      Catch::Contains("max: dim 1 of [0,2147483648] is longer than the int32 indices of its argmax"));
    CHECK_THROWS_WITH(sum(x, {3}), Catch::Contains("sum: dim 3 out of range"));
    CHECK(sum_to(Tensor::ones({2, 3, 4}), {3, 1}).to_vector() == std::vector<float>{8, 8, 8});
    CHECK_THROWS_WITH(sum_to(Tensor::ones({2, 3}), {4}), Catch::Contains("sum_to"));
}

TEST_CASE("sum", "[gradcheck]") {
    gradcheck("sum_all", [](auto& in) { return sum(in[0]); }, {param({3, 4}, 1)});
    gradcheck("sum_dims", [](auto& in) { return sum(in[0], {0, 2}); }, {param({2, 3, 4}, 2)});
    gradcheck("sum_keepdim", [](auto& in) { return sum(in[0], {1}, true); }, {param({2, 3, 4}, 3)});
}

TEST_CASE("mean", "[gradcheck]") {
    gradcheck("mean", [](auto& in) { return mean(in[0], {-1}); }, {param({3, 5}, 4)});
}

TEST_CASE("max", "[gradcheck]") {
    // Distinct values (a permutation) so the argmax is unambiguous under ±ε.
    auto perm = Generator(5).permutation(24);
    std::vector<float> v(perm.begin(), perm.end());
    Tensor x = Tensor::from_vector(v, {2, 3, 4}).requires_grad_();
    gradcheck("max", [](auto& in) { return max(in[0], {1}); }, {x});
    gradcheck("max_two_dims", [](auto& in) { return max(in[0], {0, 2}, true); }, {x});
    gradcheck("max_all", [](auto& in) { return max(in[0]); }, {x});
}

TEST_CASE("sum_to", "[gradcheck]") {
    gradcheck("sum_to", [](auto& in) { return sum_to(in[0], {3, 1}); }, {param({2, 3, 4}, 6)});
}
