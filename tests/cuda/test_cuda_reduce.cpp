// tests/cuda/test_cuda_reduce.cpp: sum, mean, max and sum_to on the device against the CPU
// (check_parity), forward and backward: single dims of 1-d to 3-d shapes with sizes 1, 7, 33 and
// 1025 (both reduction layouts: contiguous rows, inner == 1, and columns, inner > 1; rows short
// enough for one warp and long enough for a block), several dims, all dims, keepdim; long sums
// with few outputs (the chunked two-pass path); max's first-argmax on ties and NaNs; repeated sums
// give the same bits.
//
// Tolerances: sums and means atol 1e-5, rtol 1e-5 (both backends accumulate in double, in
// different orders, over up to 1025 terms, here up to 9000 for the chunked path); max picks an
// element and routes the gradient to it, so its forward and backward are exact (atol 0, rtol 0);
// the backward of sum and mean broadcasts the gradient (exact up to the final scaling of mean:
// kSum is used for both).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include "tests/cuda/parity.h"

using engine::Device;
using engine::Shape;
using engine::Tensor;
using test::check_parity;
using test::randn;

namespace {

const test::Tol kSum{1e-5f, 1e-5f};
const test::Tol kExact{0.f, 0.f};

// sum, mean and max of randn(s) over dims (keepdim or not), forward and backward against the CPU
// (a fresh input for each op: check_parity's backward accumulates into the CPU input's .grad).
void check_all(const Shape& s, const std::vector<int>& dims, bool keepdim) {
    std::string where = s.str() + " dims {";
    for (int d : dims) where += std::to_string(d) + ",";
    where += keepdim ? "} keepdim" : "}";
    INFO(where);
    check_parity("sum", [=](auto& in) { return engine::sum(in[0], dims, keepdim); }, {randn(s)}, kSum, kSum);
    check_parity("mean", [=](auto& in) { return engine::mean(in[0], dims, keepdim); }, {randn(s)}, kSum, kSum);
    check_parity("max", [=](auto& in) { return engine::max(in[0], dims, keepdim); }, {randn(s)}, kExact, kExact);
}

}  // namespace

TEST_CASE("cuda sum/mean/max over one dim: sizes 1, 7, 33, 1025, rows and columns", "[cuda]") {
    std::vector<Shape> shapes = {{1}, {7}, {33}, {1025}, {3, 1025}, {1025, 3}, {7, 33}, {1, 7}, {7, 1},
                                 {2, 7, 33}, {33, 1, 7}};
    for (const Shape& s : shapes) {
        for (int d = 0; d < s.ndim; d++) {
            for (bool keepdim : {false, true}) check_all(s, {d}, keepdim);
        }
        check_all(s, {-1}, false);  // negative dims count from the end
    }
}

TEST_CASE("cuda sum/mean/max over several dims and over all dims", "[cuda]") {
    check_all({2, 7, 33}, {0, 2}, false);
    check_all({2, 7, 33}, {1, 2}, true);
    check_all({2, 7, 33}, {0, 1}, false);
    check_all({4, 3, 5, 2}, {1, 3}, true);
    check_all({4, 3, 5, 2}, {3, 0, 2}, false);  // unsorted
    for (Shape s : {Shape{1}, Shape{1025}, Shape{3, 1025}, Shape{1025, 3}, Shape{2, 7, 33}}) {
        check_all(s, {}, false);
        check_all(s, {}, true);
    }
}

TEST_CASE("cuda sum: long reductions with few outputs (two passes over chunks)", "[cuda]") {
    // > 4096 terms and fewer than 256 outputs: the chunked path, rows (inner == 1) and columns.
    check_parity("sum [5000]", [](auto& in) { return engine::sum(in[0]); }, {randn({5000})}, kSum, kSum);
    check_parity("sum [2, 9000] dim 1", [](auto& in) { return engine::sum(in[0], {1}); }, {randn({2, 9000})}, kSum,
                 kSum);
    check_parity("sum [4500, 3] dim 0", [](auto& in) { return engine::sum(in[0], {0}); }, {randn({4500, 3})}, kSum,
                 kSum);
    check_parity("mean [4500, 3] dim 0", [](auto& in) { return engine::mean(in[0], {0}, true); }, {randn({4500, 3})},
                 kSum, kSum);
}

TEST_CASE("cuda sum: the same input gives the same bits", "[cuda]") {
    Tensor x = randn({3, 5000}, false).to(Device::CUDA);
    for (int d : {0, 1}) {
        std::vector<float> first = engine::sum(x, {d}).to_vector(), second = engine::sum(x, {d}).to_vector();
        REQUIRE(first == second);
    }
}

TEST_CASE("cuda max: the first maximum wins on ties, NaNs as on the CPU", "[cuda]") {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    // Rows with repeated maxima at several places (the warp's lanes hold different candidates).
    std::vector<float> v(4 * 40);
    for (size_t i = 0; i < v.size(); i++) v[i] = (float)((i * 7) % 5);  // 0..4, many ties of 4
    v[1 * 40 + 0] = nan;  // row 1: a NaN first stays the max
    v[2 * 40 + 5] = nan;  // row 2: a later NaN is skipped
    Tensor x = Tensor::from_vector(v, {4, 40});
    x.requires_grad_(true);
    check_parity("max rows", [](auto& in) { return engine::max(in[0], {1}); }, {x}, kExact, kExact);

    // The same along columns (inner > 1), and over a long row (one block per row).
    std::vector<float> vt = v;
    vt[2] = nan;  // column 2 starts with a NaN
    Tensor xt = Tensor::from_vector(vt, {40, 4});
    xt.requires_grad_(true);
    check_parity("max cols", [](auto& in) { return engine::max(in[0], {0}); }, {xt}, kExact, kExact);
    std::vector<float> w(2 * 1500);
    for (size_t i = 0; i < w.size(); i++) w[i] = (float)((i * 13) % 9);
    Tensor xl = Tensor::from_vector(w, {2, 1500});
    xl.requires_grad_(true);
    check_parity("max long rows", [](auto& in) { return engine::max(in[0], {1}); }, {xl}, kExact, kExact);
}

TEST_CASE("cuda sum_to: broadcast gradients summed back", "[cuda]") {
    struct Case { Shape from, to; };
    std::vector<Case> cases = {
        {{7, 33}, {33}}, {{7, 33}, {7, 1}}, {{7, 33}, {1, 33}}, {{2, 3, 5}, {3, 1}}, {{1025, 3}, {1, 3}},
        {{3, 1025}, {1}}, {{7, 33}, {7, 33}},
    };
    for (auto& c : cases) {
        INFO(c.from.str() << " -> " << c.to.str());
        Shape to = c.to;
        check_parity("sum_to", [to](auto& in) { return engine::sum_to(in[0], to); }, {randn(c.from)}, kSum, kSum);
    }
}
