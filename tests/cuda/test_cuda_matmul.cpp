// tests/cuda/test_cuda_matmul.cpp: matmul and linear on the device against the CPU (check_parity),
// forward and backward, every layout the op supports; TF32 mode; mixed devices refused.
//
// Tolerances: fp32 GEMMs on both sides summing the same products in a different order. Inputs are
// N(0,1), so with K <= 33 outputs are ~|6| and agree to ~1e-6: atol 1e-4, rtol 1e-4. With K = 1025
// (|C| ~ 32, and a GPU's blocked sums differ more) atol 1e-3, rtol 1e-4.
#include <catch2/catch.hpp>

#include "engine/cuda/runtime.h"
#include "tests/cuda/parity.h"

using engine::Device;
using engine::Shape;
using engine::Tensor;
using test::check_parity;
using test::randn;

namespace {

const test::Tol kTol{1e-4f, 1e-4f};
const test::Tol kTolLongK{1e-3f, 1e-4f};

// op(X) of [rows, cols] with `lead` leading dims: stored [lead..., cols, rows] when transposed.
Shape operand(std::vector<int64_t> lead, bool trans, int64_t rows, int64_t cols) {
    lead.push_back(trans ? cols : rows);
    lead.push_back(trans ? rows : cols);
    return Shape(lead);
}

void check_matmul(const std::string& what, std::vector<int64_t> lead_a, std::vector<int64_t> lead_b, int64_t M,
                  int64_t N, int64_t K, test::Tol tol = kTol) {
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            INFO(what << " ta " << ta << " tb " << tb);
            Tensor a = randn(operand(lead_a, ta, M, K), true, 1), b = randn(operand(lead_b, tb, K, N), true, 2);
            check_parity(what, [ta, tb](auto& in) { return engine::matmul(in[0], in[1], ta, tb); }, {a, b}, tol, tol);
        }
}

struct Tf32Guard {
    bool saved = engine::cuda::tf32();
    ~Tf32Guard() { engine::cuda::set_tf32(saved); }
};

}  // namespace

TEST_CASE("cuda matmul: plain, trans_a, trans_b, both", "[cuda]") {
    check_matmul("matmul 7x33 . 33x5", {}, {}, 7, 5, 33);
    check_matmul("matmul 1x1 . 1x1", {}, {}, 1, 1, 1);
    check_matmul("matmul 1x7 . 7x1", {}, {}, 1, 1, 7);
    check_matmul("matmul 33x1 . 1x7", {}, {}, 33, 7, 1);
}

TEST_CASE("cuda matmul: a dim of 1025", "[cuda]") {
    check_matmul("matmul M=1025", {}, {}, 1025, 2, 3);
    check_matmul("matmul N=1025", {}, {}, 2, 1025, 3);
    check_matmul("matmul K=1025", {}, {}, 3, 2, 1025, kTolLongK);
}

TEST_CASE("cuda matmul: leading dims of A with a shared B (flattened rows, or batched when A is transposed)", "[cuda]") {
    check_matmul("matmul [2,3,7,5] . [5,4]", {2, 3}, {}, 7, 4, 5);
    check_matmul("matmul [1,7,33] . [33,1]", {1}, {}, 7, 1, 33);
}

TEST_CASE("cuda matmul: shared A with a batched B", "[cuda]") {
    check_matmul("matmul [7,5] . [3,5,4]", {}, {3}, 7, 4, 5);
}

TEST_CASE("cuda matmul: batched with equal batch dims", "[cuda]") {
    check_matmul("matmul [2,3,7,5] . [2,3,5,4]", {2, 3}, {2, 3}, 7, 4, 5);
    check_matmul("matmul [1,1,33] . [1,33,7]", {1}, {1}, 1, 7, 33);
}

// Widths of 5, 1025 (the bias rows' per-element kernel) and 12 (its float4 kernel).
TEST_CASE("cuda linear: with and without bias", "[cuda]") {
    for (auto [lead, in, out] : std::vector<std::tuple<std::vector<int64_t>, int64_t, int64_t>>{
             {{2, 7}, 33, 5}, {{1}, 1, 1}, {{1025}, 3, 2}, {{3}, 7, 1025}, {{5, 3}, 9, 12}}) {
        std::vector<int64_t> xs = lead;
        xs.push_back(in);
        Tensor x = randn(Shape(xs), true, 3), w = randn({out, in}, true, 4), b = randn({out}, true, 5);
        INFO("in " << in << " out " << out);
        check_parity("linear + bias", [](auto& t) { return engine::linear(t[0], t[1], t[2]); }, {x, w, b}, kTol, kTol);
        Tensor x2 = randn(Shape(xs), true, 6), w2 = randn({out, in}, true, 7);
        check_parity("linear", [](auto& t) { return engine::linear(t[0], t[1]); }, {x2, w2}, kTol, kTol);
    }
    // Only some inputs need gradients.
    Tensor x = randn({7, 33}, false, 8), w = randn({5, 33}, true, 9), b = randn({5}, false, 10);
    check_parity("linear, grad of w only", [](auto& t) { return engine::linear(t[0], t[1], t[2]); }, {x, w, b}, kTol, kTol);
}

// TF32: inputs rounded to 10 mantissa bits, so results are within ~1e-2 relative of fp32
// (N(0,1) inputs, K = 33: |C| ~ 6, atol 5e-2, rtol 1e-2), and not equal to them.
TEST_CASE("cuda matmul: TF32 mode", "[cuda]") {
    Tf32Guard guard;
    engine::cuda::set_tf32(true);
    const test::Tol tol{5e-2f, 1e-2f};
    Tensor a = randn({7, 33}, true, 11), b = randn({33, 5}, true, 12);
    check_parity("matmul tf32", [](auto& in) { return engine::matmul(in[0], in[1]); }, {a, b}, tol, tol);
    Tensor x = randn({2, 7, 33}, true, 13), w = randn({5, 33}, true, 14), bias = randn({5}, true, 15);
    check_parity("linear tf32", [](auto& t) { return engine::linear(t[0], t[1], t[2]); }, {x, w, bias}, tol, tol);

    Tensor a2 = randn({7, 33}, false, 11), b2 = randn({33, 5}, false, 12);
    Tensor fp32 = engine::matmul(a2, b2), tf32 = engine::matmul(a2.to(Device::CUDA), b2.to(Device::CUDA));
    REQUIRE(fp32.to_vector() != tf32.to_vector());  // the mode really changed the arithmetic
    engine::cuda::set_tf32(false);
    test::require_close("matmul after tf32 off", fp32, engine::matmul(a2.to(Device::CUDA), b2.to(Device::CUDA)), kTol);
}

TEST_CASE("cuda matmul: operands on different devices are refused", "[cuda]") {
    using Catch::Contains;
    Tensor a = randn({3, 4}, false), b = randn({4, 2}, false);
    REQUIRE_THROWS_WITH(engine::matmul(a, b.to(Device::CUDA)), Contains("matmul") && Contains("cpu") && Contains("cuda"));
    Tensor w = randn({2, 4}, false), bias = randn({2}, false);
    REQUIRE_THROWS_WITH(engine::linear(a.to(Device::CUDA), w), Contains("linear") && Contains("cuda"));
    REQUIRE_THROWS_WITH(engine::linear(a.to(Device::CUDA), w.to(Device::CUDA), bias),
                        Contains("linear") && Contains("cpu") && Contains("cuda"));
}
