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
    std::vector<std::pair<const char*, Binary>> ops = {
        {"add", engine::add}, {"mul", engine::mul}, {"div", engine::div}};
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

// ---------------------------------------------------------------------------------------------
// Fused nn ops (engine/ops/nn.cpp)

// Normalizations, softmax and losses: a short sum, then division by it or a square root of it,
// and their backward subtracts two nearly equal terms: several roundings more than a plain sum.
constexpr Tol kFused{1e-5f, 1e-4f};

TEST_CASE("golden: softmax and log_softmax", "[golden]") {
    {
        Golden g("softmax");
        Tensor x = g.input("x");
        g.check(softmax(x), kFused);
    }
    {
        Golden g("log_softmax");
        Tensor x = g.input("x");
        g.check(log_softmax(x), kFused);
    }
}

TEST_CASE("golden: layer_norm", "[golden]") {
    {
        Golden g("layer_norm");
        Tensor x = g.input("x"), w = g.input("weight"), b = g.input("bias");
        g.check(layer_norm(x, w, b, 1e-5f), kFused);
    }
    {
        Golden g("layer_norm_noaffine");
        Tensor x = g.input("x");
        g.check(layer_norm(x, Tensor(), Tensor(), 1e-5f), kFused);
    }
}

TEST_CASE("golden: cross_entropy and mse_loss", "[golden]") {
    {
        Golden g("cross_entropy");
        Tensor logits = g.input("logits");
        g.check(cross_entropy(logits, g.tensor("targets")), kFused);
    }
    {
        Golden g("cross_entropy_ignore");
        Tensor logits = g.input("logits");
        g.check(cross_entropy(logits, g.tensor("targets"), -100), kFused);
    }
    {
        Golden g("cross_entropy_smooth");  // [2,4,5] logits, targets == 0 ignored, ε = 0.1
        Tensor logits = g.input("logits");
        g.check(cross_entropy(logits, g.tensor("targets"), 0, 0.1f), kFused);
    }
    {
        Golden g("mse_loss");
        Tensor pred = g.input("pred"), target = g.input("target");
        g.check(mse_loss(pred, target), kFused);
    }
}

TEST_CASE("golden: attention", "[golden]") {
    {
        Golden g("attention");  // k, v longer than q, not causal
        Tensor q = g.input("q"), k = g.input("k"), v = g.input("v");
        g.check(attention(q, k, v, false), kFused);
    }
    {
        Golden g("attention_causal");
        Tensor q = g.input("q"), k = g.input("k"), v = g.input("v");
        g.check(attention(q, k, v, true), kFused);
    }
    {
        Golden g("attention_scale");
        Tensor q = g.input("q"), k = g.input("k"), v = g.input("v");
        g.check(attention(q, k, v, true, 0.f, false, 0.3f), kFused);
    }
}

TEST_CASE("golden: rope", "[golden]") {
    // torch's angles are exact (float64, then rounded); the engine's are float32, off by ~u·angle
    // (angles up to 7 rad here), which moves sin/cos by ~1e-6.
    constexpr Tol kRope{1e-5f, 1e-5f};
    {
        Golden g("rope");
        Tensor x = g.input("x");
        g.check(rope(x), kRope);
    }
    {
        Golden g("rope_offset");  // base 500, positions 3..7
        Tensor x = g.input("x");
        g.check(rope(x, 500.f, 3), kRope);
    }
}

// ---------------------------------------------------------------------------------------------
// Convolutions and batch norm (engine/ops/conv.cpp)

TEST_CASE("golden: conv2d", "[golden]") {
    // Sums of up to Cin·kh·kw = 27 products (forward) and N·Ho·Wo = 32 (weight gradient).
    constexpr Tol kConv{2e-5f, 1e-5f};
    {
        Golden g("conv2d");  // stride 2, padding 1
        Tensor x = g.input("x"), w = g.input("weight"), b = g.input("bias");
        g.check(conv2d(x, w, b, 2, 1), kConv);
    }
    {
        Golden g("conv2d_nobias");  // 2x3 kernel, stride 1, no padding
        Tensor x = g.input("x"), w = g.input("weight");
        g.check(conv2d(x, w, Tensor(), 1, 0), kConv);
    }
    {
        Golden g("depthwise_conv2d");  // 3x3, 'same' padding
        Tensor x = g.input("x"), w = g.input("weight"), b = g.input("bias");
        g.check(depthwise_conv2d(x, w, b), kConv);
    }
    {
        Golden g("depthwise_conv2d_k5");  // 5x5, 'same' padding, no bias
        Tensor x = g.input("x"), w = g.input("weight");
        g.check(depthwise_conv2d(x, w), kConv);
    }
}

TEST_CASE("golden: batch_norm", "[golden]") {
    for (const char* name : {"batch_norm_train", "batch_norm_train_2d", "batch_norm_eval"}) {
        Golden g(name);
        bool training = std::string(name) != "batch_norm_eval";
        Tensor x = g.input("x"), w = g.input("weight"), b = g.input("bias");
        Tensor running_mean = g.tensor("running_mean").clone(), running_var = g.tensor("running_var").clone();
        Tensor out = batch_norm(x, w, b, running_mean, running_var, training, 0.1f, 1e-5f);
        g.check(out, kFused);
        // Running statistics after the step: updated in training, untouched in eval.
        g.compare("running_mean.after", running_mean, kSums);
        g.compare("running_var.after", running_var, kSums);
    }
}

// ---------------------------------------------------------------------------------------------
// One pre-LN transformer block written with engine ops, as nn/ will build it.

TEST_CASE("golden: transformer block", "[golden]") {
    // ~10 ops deep, sums of up to 128 terms (fc2) and gradients summed over 16 tokens: errors
    // compound to a few 1e-6 on O(1) values; 1e-4 leaves room and still catches any wrong term.
    constexpr Tol kBlock{1e-4f, 1e-4f};
    const int64_t B = 2, T = 8, C = 32, H = 4, D = C / H;
    Golden g("transformer_block");
    Tensor x = g.input("x");
    std::map<std::string, Tensor> p;
    for (const char* name : {"ln1", "ln2", "attn.q", "attn.k", "attn.v", "attn.proj", "mlp.fc1", "mlp.fc2"}) {
        p[std::string(name) + ".weight"] = g.input(std::string(name) + ".weight");
        p[std::string(name) + ".bias"] = g.input(std::string(name) + ".bias");
    }
    auto lin = [&](const std::string& name, const Tensor& t) {
        return linear(t, p[name + ".weight"], p[name + ".bias"]);
    };
    auto heads = [&](const Tensor& t) { return permute(t.reshape({B, T, H, D}), {0, 2, 1, 3}); };  // [B,H,T,D]

    Tensor a = layer_norm(x, p["ln1.weight"], p["ln1.bias"], 1e-5f);
    Tensor y = attention(heads(lin("attn.q", a)), heads(lin("attn.k", a)), heads(lin("attn.v", a)), true);
    Tensor h = add(x, lin("attn.proj", permute(y, {0, 2, 1, 3}).reshape({B, T, C})));
    Tensor m = layer_norm(h, p["ln2.weight"], p["ln2.bias"], 1e-5f);
    Tensor out = add(h, lin("mlp.fc2", gelu(lin("mlp.fc1", m))));
    g.check(out, kBlock);
}
