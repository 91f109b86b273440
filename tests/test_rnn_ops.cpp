// tests/test_rnn_ops.cpp: the fused LSTM cell against its formulas, lstm_sequence against the
// cell-by-cell recurrence, lstm_layer; gradients and shape errors.
#include <catch2/catch.hpp>

#include <cmath>
#include "engine/error.h"
#include "engine/ops.h"
#include "tests/helpers.h"

using namespace engine;

TEST_CASE("lstm_cell matches the LSTM equations", "[rnn]") {
    int64_t B = 3, H = 4;
    Tensor gates = test::param({B, 4 * H}, 1, -2.f, 2.f), c_prev = test::param({B, H}, 2);
    Tensor hc = lstm_cell(gates, c_prev);
    REQUIRE(hc.shape() == Shape({2, B, H}));
    auto sig = [](double x) { return 1 / (1 + std::exp(-x)); };
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < H; j++) {
            double i = sig(gates.at({b, j})), f = sig(gates.at({b, H + j})), g = std::tanh(gates.at({b, 2 * H + j})),
                   o = sig(gates.at({b, 3 * H + j}));
            double c = f * c_prev.at({b, j}) + i * g;
            CHECK(hc.at({1, b, j}) == Approx(c).epsilon(1e-5));
            CHECK(hc.at({0, b, j}) == Approx(o * std::tanh(c)).epsilon(1e-5));
        }
    CHECK_THROWS_WITH(lstm_cell(test::param({3, 15}, 3), c_prev), Catch::Contains("lstm_cell: gates [3,15]"));
}

TEST_CASE("lstm_cell", "[rnn][gradcheck]") {
    test::gradcheck("lstm_cell", [](auto& in) { return lstm_cell(in[0], in[1]); },
                    {test::param({3, 8}, 4, -2.f, 2.f), test::param({3, 2}, 5)});
    // Through h alone and through c alone (the two halves get different upstream gradients).
    test::gradcheck("lstm_cell_h", [](auto& in) { return lstm_cell(in[0], in[1]).narrow(0, 0, 1); },
                    {test::param({2, 12}, 6, -2.f, 2.f), test::param({2, 3}, 7)});
    test::gradcheck("lstm_cell_c", [](auto& in) { return lstm_cell(in[0], in[1]).narrow(0, 1, 1); },
                    {test::param({2, 12}, 8, -2.f, 2.f), test::param({2, 3}, 9)});
}

namespace {
// The recurrence spelled out with the step-level ops (linear, add, lstm_cell), as the LSTM layer
// ran before lstm_sequence existed: the reference for the fused op's values and gradients.
Tensor lstm_by_cells(const Tensor& x_proj, const Tensor& h0, const Tensor& c0, const Tensor& w_hh, const Tensor& b_hh) {
    int64_t T = x_proj.size(0), B = x_proj.size(1), H = h0.size(1);
    Tensor h = h0, c = c0;
    std::vector<Tensor> rows;
    for (int64_t t = 0; t < T; t++) {
        Tensor gates = add(x_proj.narrow(0, t, 1).reshape({B, 4 * H}), linear(h, w_hh, b_hh));
        Tensor hc = lstm_cell(gates, c);
        h = hc.narrow(0, 0, 1);
        c = hc.narrow(0, 1, 1);
        rows.push_back(h);
        h = h.reshape({B, H});
        c = c.reshape({B, H});
    }
    rows.push_back(c.reshape({1, B, H}));
    return concat(rows, 0);  // [T+1, B, H]: h_0 … h_{T-1}, c_{T-1}
}
}  // namespace

TEST_CASE("lstm_sequence equals the cell-by-cell recurrence, values and every gradient", "[rnn]") {
    for (auto [T, B, H] : {std::tuple<int64_t, int64_t, int64_t>{1, 2, 3}, {5, 3, 4}, {7, 1, 6}}) {
        INFO("T " << T << " B " << B << " H " << H);
        std::vector<Tensor> in = {test::param({T, B, 4 * H}, 11, -2.f, 2.f), test::param({B, H}, 12),
                                  test::param({B, H}, 13), test::param({4 * H, H}, 14), test::param({4 * H}, 15)};
        Tensor fused = lstm_sequence(in[0], in[1], in[2], in[3], in[4]);
        REQUIRE(fused.shape() == Shape({T + 1, B, H}));
        // Upstream gradient on everything, the final c included, so every backward path is used.
        Tensor w = test::param({T + 1, B, H}, 16, -1.f, 1.f).detach();
        sum(mul(fused, w)).backward();
        std::vector<Tensor> fused_grads;
        for (Tensor& t : in) {
            fused_grads.push_back(t.grad());
            t.zero_grad();
        }
        Tensor ref = lstm_by_cells(in[0], in[1], in[2], in[3], in[4]);
        sum(mul(ref, w)).backward();
        REQUIRE(fused.shape() == ref.shape());
        CHECK(test::max_abs_diff(fused, ref) < 1e-6f);
        for (size_t i = 0; i < in.size(); i++) {
            INFO("gradient of input " << i);
            REQUIRE(fused_grads[i].defined());
            CHECK(test::max_abs_diff(fused_grads[i], in[i].grad()) < 1e-5f);
        }
    }
}

