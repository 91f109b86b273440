// tests/test_golden.cpp: the engine against PyTorch. Each case loads tests/golden/<case>.safetensors
// (written by tools/golden.py with torch 1.13 on the CPU; CI never runs PyTorch), recomputes the
// output with engine ops from the same inputs, backpropagates sum(out · w) with the same w, and
// compares the output and every input gradient per tensor.
//
// Run from the repository root (or set GOLDEN_DIR). The max |engine - torch| of every tensor is
// attached to each check (shown on failure, or always with -s); GOLDEN_VERBOSE=1 also prints one
// line per tensor.
//
// Tolerances: a tensor passes when every element has |engine - torch| <= atol + rtol·|torch|.
// Both sides compute in float32 (unit roundoff u = 6e-8), so they differ only by rounding: a few
// ulp for a pointwise function from two libms, about K·u·Σ|terms| for a K-term sum in a different
// order. The values here are O(1) and K <= 8 for the single ops, so the observed differences are
// 1e-7 .. 1e-6 (printed by GOLDEN_VERBOSE=1); each tolerance below sits about 10x above what it
// has to absorb, and orders of magnitude below what a wrong formula (a missing factor, a
// transposed operand, a dropped term) produces: 1e-2 or more.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>
#include <fmt/format.h>
#include "engine/ops.h"
#include "engine/safetensors.h"

using namespace engine;

namespace {

struct Tol {
    float atol, rtol;
};

// Pointwise functions: libm vs PyTorch's vectorized math, a few ulp on values and derivatives.
constexpr Tol kPointwise{1e-6f, 1e-5f};
// Short sums (reductions, matmul, linear, embedding's scatter-add): summation order only.
constexpr Tol kSums{1e-5f, 1e-5f};

std::string golden_dir() {
    const char* env = std::getenv("GOLDEN_DIR");
    return env ? env : "tests/golden";
}

bool verbose() {
    const char* env = std::getenv("GOLDEN_VERBOSE");
    return env && *env && std::string(env) != "0";
}

// One golden file: hands out its inputs (float inputs with a stored gradient come back requiring
// grad), then check() compares the engine's output and gradients against the stored ones.
class Golden {
public:
    explicit Golden(const std::string& name) : name_(name) {
        std::string path = golden_dir() + "/" + name + ".safetensors";
        INFO("golden file " << path << " (run the tests from the repository root, or set GOLDEN_DIR)");
        REQUIRE(std::filesystem::exists(path));
        tensors_ = load_safetensors(path);
    }

    Tensor tensor(const std::string& key) const {
        INFO("golden " << name_ << ": tensor '" << key << "'");
        REQUIRE(tensors_.count(key) == 1);
        return tensors_.at(key);
    }

    Tensor input(const std::string& key) {
        Tensor t = tensor(key).clone();
        if (tensors_.count("grad." + key)) {
            t.requires_grad_();
            inputs_.emplace_back(key, t);
        }
        return t;
    }

    // Compares `got` with the stored tensor `key`.
    void compare(const std::string& key, const Tensor& got, Tol tol) const {
        Tensor want = tensor(key);
        INFO("golden " << name_ << ": '" << key << "' engine " << got.shape().str() << " vs torch "
                       << want.shape().str());
        REQUIRE(got.defined());
        REQUIRE(got.shape() == want.shape());
        std::vector<float> g = got.to_vector(), w = want.to_vector();
        float max_diff = 0.f, worst_excess = -1.f;
        size_t worst = 0;
        for (size_t i = 0; i < g.size(); i++) {
            float diff = std::fabs(g[i] - w[i]);
            if (!(diff == diff)) diff = INFINITY;  // NaN counts as a failure
            max_diff = std::max(max_diff, diff);
            float excess = diff - (tol.atol + tol.rtol * std::fabs(w[i]));
            if (i == 0 || excess > worst_excess) { worst_excess = excess; worst = i; }
        }
        if (verbose()) fmt::print("golden {:<24} {:<22} max|diff| {:.2e}\n", name_, key, max_diff);
        INFO("max |engine - torch| = " << max_diff << "; worst element " << worst << ": engine "
                                       << (g.empty() ? 0.f : g[worst]) << ", torch " << (w.empty() ? 0.f : w[worst])
                                       << " (atol " << tol.atol << ", rtol " << tol.rtol << ")");
        CHECK(worst_excess <= 0.f);
    }

