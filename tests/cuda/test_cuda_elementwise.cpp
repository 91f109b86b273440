// tests/cuda/test_cuda_elementwise.cpp: the pointwise ops on the device against the CPU
// (check_parity), forward and backward: add/sub/mul/div with equal shapes and with broadcasting
// (row, column, outer-product, 3-d against 2-d, single values on either side), the scalar forms,
// every unary op and pow; mixed devices are refused with both devices named; gradients of a tensor
// used more than once accumulate on the device (engine/autograd.cpp's accumulate through
// add_inplace), and a gradient on the wrong device is an error naming the op.
//
// Tolerances: pointwise forwards and backwards atol 1e-6, rtol 1e-5 (a GPU's expf/logf/tanhf/erff
// may differ from glibc's by a few ulps; rtol 1e-5 is ~80 ulps). The backwards of broadcast binary
// ops sum the gradient back to the input's shape (up to 1025 terms, in another order than the
// CPU's), so they get atol 1e-5, rtol 1e-5.
#include <catch2/catch.hpp>

#include <cmath>
#include "engine/autograd.h"
#ifdef ENGINE_CUDA_EMU
#include <cuda_runtime.h>  // the emulator's launch counter
#endif
#include "tests/cuda/parity.h"

using engine::Device;
using engine::Shape;
using engine::Tensor;
using test::check_parity;
using test::rand_uniform;
using test::randn;

namespace {

const test::Tol kPointwise{1e-6f, 1e-5f};
const test::Tol kSummed{1e-5f, 1e-5f};

using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);

}  // namespace

TEST_CASE("cuda add/sub/mul/div: equal shapes and broadcasting", "[cuda]") {
    struct Case { Shape a, b; };
    std::vector<Case> cases = {
        {{7, 33}, {7, 33}},      // same shapes: the flat kernel
        {{12, 36}, {12, 36}},    // numel a multiple of 4: its float4 twin
        {{7, 33}, {33}},         // a row broadcast over rows
        {{33}, {7, 33}},
        {{7, 1}, {1, 33}},       // outer product: both inputs broadcast
        {{2, 1, 5}, {3, 1}},     // 3-d against 2-d, broadcast in alternating dims
        {{7, 33}, {1}},          // a single value on either side
        {{1}, {7, 33}},
        {{1}, {1}},
        {{1025}, {1025}},
        {{3, 1025}, {1025}},
        {{1025, 3}, {1025, 1}},  // a column broadcast along the last dim
        {{2, 3, 4, 5}, {3, 1, 5}},
    };
    struct Op { const char* name; BinaryFn fn; };
    std::vector<Op> ops = {{"add", engine::add}, {"sub", engine::sub}, {"mul", engine::mul}, {"div", engine::div}};
    for (auto& op : ops) {
        for (auto& c : cases) {
            INFO(op.name << " " << c.a.str() << " with " << c.b.str());
            bool broadcast = !(c.a == c.b);
            // Divisors away from 0; distinct seeds so a and b differ even when their shapes match.
            Tensor a = randn(c.a, true, 7);
            Tensor b = std::string(op.name) == "div" ? rand_uniform(c.b, 0.5f, 2.f, true, 13) : randn(c.b, true, 13);
            BinaryFn fn = op.fn;
            check_parity(op.name, [fn](auto& in) { return fn(in[0], in[1]); }, {a, b}, kPointwise,
                         broadcast ? kSummed : kPointwise);
        }
    }
}

TEST_CASE("cuda binary ops: only one input needing a gradient", "[cuda]") {
    Tensor a = randn({7, 33}, true, 7), b = rand_uniform({33}, 0.5f, 2.f, false, 13);
    check_parity("mul, b constant", [](auto& in) { return engine::mul(in[0], in[1]); }, {a, b}, kPointwise, kPointwise);
    Tensor c = randn({7, 33}, false, 7), d = rand_uniform({7, 1}, 0.5f, 2.f, true, 13);
    check_parity("div, a constant", [](auto& in) { return engine::div(in[0], in[1]); }, {c, d}, kPointwise, kSummed);
}

#ifdef ENGINE_CUDA_EMU
// add and sub give an input that needs no gradient none: a broadcast one (ViT's fixed position
// table, [T, D] added to [B, T, D]) costs no sum over the batch: fewer kernel launches in the
// backward than with the table trained, and the other input's gradient is the same.
TEST_CASE("cuda add and sub: no gradient summed for a broadcast input that needs none", "[cuda]") {
    using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);
    for (BinaryFn fn : {static_cast<BinaryFn>(engine::add), static_cast<BinaryFn>(engine::sub)}) {
        Tensor g = randn({4, 5, 8}, false, 15).to(Device::CUDA);
        auto backward = [&](bool table_grad, uint64_t& launches) {
            Tensor x = randn({4, 5, 8}, true, 16).to(Device::CUDA).detach().requires_grad_(true);
            Tensor table = randn({5, 8}, false, 17).to(Device::CUDA).detach().requires_grad_(table_grad);
            Tensor y = fn(engine::mul(x, 1.f), table);
            const uint64_t before = emu::counters().launches;
            y.backward(g);
            launches = emu::counters().launches - before;
            CHECK(table.grad().defined() == table_grad);
            return x.grad().to(Device::CPU).to_vector();
        };
        uint64_t fixed = 0, trained = 0;
        CHECK(backward(false, fixed) == backward(true, trained));
        CHECK(fixed < trained);  // add: the sum; sub: the negation and the sum
    }
}
#endif

