// tests/test_rnn_ops.cpp: the fused LSTM cell against its formulas, and its gradient.
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
}