    // Compares the output, then backpropagates sum(out · w) and compares each input's gradient.
    void check(const Tensor& out, Tol out_tol, Tol grad_tol) {
        compare("out", out, out_tol);
        sum(mul(out, tensor("w"))).backward();
        for (const auto& [key, t] : inputs_) compare("grad." + key, t.grad(), grad_tol);
    }
    void check(const Tensor& out, Tol tol) { check(out, tol, tol); }

private:
    std::string name_;
    std::map<std::string, Tensor> tensors_;
    std::vector<std::pair<std::string, Tensor>> inputs_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Elementwise

TEST_CASE("golden: binary ops with broadcasting", "[golden]") {
    using Binary = Tensor (*)(const Tensor&, const Tensor&);
    std::vector<std::pair<const char*, Binary>> ops = {{"add", engine::add}, {"mul", engine::mul}, {"div", engine::div}};
    for (auto [name, op] : ops) {
        Golden g(name);
        Tensor a = g.input("a"), b = g.input("b");
        g.check(op(a, b), kPointwise, kSums);  // the broadcast gradient is a short sum
    }
}

TEST_CASE("golden: unary ops", "[golden]") {
    std::vector<std::pair<const char*, Tensor (*)(const Tensor&)>> ops = {
        {"exp", engine::exp},   {"log", engine::log},   {"tanh", engine::tanh},           {"sigmoid", engine::sigmoid},
        {"relu", engine::relu}, {"gelu", engine::gelu}, {"gelu_tanh", engine::gelu_tanh}, {"silu", engine::silu},
    };
    for (auto [name, op] : ops) {
        Golden g(name);
        Tensor x = g.input("x");
        g.check(op(x), kPointwise);
    }
}

// ---------------------------------------------------------------------------------------------
// Reductions, matmul, linear, embedding

TEST_CASE("golden: reductions over a dim", "[golden]") {
    {
        Golden g("sum_dim");
        Tensor x = g.input("x");
        g.check(sum(x, {1}), kSums);
    }
    {
        Golden g("mean_dim");
        Tensor x = g.input("x");
        g.check(mean(x, {-1}, true), kSums);
    }
    {
        Golden g("max_dim");
        Tensor x = g.input("x");
        g.check(max(x, {1}), kSums);
    }
}

TEST_CASE("golden: matmul with transposes and batches", "[golden]") {
    struct Case {
        const char* name;
        bool ta, tb;
    };
    for (Case c : {Case{"matmul", false, false}, Case{"matmul_ta", true, false}, Case{"matmul_tb", false, true},
                   Case{"matmul_ta_tb", true, true}, Case{"matmul_batched", false, false},
                   Case{"matmul_batched_ta_tb", true, true}, Case{"matmul_shared_b", false, false}}) {
        Golden g(c.name);
        Tensor a = g.input("a"), b = g.input("b");
        g.check(matmul(a, b, c.ta, c.tb), kSums);
    }
}

TEST_CASE("golden: linear", "[golden]") {
    {
        Golden g("linear");
        Tensor x = g.input("x"), w = g.input("weight"), b = g.input("bias");
        g.check(linear(x, w, b), kSums);
    }
    {
        Golden g("linear_nobias");
        Tensor x = g.input("x"), w = g.input("weight");
        g.check(linear(x, w), kSums);
    }
}

TEST_CASE("golden: embedding", "[golden]") {
    Golden g("embedding");
    Tensor w = g.input("weight");
    g.check(embedding(w, g.tensor("ids")), kSums);
}
