// tests/cuda/test_cuda_rnn.cpp: the LSTM cell on the device against the CPU (check_parity), forward
// (h and c) and backward (dgates, dc_prev); mixed devices refused.
//
// Tolerances: pointwise float math on both sides (expf/tanhf on the GPU are within 2 ulp of the
// CPU's): atol 1e-5, rtol 1e-5, forward and backward.
#include <catch2/catch.hpp>

#include "tests/cuda/parity.h"

using engine::Device;
using engine::Tensor;
using test::check_parity;
using test::randn;

namespace {
const test::Tol kTol{1e-5f, 1e-5f};
}

TEST_CASE("cuda lstm_cell: forward and backward", "[cuda]") {
    for (auto [B, H] : {std::pair<int64_t, int64_t>{1, 33}, {7, 33}, {7, 1}, {1, 1}, {3, 5}, {2, 1025}}) {
        INFO("B " << B << " H " << H);
        // Gates scaled up a little so the sigmoids and tanhs reach their flat parts too.
        Tensor gates = engine::mul(randn({B, 4 * H}, false, 3), 2.f).detach().requires_grad_(true);
        Tensor c_prev = randn({B, H}, true, 4);
        check_parity("lstm_cell", [](auto& in) { return engine::lstm_cell(in[0], in[1]); }, {gates, c_prev}, kTol,
                     kTol);
    }
}

TEST_CASE("cuda lstm_cell: gradient for one input only, and through h alone", "[cuda]") {
    Tensor gates = randn({7, 4 * 33}, true, 5), c_prev = randn({7, 33}, false, 6);
    check_parity("lstm_cell dgates only", [](auto& in) { return engine::lstm_cell(in[0], in[1]); }, {gates, c_prev},
                 kTol, kTol);
    Tensor gates_c = randn({7, 4 * 33}, false, 5), c_prev_c = randn({7, 33}, true, 6);
    check_parity("lstm_cell dc_prev only", [](auto& in) { return engine::lstm_cell(in[0], in[1]); },
                 {gates_c, c_prev_c}, kTol, kTol);
    Tensor g2 = randn({3, 4 * 33}, true, 7), c2 = randn({3, 33}, true, 8);
    check_parity("lstm_cell h only", [](auto& in) { return engine::lstm_cell(in[0], in[1]).narrow(0, 0, 1); },
                 {g2, c2}, kTol, kTol);
}

TEST_CASE("cuda lstm_cell: mixed devices are refused", "[cuda]") {
    using Catch::Contains;
    Tensor gates = randn({2, 8}, false), c_prev = randn({2, 2}, false);
    REQUIRE_THROWS_WITH(engine::lstm_cell(gates.to(Device::CUDA), c_prev),
                        Contains("lstm_cell") && Contains("cuda") && Contains("cpu"));
    REQUIRE_THROWS_WITH(engine::lstm_cell(gates, c_prev.to(Device::CUDA)),
                        Contains("lstm_cell") && Contains("cuda") && Contains("cpu"));
}

// lstm_sequence: the recurrence's per-step cuBLAS GEMMs and cell kernels, and the backward's
// in-place dc carry and its one-GEMM dW_hh. GEMMs accumulate over K = H or T·B terms in another
// order than OpenBLAS, hence the looser tolerance.
TEST_CASE("cuda lstm_sequence: forward and every gradient", "[cuda]") {
    const test::Tol tol{1e-4f, 1e-4f};
    for (auto [T, B, H] : {std::tuple<int64_t, int64_t, int64_t>{1, 3, 5}, {6, 4, 33}, {3, 1, 8}}) {
        INFO("T " << T << " B " << B << " H " << H);
        std::vector<Tensor> in = {randn({T, B, 4 * H}, true, 11), randn({B, H}, true, 12), randn({B, H}, true, 13),
                                  engine::mul(randn({4 * H, H}, false, 14), 0.3f).detach().requires_grad_(true),
                                  randn({4 * H}, true, 15)};
        check_parity("lstm_sequence", [](auto& x) { return engine::lstm_sequence(x[0], x[1], x[2], x[3], x[4]); },
                     in, tol, tol);
    }
}