TEST_CASE("cuda scalar forms: add, sub, mul, div by a float, rsub, rdiv", "[cuda]") {
    for (Shape s : {Shape{7, 33}, Shape{1025}, Shape{1}, Shape{12, 36}}) {  // 12 × 36: the float4 kernels
        INFO("shape " << s.str());
        check_parity("add scalar", [](auto& in) { return in[0] + 1.5f; }, {randn(s)}, kPointwise, kPointwise);
        check_parity("sub scalar", [](auto& in) { return in[0] - 0.25f; }, {randn(s)}, kPointwise, kPointwise);
        check_parity("mul scalar", [](auto& in) { return in[0] * -3.f; }, {randn(s)}, kPointwise, kPointwise);
        check_parity("div scalar", [](auto& in) { return in[0] / 7.f; }, {randn(s)}, kPointwise, kPointwise);
        check_parity("rsub", [](auto& in) { return 2.f - in[0]; }, {randn(s)}, kPointwise, kPointwise);
        check_parity("rdiv", [](auto& in) { return engine::rdiv(3.f, in[0]); }, {rand_uniform(s, 0.5f, 2.f)},
                     kPointwise, kPointwise);
    }
}

TEST_CASE("cuda unary ops: every pointwise functor and pow", "[cuda]") {
    using UnaryFn = Tensor (*)(const Tensor&);
    struct Op { const char* name; UnaryFn fn; bool positive; };
    std::vector<Op> ops = {
        {"neg", engine::neg, false},       {"exp", engine::exp, false},         {"log", engine::log, true},
        {"sqrt", engine::sqrt, true},      {"rsqrt", engine::rsqrt, true},      {"abs", engine::abs, false},
        {"tanh", engine::tanh, false},     {"sigmoid", engine::sigmoid, false}, {"relu", engine::relu, false},
        {"relu2", engine::relu2, false},   {"gelu", engine::gelu, false},       {"gelu_tanh", engine::gelu_tanh, false},
        {"silu", engine::silu, false},
    };
    for (Shape s : {Shape{7, 33}, Shape{1025}, Shape{1}, Shape{12, 36}}) {  // 12 × 36: the float4 kernels
        for (auto& op : ops) {
            INFO(op.name << " " << s.str());
            Tensor x = op.positive ? rand_uniform(s, 0.5f, 2.f) : randn(s);
            UnaryFn fn = op.fn;
            check_parity(op.name, [fn](auto& in) { return fn(in[0]); }, {x}, kPointwise, kPointwise);
        }
        for (float p : {2.f, 0.5f, -1.f, 3.f, -0.5f}) {
            INFO("pow " << p << " " << s.str());
            check_parity("pow", [p](auto& in) { return engine::pow(in[0], p); }, {rand_uniform(s, 0.5f, 2.f)},
                         kPointwise, kPointwise);
        }
    }
}

TEST_CASE("cuda binary ops: inputs on different devices are refused, naming both devices", "[cuda]") {
    using Catch::Contains;
    Tensor xd = randn({7, 33}, false).to(Device::CUDA), yc = randn({7, 33}, false);
    REQUIRE_THROWS_WITH(engine::add(xd, yc), Contains("add") && Contains("cuda") && Contains("cpu"));
    REQUIRE_THROWS_WITH(engine::sub(yc, xd), Contains("sub") && Contains("cuda") && Contains("cpu"));
    REQUIRE_THROWS_WITH(engine::mul(xd, yc), Contains("mul") && Contains("cuda") && Contains("cpu"));
    REQUIRE_THROWS_WITH(engine::div(yc, xd), Contains("div") && Contains("cuda") && Contains("cpu"));
}

TEST_CASE("cuda autograd: gradients accumulate on the device", "[cuda]") {
    // x used three times in one graph: its gradient is the sum of three contributions.
    check_parity("x used thrice", [](auto& in) { return engine::add(engine::mul(in[0], in[0]), engine::exp(in[0])); },
                 {randn({7, 33})}, kPointwise, kPointwise);

    check_parity("x used thrice, float4 kernels", [](auto& in) {
        return engine::add(engine::mul(in[0], in[0]), engine::exp(in[0]));
    }, {randn({12, 36})}, kPointwise, kPointwise);

    // Two backward passes add into the leaf's existing .grad.
    Tensor xc = randn({3, 1025});
    Tensor xd = test::to_cuda(xc);
    for (Tensor* x : {&xc, &xd}) {
        for (int pass = 0; pass < 2; pass++) engine::sum(engine::mul(*x, *x)).backward();
    }
    REQUIRE(xd.grad().device() == Device::CUDA);
    test::require_close("two passes", xc.grad(), xd.grad(), kPointwise);
    test::require_close("two passes = 4x", engine::mul(xc.detach(), 4.f), xd.grad(), kPointwise);
}

TEST_CASE("cuda autograd: a gradient on another device than its input is an error", "[cuda]") {
    using Catch::Contains;
    Tensor x = randn({7, 33}).to(Device::CUDA).detach();
    x.requires_grad_(true);
    // A broken op whose backward returns a CPU gradient for a CUDA input.
    Tensor y = engine::attach(engine::mul(x.detach(), 2.f), "broken_op", {x}, [](const Tensor& g) {
        return std::vector<Tensor>{Tensor::zeros(g.shape())};
    });
    REQUIRE_THROWS_WITH(engine::sum(y).backward(), Contains("broken_op") && Contains("cpu") && Contains("cuda"));
}
