// tests/test_elementwise.cpp: pointwise ops against their formulas, and their gradients.
#include <catch2/catch.hpp>

#include <cmath>
#include "engine/error.h"
#include "engine/ops.h"
#include "engine/ops/pointwise.h"
#include "tests/helpers.h"

using namespace engine;
using test::gradcheck;
using test::param;

// Forward of a unary op against a reference formula on inputs in [lo, hi].
static void check_unary(const char* name, Tensor (*op)(const Tensor&), double (*ref)(double), float lo, float hi) {
    Tensor x = param({257}, 99, lo, hi);
    Tensor y = op(x);
    for (int64_t i = 0; i < x.numel(); i++) {
        double want = ref(x.data_f32()[i]);
        INFO(name << " at x=" << x.data_f32()[i]);
        CHECK(y.data_f32()[i] == Approx(want).epsilon(1e-5).margin(1e-6));
    }
}

TEST_CASE("unary ops match their formulas", "[elementwise]") {
    check_unary("neg", neg, [](double x) { return -x; }, -3, 3);
    check_unary("exp", exp, [](double x) { return std::exp(x); }, -3, 3);
    check_unary("log", log, [](double x) { return std::log(x); }, 0.1f, 5);
    check_unary("sqrt", sqrt, [](double x) { return std::sqrt(x); }, 0.1f, 5);
    check_unary("rsqrt", rsqrt, [](double x) { return 1 / std::sqrt(x); }, 0.1f, 5);
    check_unary("abs", abs, [](double x) { return std::fabs(x); }, -3, 3);
    check_unary("tanh", tanh, [](double x) { return std::tanh(x); }, -3, 3);
    check_unary("sigmoid", sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, -6, 6);
    check_unary("relu", relu, [](double x) { return x > 0 ? x : 0; }, -3, 3);
    check_unary("relu2", relu2, [](double x) { return x > 0 ? x * x : 0; }, -3, 3);
    check_unary("gelu", gelu, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, -4, 4);
    check_unary("gelu_tanh", gelu_tanh, [](double x) {
        return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }, -4, 4);
    check_unary("silu", silu, [](double x) { return x / (1 + std::exp(-x)); }, -6, 6);
    Tensor x = param({50}, 5, 0.2f, 3.f);
    Tensor y = pow(x, 1.7f);
    for (int i = 0; i < 50; i++) CHECK(y.data_f32()[i] == Approx(std::pow(x.data_f32()[i], 1.7)).epsilon(1e-5));
}

// Inputs kept away from kinks (0 for relu/abs) so finite differences are meaningful.
static Tensor away_from_zero(const Shape& s, uint64_t seed) {
    Tensor t = param(s, seed, 0.2f, 2.f);
    float* p = t.data_f32();
    for (int64_t i = 0; i < t.numel(); i++) if (i % 2) p[i] = -p[i];
    return t;
}

TEST_CASE("gelu: the vectorizable exp and erf of the CPU loops against double precision", "[elementwise]") {
    // engine/ops/pointwise.h replaces libm's expf/erff on the CPU (so that the loops vectorize):
    // its stated bounds, over dense grids, and GELU's value and derivative through the op.
    double exp_err = 0, erf_err = 0;
    for (double x = -87; x <= 88; x += 1e-3) {
        float xf = (float)x;
        exp_err = test::max_err(exp_err, std::fabs(pointwise::exp_vectorizable(xf) / std::exp((double)xf) - 1));
    }
    for (double x = -6; x <= 6; x += 1e-5) {
        float xf = (float)x;
        erf_err = test::max_err(erf_err, std::fabs(pointwise::erf_vectorizable(xf) - std::erf((double)xf)));
    }
    CHECK(exp_err < 1e-7);
    CHECK(erf_err < 6e-7);
    CHECK(pointwise::erf_vectorizable(40.f) == 1.f);
    CHECK(pointwise::erf_vectorizable(-40.f) == -1.f);
    CHECK(std::isnan(pointwise::erf_vectorizable(NAN)));

    const int64_t n = 200001;  // [-10, 10] in steps of 1e-4, through the op (its vectorized loop)
    std::vector<float> xs(n);
    for (int64_t i = 0; i < n; i++) xs[i] = (float)(-10.0 + 1e-4 * (double)i);
    Tensor x = Tensor::from_vector(xs, {n}).requires_grad_();
    Tensor y = gelu(x);
    sum(y).backward();
    std::vector<float> yv = y.to_vector(), dv = x.grad().to_vector();
    double y_err = 0, d_err = 0;
    for (int64_t i = 0; i < n; i++) {
        double xd = xs[i], phi = 0.5 * (1 + std::erf(xd / std::sqrt(2.0)));
        double ref = xd * phi, dref = phi + xd * std::exp(-0.5 * xd * xd) / std::sqrt(2 * M_PI);
        y_err = test::max_err(y_err, std::fabs(yv[i] - ref) / std::max(1.0, std::fabs(ref)));
        d_err = test::max_err(d_err, std::fabs(dv[i] - dref));
    }
    CHECK(y_err < 1e-6);  // relative above 1, absolute below
    CHECK(d_err < 1e-6);
}

