// tests/test_top1.cpp: apps::top1_matches, train_vit's accuracy count and inspect_init's copy_top1.
#include <catch2/catch.hpp>

#include <vector>

#include "apps/common/top1.h"
#include "engine/error.h"

using engine::Tensor;

TEST_CASE("top1_matches: rows whose arg-max is their id; ties count as the first maximum or as none", "[apps]") {
    // Rows' arg-max: 2, 0, and 1 for the last row, whose maximum 7 comes twice (columns 1 and 2).
    Tensor logits = Tensor::from_vector(std::vector<float>{0, 1, 5, 9, -1, 3, 2, 7, 7}, {3, 3});
    CHECK(apps::top1_matches(logits, Tensor::from_vector(std::vector<int32_t>{2, 0, 1}, {3})) == 3);
    CHECK(apps::top1_matches(logits, Tensor::from_vector(std::vector<int32_t>{2, 0, 2}, {3})) == 2);
    CHECK(apps::top1_matches(logits, Tensor::from_vector(std::vector<int32_t>{0, 1, 0}, {3})) == 0);
    // An LM's logits [B, T, V] against its ids [B, T].
    Tensor lm = Tensor::from_vector(std::vector<float>{1, 0, 0, 1, 1, 0, 0, 1}, {2, 2, 2});
    CHECK(apps::top1_matches(lm, Tensor::from_vector(std::vector<int32_t>{0, 1, 0, 0}, {2, 2})) == 3);
    // copy_top1's count: the tied last row matches neither of its two maxima; nor does a row of zeros.
    CHECK(apps::top1_matches(logits, Tensor::from_vector(std::vector<int32_t>{2, 0, 1}, {3}), apps::Ties::NoMatch) == 2);
    CHECK(apps::top1_matches(logits, Tensor::from_vector(std::vector<int32_t>{2, 0, 2}, {3}), apps::Ties::NoMatch) == 2);
    Tensor zeros = Tensor::zeros({4, 5});
    CHECK(apps::top1_matches(zeros, Tensor::from_vector(std::vector<int32_t>{0, 0, 0, 0}, {4})) == 4);
    CHECK(apps::top1_matches(zeros, Tensor::from_vector(std::vector<int32_t>{0, 0, 0, 0}, {4}), apps::Ties::NoMatch) == 0);
    // One id per row, or a clear error.
    CHECK_THROWS_AS(apps::top1_matches(logits, Tensor::from_vector(std::vector<int32_t>{0, 1}, {2})), engine::Error);
}
