// tests/cuda/test_cuda_shape.cpp: the data movement ops on the device against the CPU
// (check_parity), forward and backward: transpose/permute (2-6 d, both kernel paths), concat,
// slice/narrow, split/chunk, index_select, gather, embedding (repeated ids accumulate),
// masked_fill with broadcasting masks; out-of-range indices give the CPU's message; mixed
// devices are refused.
//
// Tolerances: the forwards move values unchanged (exact: atol 0, rtol 0). The backwards are
// exact too, index_select's and embedding's with repeated indices included (index_add sums each
// row in the CPU's order, no atomics), except gather's scatter-add, whose atomicAdd order differs
// from the CPU's serial one: atol 1e-6, rtol 1e-6.
#include <catch2/catch.hpp>

#include "engine/cuda/runtime.h"
#include "tests/cuda/parity.h"

using engine::Device;
using engine::Shape;
using engine::Tensor;
using test::check_parity;
using test::randn;

namespace {

const test::Tol kExact{0.f, 0.f};
const test::Tol kScatter{1e-6f, 1e-6f};

Tensor ints(const std::vector<int32_t>& v, const Shape& s) { return Tensor::from_vector(v, s); }

// The message of the exception f throws ("" if none).
template <typename F>
std::string error_of(F f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("cuda permute/transpose: 2-6 dims, last dim kept or moved", "[cuda]") {
    struct Case { Shape s; std::vector<int> perm; };
    std::vector<Case> cases = {
        {{7, 33}, {1, 0}},                        // tiled transpose, partial tiles
        {{1025, 3}, {1, 0}},                      // thin: 3 rows of tiles
        {{3, 1025}, {1, 0}},
        {{1, 7}, {1, 0}},                         // a size-1 dim: a plain copy
        {{2, 3, 4}, {2, 0, 1}},
        {{2, 3, 4}, {0, 2, 1}},                   // batched transpose
        {{2, 7, 3, 5}, {0, 2, 1, 3}},             // [B,T,H,D] -> [B,H,T,D]: last dim kept
        {{2, 7, 3, 8}, {0, 2, 1, 3}},             // the same, rows of float4s
        {{3, 5, 2, 4}, {2, 0, 1, 3}},             // float4 rows, another order
        {{2, 3, 1, 4, 5}, {4, 2, 0, 3, 1}},
        {{2, 1, 3, 2, 2, 3}, {5, 3, 1, 0, 4, 2}},
        {{2, 3, 2, 1, 2, 3}, {0, 1, 2, 3, 4, 5}},  // identity
        {{2, 3, 2, 3, 2, 2}, {1, 0, 3, 2, 5, 4}},  // last dim moved, 6-d
        {{33, 2, 40}, {2, 1, 0}},                 // tiles over both dims of a rest dim
    };
    for (auto& c : cases) {
        INFO("shape " << c.s.str());
        std::vector<int> perm = c.perm;
        check_parity("permute", [perm](auto& in) { return engine::permute(in[0], perm); }, {randn(c.s)}, kExact, kExact);
    }
    check_parity("transpose(-1, -3)", [](auto& in) { return engine::transpose(in[0], -1, -3); }, {randn({2, 7, 3, 33})},
                 kExact, kExact);
    check_parity("transpose(0, 1)", [](auto& in) { return engine::transpose(in[0], 0, 1); }, {randn({33, 7, 2})},
                 kExact, kExact);
}

TEST_CASE("cuda permute: int32 tensors bit for bit, both kernel paths", "[cuda]") {
    // Bit patterns that are denormals and NaNs as floats: the kernels move them without arithmetic.
    for (auto [s, perm] : {std::pair<Shape, std::vector<int>>{{7, 33}, {1, 0}}, {{2, 7, 3, 8}, {0, 2, 1, 3}}}) {
        INFO("shape " << s.str());
        std::vector<int32_t> v(s.numel());
        for (size_t i = 0; i < v.size(); i++) v[i] = (int32_t)(i % 3 == 0 ? 0x7F800001 + i : i % 3 == 1 ? -(int64_t)i : i * 7919);
        Tensor x = ints(v, s);
        Tensor want = engine::permute(x, perm), got = engine::permute(x.to(Device::CUDA), perm).to(Device::CPU);
        REQUIRE(got.dtype() == engine::DType::I32);
        CHECK(std::vector<int32_t>(got.data_i32(), got.data_i32() + got.numel()) ==
              std::vector<int32_t>(want.data_i32(), want.data_i32() + want.numel()));
    }
}

TEST_CASE("cuda concat: along each dim", "[cuda]") {
    for (int d = 0; d < 3; d++) {
        INFO("dim " << d);
        Shape s1{2, 3, 4}, s2{2, 3, 4}, s3{2, 3, 4};
        s1[d] = 1;
        s2[d] = 7;
        check_parity("concat", [d](auto& in) { return engine::concat({in[0], in[1], in[2]}, d); },
                     {randn(s1, true, 1), randn(s2, true, 2), randn(s3, true, 3)}, kExact, kExact);
    }
    check_parity("concat dim -1 of [1025, 1]", [](auto& in) { return engine::concat({in[0], in[1]}, -1); },
                 {randn({1025, 1}, true, 1), randn({1025, 2}, true, 2)}, kExact, kExact);
}

TEST_CASE("cuda slice and narrow", "[cuda]") {
    check_parity("slice dim 1", [](auto& in) { return engine::slice(in[0], 1, 2, 5); }, {randn({3, 7, 4})}, kExact, kExact);
    check_parity("slice dim 0", [](auto& in) { return engine::slice(in[0], 0, 1, 3); }, {randn({3, 7, 4})}, kExact, kExact);
    check_parity("slice last dim", [](auto& in) { return engine::slice(in[0], -1, 32, 33); }, {randn({7, 33})}, kExact,
                 kExact);
    check_parity("slice whole dim", [](auto& in) { return engine::slice(in[0], 1, 0, 7); }, {randn({2, 7, 3})}, kExact,
                 kExact);
    check_parity("slice empty", [](auto& in) { return engine::concat({engine::slice(in[0], 1, 3, 3), in[0]}, 1); },
                 {randn({2, 7})}, kExact, kExact);
    check_parity("narrow dim 1", [](auto& in) { return in[0].narrow(1, 1, 1025); }, {randn({2, 1027})}, kExact, kExact);
}

TEST_CASE("cuda split and chunk", "[cuda]") {
    // The parts joined in reverse order: every part's forward and backward is checked.
    check_parity("split", [](auto& in) {
        auto p = engine::split(in[0], {1, 7, 25}, 1);
        return engine::concat({p[2], p[0], p[1]}, 1);
    }, {randn({3, 33})}, kExact, kExact);
    check_parity("chunk", [](auto& in) {
        auto p = engine::chunk(in[0], 3, 0);
        return engine::concat({p[1], p[2], p[0]}, -1);
    }, {randn({6, 5, 2})}, kExact, kExact);
}

TEST_CASE("cuda index_select: each dim, repeated indices accumulate in the backward", "[cuda]") {
    Tensor idx = ints({6, 0, 6, 2, 6}, {5});
    for (int d = 0; d < 3; d++) {
        INFO("dim " << d);
        Shape s{3, 4, 2};
        s[d] = 7;
        check_parity("index_select", [idx, d](auto& in) { return engine::index_select(in[0], d, idx.to(in[0].device())); },
                     {randn(s)}, kExact, kExact);
    }
    Tensor big = ints({1024, 0, 1024, 17}, {4});
    check_parity("index_select 1025 rows", [big](auto& in) { return engine::index_select(in[0], 0, big.to(in[0].device())); },
                 {randn({1025, 3})}, kExact, kExact);
}

TEST_CASE("cuda gather: along each dim", "[cuda]") {
    Tensor x = randn({4, 7});
    Tensor i1 = Tensor::randint({4, 5}, 0, 7), i0 = Tensor::randint({3, 7}, 0, 4);
    check_parity("gather dim 1", [i1](auto& in) { return engine::gather(in[0], 1, i1.to(in[0].device())); }, {x}, kExact,
                 kScatter);
    check_parity("gather dim 0", [i0](auto& in) { return engine::gather(in[0], 0, i0.to(in[0].device())); },
                 {randn({4, 7}, true, 3)}, kExact, kScatter);
    Tensor i2 = Tensor::randint({2, 33, 3}, 0, 33);
    check_parity("gather dim 1 of 3-d", [i2](auto& in) { return engine::gather(in[0], 1, i2.to(in[0].device())); },
                 {randn({2, 33, 3})}, kExact, kScatter);
}

TEST_CASE("cuda embedding: repeated ids accumulate into the weight gradient", "[cuda]") {
    Tensor ids = ints({3, 0, 3, 3, 32, 1, 0, 3, 32, 7, 7, 3, 0, 1}, {2, 7});
    check_parity("embedding", [ids](auto& in) { return engine::embedding(in[0], ids.to(in[0].device())); },
                 {randn({33, 5})}, kExact, kExact);
    Tensor one = ints({1024}, {1});
    check_parity("embedding V=1025", [one](auto& in) { return engine::embedding(in[0], one.to(in[0].device())); },
                 {randn({1025, 2})}, kExact, kExact);
    // Rows of 300: two passes of 256 columns; 700 ids over 9 rows, every row repeated many times.
    Tensor many = Tensor::randint({7, 100}, 0, 9);
    check_parity("embedding D=300", [many](auto& in) { return engine::embedding(in[0], many.to(in[0].device())); },
                 {randn({9, 300})}, kExact, kExact);
}

TEST_CASE("cuda masked_fill: broadcasting masks", "[cuda]") {
    Tensor causal = engine::causal_mask(7);
    check_parity("masked_fill causal [7,7] -> [2,3,7,7]",
                 [causal](auto& in) { return engine::masked_fill(in[0], causal.to(in[0].device()), -1e9f); },
                 {randn({2, 3, 7, 7})}, kExact, kExact);
    Tensor mf = Tensor::from_vector(Tensor::randint({3, 1, 7}, 0, 2).to_vector(), {3, 1, 7});  // float 0/1
    check_parity("masked_fill [3,1,7] -> [2,3,33,7]",
                 [mf](auto& in) { return engine::masked_fill(in[0], mf.to(in[0].device()), 0.5f); },
                 {randn({2, 3, 33, 7})}, kExact, kExact);
    Tensor full = Tensor::from_vector(std::vector<float>{1, 0, 0, 2, -1, 0, 0.5f}, {7});
    check_parity("masked_fill same shape", [full](auto& in) { return engine::masked_fill(in[0], full.to(in[0].device()), 3.f); },
                 {randn({7})}, kExact, kExact);
    Tensor causal_cuda = engine::causal_mask(33).to(Device::CUDA);
    REQUIRE(causal_cuda.to_vector() == engine::causal_mask(33).to_vector());
}

TEST_CASE("cuda index ops: an index out of range is reported at the next wait, with the CPU's message",
          "[cuda]") {
    // The CPU's message up to its " for input [...]" (the device's record does not hold the shape):
    // the device's message is that, then where it was found.
    auto cpu_core = [](const std::string& m) { return m.substr(0, m.find(" for input")); };
    auto starts_with = [](const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; };
    Tensor x = randn({4, 7}, false), xd = x.to(Device::CUDA);
    Tensor bad = ints({1, 9, 2, -1}, {4});  // first bad one: 9, at position 1
    std::string cpu = error_of([&] { engine::index_select(x, 1, bad); });
    REQUIRE(cpu.find("index_select: index 9 out of range [0, 7) at position 1 for input") != std::string::npos);
    Tensor out;
    REQUIRE_NOTHROW(out = engine::index_select(xd, 1, bad.to(Device::CUDA)));  // the op does not wait
    std::string dev = error_of([&] { out.to(Device::CPU); });
    INFO(dev);
    CHECK(starts_with(dev, cpu_core(cpu) + " (found on the device"));
    // Reported once; the bad positions' columns are zeros, the others the CPU's.
    std::vector<float> got = out.to_vector(), want = engine::index_select(x, 1, ints({1, 0, 2, 0}, {4})).to_vector();
    for (int64_t r = 0; r < 4; r++)
        for (int64_t c = 0; c < 4; c++) CHECK(got[r * 4 + c] == (c == 1 || c == 3 ? 0.f : want[r * 4 + c]));

    Tensor neg = ints({-1, 0, 1, 2, 3, 0, 1, 2}, {4, 2});
    std::string cpu_g = error_of([&] { engine::gather(x, 1, neg); });
    REQUIRE(cpu_g.find("gather: index -1 out of range [0, 7) at position 0 for input") != std::string::npos);
    engine::gather(xd, 1, neg.to(Device::CUDA));
    dev = error_of([] { engine::cuda::synchronize(); });  // synchronize() reports too
    CHECK(starts_with(dev, cpu_core(cpu_g) + " (found on the device"));

    // Two bad ops before a wait: the first one's first bad index.
    Tensor w = randn({33, 5}, false), ids = ints({0, 32, 33}, {3});
    std::string cpu_e = error_of([&] { engine::embedding(w, ids); });
    REQUIRE(cpu_e.find("embedding: index 33 out of range [0, 33) at position 2 for input") != std::string::npos);
    Tensor wd = randn({33, 5}, false).to(Device::CUDA);
    wd.requires_grad_(true);
    Tensor emb = engine::embedding(wd, ids.to(Device::CUDA));
    engine::index_select(xd, 1, bad.to(Device::CUDA));
    // The backward leaves the bad id's row alone and adds the others.
    engine::sum(emb).backward();
    dev = error_of([&] { wd.grad().to(Device::CPU); });
    CHECK(starts_with(dev, cpu_core(cpu_e) + " (found on the device"));
    std::vector<float> dw = wd.grad().to_vector();
    for (int64_t v = 0; v < 33; v++)
        for (int64_t d = 0; d < 5; d++) CHECK(dw[v * 5 + d] == (v == 0 || v == 32 ? 1.f : 0.f));

    // In range at the edges: no error.
    Tensor edge = ints({0, 6}, {2});
    REQUIRE(engine::index_select(xd, 1, edge.to(Device::CUDA)).to_vector() ==
            engine::index_select(x, 1, edge).to_vector());
    REQUIRE_NOTHROW(engine::cuda::synchronize());
}

TEST_CASE("cuda shape ops: inputs on different devices are refused", "[cuda]") {
    using Catch::Contains;
    Tensor x = randn({4, 7}, false), idx = ints({0, 1}, {2});
    Tensor xd = x.to(Device::CUDA);
    REQUIRE_THROWS_WITH(engine::index_select(xd, 1, idx), Contains("index_select") && Contains("cuda") && Contains("cpu"));
    REQUIRE_THROWS_WITH(engine::embedding(xd, idx), Contains("embedding") && Contains("cuda") && Contains("cpu"));
    REQUIRE_THROWS_WITH(engine::gather(xd, 1, ints({0, 0, 0, 0}, {4, 1})), Contains("gather") && Contains("cpu"));
    REQUIRE_THROWS_WITH(engine::concat({x, xd}, 0), Contains("concat") && Contains("cuda") && Contains("cpu"));
    REQUIRE_THROWS_WITH(engine::masked_fill(xd, Tensor::zeros({7}), 0.f), Contains("masked_fill") && Contains("cpu"));
}