TEST_CASE("neg", "[gradcheck]") { gradcheck("neg", [](auto& in) { return neg(in[0]); }, {param({3, 4}, 1)}); }
TEST_CASE("exp", "[gradcheck]") { gradcheck("exp", [](auto& in) { return exp(in[0]); }, {param({3, 4}, 2)}); }
TEST_CASE("log", "[gradcheck]") { gradcheck("log", [](auto& in) { return log(in[0]); }, {param({3, 4}, 3, 0.5f, 2.f)}); }
TEST_CASE("sqrt", "[gradcheck]") { gradcheck("sqrt", [](auto& in) { return sqrt(in[0]); }, {param({3, 4}, 4, 0.5f, 2.f)}); }
TEST_CASE("rsqrt", "[gradcheck]") { gradcheck("rsqrt", [](auto& in) { return rsqrt(in[0]); }, {param({3, 4}, 5, 0.5f, 2.f)}); }
TEST_CASE("pow", "[gradcheck]") {
    gradcheck("pow", [](auto& in) { return pow(in[0], 2.5f); }, {param({3, 4}, 6, 0.5f, 2.f)});
    // A negative and a fractional exponent below 1: p·x^(p−1) grows as x shrinks.
    gradcheck("pow_neg", [](auto& in) { return pow(in[0], -1.5f); }, {param({3, 4}, 7, 0.5f, 2.f)});
    gradcheck("pow_root", [](auto& in) { return pow(in[0], 0.5f); }, {param({3, 4}, 8, 0.5f, 2.f)});
}
TEST_CASE("abs", "[gradcheck]") { gradcheck("abs", [](auto& in) { return abs(in[0]); }, {away_from_zero({3, 4}, 7)}); }
TEST_CASE("tanh", "[gradcheck]") { gradcheck("tanh", [](auto& in) { return tanh(in[0]); }, {param({3, 4}, 8, -2.f, 2.f)}); }
TEST_CASE("sigmoid", "[gradcheck]") { gradcheck("sigmoid", [](auto& in) { return sigmoid(in[0]); }, {param({3, 4}, 9, -3.f, 3.f)}); }
TEST_CASE("relu", "[gradcheck]") { gradcheck("relu", [](auto& in) { return relu(in[0]); }, {away_from_zero({3, 4}, 10)}); }
TEST_CASE("relu2", "[gradcheck]") { gradcheck("relu2", [](auto& in) { return relu2(in[0]); }, {away_from_zero({3, 4}, 11)}); }
TEST_CASE("gelu", "[gradcheck]") { gradcheck("gelu", [](auto& in) { return gelu(in[0]); }, {param({3, 4}, 12, -3.f, 3.f)}); }
TEST_CASE("gelu_tanh", "[gradcheck]") { gradcheck("gelu_tanh", [](auto& in) { return gelu_tanh(in[0]); }, {param({3, 4}, 13, -3.f, 3.f)}); }
TEST_CASE("silu", "[gradcheck]") { gradcheck("silu", [](auto& in) { return silu(in[0]); }, {param({3, 4}, 14, -3.f, 3.f)}); }

