// tests/test_shape.cpp: permute, transpose, slice, split, concat, index ops, masks.
#include <catch2/catch.hpp>

#include "engine/error.h"
#include "engine/ops.h"
#include "tests/helpers.h"

using namespace engine;
using test::gradcheck;
using test::param;

TEST_CASE("permute and transpose move elements where they belong", "[shape]") {
    Tensor x = Tensor::arange(24).reshape({2, 3, 4});
    Tensor p = permute(x, {2, 0, 1});
    CHECK(p.shape() == Shape({4, 2, 3}));
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++) CHECK(p.at({k, i, j}) == x.at({i, j, k}));
    Tensor t = transpose(x, 0, -1);
    CHECK(t.at({3, 1, 0}) == x.at({0, 1, 3}));
    CHECK_THROWS_WITH(permute(x, {0, 0, 1}), Catch::Contains("repeated"));
}

TEST_CASE("permute and transpose move int32 tensors bit for bit", "[shape]") {
    // Targets and ids: values whose bits as floats are denormals, NaNs and negative numbers.
    std::vector<int32_t> v = {0, 1, -1, 7, 10000, INT32_MAX, INT32_MIN, 0x7FC00001, 0x7F800001, -100, 3, 42};
    Tensor x = Tensor::from_vector(v, {3, 4});
    Tensor t = transpose(x, 0, 1);
    CHECK(t.dtype() == DType::I32);
    CHECK(t.shape() == Shape({4, 3}));
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) CHECK(t.data_i32()[j * 3 + i] == v[i * 4 + j]);
}

TEST_CASE("slice, split, chunk and concat", "[shape]") {
    Tensor x = Tensor::arange(24).reshape({2, 3, 4});
    Tensor s = slice(x, 2, 1, 3);
    CHECK(s.shape() == Shape({2, 3, 2}));
    CHECK(s.at({1, 2, 1}) == x.at({1, 2, 2}));
    auto parts = split(x, {1, 2}, 1);
    CHECK(parts[1].shape() == Shape({2, 2, 4}));
    CHECK(parts[1].at({0, 0, 0}) == 4.f);
    Tensor back = concat(parts, 1);
    CHECK(test::max_abs_diff(back, x) == 0.f);
    CHECK(chunk(x, 2, -1)[1].at({0, 0, 0}) == 2.f);
    CHECK_THROWS_WITH(concat({x, Tensor::zeros({2, 2, 3})}, 1), Catch::Contains("does not match"));
    CHECK_THROWS_WITH(chunk(x, 3, 2), Catch::Contains("equal parts"));
}

TEST_CASE("index_select, gather, embedding and masks", "[shape]") {
    Tensor x = Tensor::arange(12).reshape({3, 4});
    Tensor idx = Tensor::from_vector(std::vector<int32_t>{2, 0, 2}, {3});
    Tensor r = index_select(x, 0, idx);
    CHECK(r.shape() == Shape({3, 4}));
    CHECK(r.at({0, 1}) == 9.f);
    CHECK(index_select(x, 1, idx).at({1, 0}) == 6.f);
    Tensor gi = Tensor::from_vector(std::vector<int32_t>{3, 0, 1}, {3, 1});
    Tensor g = gather(x, 1, gi);
    CHECK(g.to_vector() == std::vector<float>{3, 4, 9});
    Tensor ids = Tensor::from_vector(std::vector<int32_t>{1, 1, 0, 2}, {2, 2});
    Tensor e = embedding(x, ids);
    CHECK(e.shape() == Shape({2, 2, 4}));
    CHECK(e.at({1, 1, 3}) == 11.f);
    CHECK_THROWS_WITH(embedding(x, Tensor::from_vector(std::vector<int32_t>{0, 3}, {2})),
                      Catch::Contains("embedding: index 3 out of range [0, 3) at position 1 for input [3,4]"));
    Tensor m = causal_mask(3);
    CHECK(m.to_vector() == std::vector<float>{0, 1, 1, 0, 0, 1, 0, 0, 0});
    Tensor f = masked_fill(Tensor::zeros({2, 3, 3}), m, -1e9f);
    CHECK(f.at({1, 0, 2}) == -1e9f);
    CHECK(f.at({1, 2, 0}) == 0.f);
}

TEST_CASE("permute", "[gradcheck]") {
    gradcheck("permute", [](auto& in) { return permute(in[0], {1, 2, 0}); }, {param({2, 3, 4}, 1)});
}
TEST_CASE("transpose", "[gradcheck]") {
    gradcheck("transpose", [](auto& in) { return transpose(in[0], 0, 2); }, {param({2, 3, 4}, 2)});
}
TEST_CASE("concat", "[gradcheck]") {
    gradcheck("concat", [](auto& in) { return concat({in[0], in[1]}, 1); }, {param({2, 3, 2}, 3), param({2, 1, 2}, 4)});
    // The first and the last dim: other strides between the pieces.
    gradcheck("concat_dim0", [](auto& in) { return concat({in[0], in[1]}, 0); }, {param({1, 3}, 11), param({2, 3}, 12)});
    gradcheck("concat_last", [](auto& in) { return concat({in[0], in[1]}, -1); }, {param({2, 2}, 13), param({2, 3}, 14)});
}
TEST_CASE("slice", "[gradcheck]") {
    gradcheck("slice", [](auto& in) { return slice(in[0], 1, 1, 3); }, {param({2, 4, 3}, 5)});
    gradcheck("slice_dim0", [](auto& in) { return slice(in[0], 0, 1, 3); }, {param({4, 3}, 15)});
    gradcheck("slice_last", [](auto& in) { return slice(in[0], 2, 0, 2); }, {param({2, 2, 3}, 16)});
}
TEST_CASE("split", "[gradcheck]") {
    gradcheck("split", [](auto& in) { auto p = split(in[0], {1, 3}, 1); return mul(p[0], sum(p[1], {1}, true)); },
              {param({2, 4, 3}, 6)});
}
TEST_CASE("index_select", "[gradcheck]") {
    Tensor idx = Tensor::from_vector(std::vector<int32_t>{2, 0, 2, 1}, {4});
    gradcheck("index_select", [idx](auto& in) { return index_select(in[0], 1, idx); }, {param({2, 3, 2}, 7)});
    // Rows (dim 0), with a repeated index: its gradient is the sum of both uses.
    gradcheck("index_select_dim0", [idx](auto& in) { return index_select(in[0], 0, idx); }, {param({3, 2}, 17)});
}
TEST_CASE("gather", "[gradcheck]") {
    Tensor idx = Tensor::from_vector(std::vector<int32_t>{0, 2, 2, 1, 1, 1}, {3, 2});
    gradcheck("gather", [idx](auto& in) { return gather(in[0], 1, idx); }, {param({3, 4}, 8)});
    Tensor rows = Tensor::from_vector(std::vector<int32_t>{2, 0, 2, 1, 1, 0}, {2, 3});
    gradcheck("gather_dim0", [rows](auto& in) { return gather(in[0], 0, rows); }, {param({3, 3}, 18)});
}
TEST_CASE("embedding", "[gradcheck]") {
    Tensor ids = Tensor::from_vector(std::vector<int32_t>{1, 1, 0, 4, 4, 4}, {2, 3});
    gradcheck("embedding", [ids](auto& in) { return embedding(in[0], ids); }, {param({5, 3}, 9)});
}
TEST_CASE("masked_fill", "[gradcheck]") {
    Tensor m = causal_mask(3);
    gradcheck("masked_fill", [m](auto& in) { return masked_fill(in[0], m, -5.f); }, {param({2, 3, 3}, 10)});
}