TEST_CASE("lstm_sequence", "[rnn][gradcheck]") {
    test::gradcheck("lstm_sequence",
                    [](auto& in) { return lstm_sequence(in[0], in[1], in[2], in[3], in[4]); },
                    {test::param({4, 2, 12}, 21, -2.f, 2.f), test::param({2, 3}, 22), test::param({2, 3}, 23),
                     test::param({12, 3}, 24), test::param({12}, 25)});
    // T = 1 (no recurrent GEMM in the weight gradient) and only some inputs wanting gradients.
    test::gradcheck("lstm_sequence T=1",
                    [](auto& in) { return lstm_sequence(in[0], in[1], in[2], in[3], in[4]); },
                    {test::param({1, 2, 8}, 26, -2.f, 2.f), test::param({2, 2}, 27).detach(), test::param({2, 2}, 28),
                     test::param({8, 2}, 29), test::param({8}, 30).detach()});
}

TEST_CASE("lstm_sequence refuses mismatched shapes, naming them", "[rnn]") {
    Tensor x = test::param({3, 2, 8}, 1), h = test::param({2, 2}, 2), c = test::param({2, 2}, 3),
           w = test::param({8, 2}, 4), b = test::param({8}, 5);
    CHECK_THROWS_WITH(lstm_sequence(test::param({3, 2, 7}, 6), h, c, w, b), Catch::Contains("x_proj [3,2,7]"));
    CHECK_THROWS_WITH(lstm_sequence(x, test::param({3, 2}, 6), c, w, b), Catch::Contains("h0 [3,2]"));
    CHECK_THROWS_WITH(lstm_sequence(x, h, c, test::param({8, 3}, 6), b), Catch::Contains("w_hh [8,3]"));
    CHECK_THROWS_WITH(lstm_sequence(x, h, c, w, test::param({4}, 6)), Catch::Contains("b_hh [4]"));
    CHECK_THROWS_WITH(lstm_sequence(test::param({0, 2, 8}, 6), h, c, w, b), Catch::Contains("T >= 1"));
}

// On the CPU lstm_layer is the input-projection GEMM and lstm_sequence (the CUDA build's cuDNN
// path is compared with it in tests/cuda/test_cuda_cudnn_lstm.cpp).
TEST_CASE("lstm_layer", "[rnn][gradcheck]") {
    test::gradcheck("lstm_layer",
                    [](auto& in) { return lstm_layer(in[0], in[1], in[2], in[3], in[4], in[5], in[6]); },
                    {test::param({3, 2, 4}, 31), test::param({2, 3}, 32), test::param({2, 3}, 33),
                     test::param({12, 4}, 34), test::param({12}, 35), test::param({12, 3}, 36),
                     test::param({12}, 37)});
}

// What lstm_layer keeps between forward and backward: the gates [T, B, 4H], its output [T+1, B, H]
// and the cell states c_1 … c_{T-1}, and not the input projections x_proj [T, B, 4H] (the backward
// does not read them).
TEST_CASE("lstm_layer: the memory held between forward and backward", "[rnn]") {
    const int64_t T = 6, B = 4, in = 5, H = 4;  // B·H = 16 floats: whole 64-byte blocks (host_memory_in_use)
    Tensor x = test::param({T, B, in}, 41), h = test::param({B, H}, 42), c = test::param({B, H}, 43),
           w_ih = test::param({4 * H, in}, 44), b_ih = test::param({4 * H}, 45), w_hh = test::param({4 * H, H}, 46),
           b_hh = test::param({4 * H}, 47);
    const size_t before = host_memory_in_use();
    Tensor y = lstm_layer(x, h, c, w_ih, b_ih, w_hh, b_hh);
    const size_t held = host_memory_in_use() - before;
    CHECK(held == sizeof(float) * (size_t)(T * B * 4 * H + (T + 1) * B * H + (T - 1) * B * H));
    sum(y).backward();
    CHECK(x.grad().defined());
}

TEST_CASE("lstm_layer refuses mismatched shapes, naming them", "[rnn]") {
    Tensor x = test::param({3, 2, 5}, 1), h = test::param({2, 2}, 2), c = test::param({2, 2}, 3),
           w_ih = test::param({8, 5}, 4), b_ih = test::param({8}, 5), w_hh = test::param({8, 2}, 6),
           b_hh = test::param({8}, 7);
    CHECK_THROWS_WITH(lstm_layer(test::param({3, 2, 4}, 8), h, c, w_ih, b_ih, w_hh, b_hh),
                      Catch::Contains("w_ih [8,5]") && Catch::Contains("x [3,2,4]"));
    CHECK_THROWS_WITH(lstm_layer(x, h, c, test::param({4, 5}, 8), b_ih, w_hh, b_hh), Catch::Contains("w_ih [4,5]"));
    CHECK_THROWS_WITH(lstm_layer(x, h, c, w_ih, test::param({7}, 8), w_hh, b_hh), Catch::Contains("b_ih [7]"));
    CHECK_THROWS_WITH(lstm_layer(x, test::param({3, 2}, 8), c, w_ih, b_ih, w_hh, b_hh), Catch::Contains("h0 [3,2]"));
    CHECK_THROWS_WITH(lstm_layer(x, h, c, w_ih, b_ih, test::param({8, 3}, 8), b_hh), Catch::Contains("w_hh [8,3]"));
    CHECK_THROWS_WITH(lstm_layer(test::param({0, 2, 5}, 8), h, c, w_ih, b_ih, w_hh, b_hh), Catch::Contains("T >= 1"));
}