TEST_CASE("binary ops broadcast like numpy", "[elementwise]") {
    Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor row = Tensor::from_vector(std::vector<float>{10, 20, 30}, {3});
    Tensor col = Tensor::from_vector(std::vector<float>{100, 200}, {2, 1});
    CHECK(add(a, row).to_vector() == std::vector<float>{11, 22, 33, 14, 25, 36});
    CHECK(sub(a, col).to_vector() == std::vector<float>{-99, -98, -97, -196, -195, -194});
    CHECK(mul(col, row).shape() == Shape({2, 3}));  // [2,1] x [3] -> [2,3]
    CHECK(mul(col, row).to_vector() == std::vector<float>{1000, 2000, 3000, 2000, 4000, 6000});
    CHECK(div(a, Tensor::full({1}, 2.f)).at({1, 2}) == 3.f);
    Tensor s = Tensor::full({}, 3.f);  // a 0-d scalar broadcasts to anything
    CHECK(mul(a, s).at({0, 1}) == 6.f);
    CHECK((a * 2.f + 1.f).at({1, 1}) == 11.f);
    CHECK((1.f - a).at({0, 0}) == 0.f);
    CHECK(rdiv(6.f, a).at({0, 2}) == 2.f);
    // Broadcast in the middle of a 4-d tensor.
    Tensor x = Tensor::arange(24).reshape({2, 3, 1, 4});
    Tensor y = Tensor::arange(6).reshape({3, 2, 1});
    Tensor z = add(x, y);
    CHECK(z.shape() == Shape({2, 3, 2, 4}));
    CHECK(z.at({1, 2, 1, 3}) == x.at({1, 2, 0, 3}) + y.at({2, 1, 0}));
    CHECK_THROWS_WITH(add(a, Tensor::ones({4})), Catch::Contains("add: shapes [2,3] and [4] cannot be broadcast"));
    CHECK_THROWS_WITH(mul(a, Tensor::zeros({3}, DType::I32)), Catch::Contains("int32"));
}

TEST_CASE("add", "[gradcheck]") {
    gradcheck("add", [](auto& in) { return add(in[0], in[1]); }, {param({2, 3}, 1), param({2, 3}, 2)});
    gradcheck("add_broadcast", [](auto& in) { return add(in[0], in[1]); }, {param({2, 1, 3}, 3), param({4, 1}, 4)});
    gradcheck("add_scalar", [](auto& in) { return add(in[0], 2.f); }, {param({5}, 5)});
}

TEST_CASE("sub", "[gradcheck]") {
    gradcheck("sub", [](auto& in) { return sub(in[0], in[1]); }, {param({2, 3}, 1), param({3}, 2)});
    gradcheck("rsub", [](auto& in) { return rsub(1.f, in[0]); }, {param({4}, 3)});
}

TEST_CASE("mul", "[gradcheck]") {
    gradcheck("mul", [](auto& in) { return mul(in[0], in[1]); }, {param({2, 3}, 1), param({2, 3}, 2)});
    gradcheck("mul_broadcast", [](auto& in) { return mul(in[0], in[1]); }, {param({3, 1, 2}, 3), param({1, 4, 1}, 4)});
    gradcheck("mul_scalar", [](auto& in) { return mul(in[0], -1.5f); }, {param({5}, 5)});
}

TEST_CASE("div", "[gradcheck]") {
    gradcheck("div", [](auto& in) { return div(in[0], in[1]); }, {param({2, 3}, 1), param({2, 1}, 2, 0.5f, 2.f)});
    gradcheck("rdiv", [](auto& in) { return rdiv(2.f, in[0]); }, {param({4}, 3, 0.5f, 2.f)});
}

TEST_CASE("non-contiguous inputs after permute", "[elementwise][gradcheck]") {
    // permute makes a contiguous copy; the ops downstream see ordinary tensors.
    gradcheck("mul_after_permute", [](auto& in) { return mul(permute(in[0], {2, 0, 1}), in[1]); },
              {param({2, 3, 4}, 1), param({4, 1, 3}, 2)});
}
