// tests/test_fused_ops.cpp: the fused ops of the transformer block and GAU, bias_gelu, bias_silu,
// bias_silu_gate and masked_relu2 (engine/ops/elementwise.h), gelu_linear and layer_norm_linear
// (engine/ops/matmul.h), add_layer_norm, scale_shift_rope and linear_cross_entropy
// (engine/ops/nn.h), against the unfused ops they replace (gelu(add(x, bias)); mul after
// bias_silu; masked_fill, relu2 and mul; bias_gelu then linear; layer_norm then linear; add then
// layer_norm; mul, add and rope; linear then cross_entropy), their
// gradients by finite differences, the thread-count independence of dbias, the memory of
// gelu_linear, layer_norm_linear and bias_silu_gate, argument errors, and the modules that use
// them: the MLP (its fused paths against the hook and dropout paths, which are unfused), the
// Pre-LN and Post-LN blocks, the LM's final norm (fused against the path a hook on the norm
// takes) and the GAU LM's residual adds.
#include <catch2/catch.hpp>

#include <omp.h>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <vector>
#include "engine/error.h"
#include "engine/ops.h"
#include "engine/rng.h"
#include "nn/gau.h"
#include "nn/transformer.h"
#include "tests/helpers.h"

using namespace engine;
using test::gradcheck;
using test::param;

namespace {

std::vector<uint32_t> bits_of(const Tensor& t) {
    std::vector<float> v = t.to_vector();
    std::vector<uint32_t> b(v.size());
    std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
    return b;
}

// Two runs' floats (as bits_of wrote them) within the rounding of a changed summation order.
bool bits_close(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); i++) {
        float fa, fb;
        std::memcpy(&fa, &a[i], sizeof fa);
        std::memcpy(&fb, &b[i], sizeof fb);
        if (std::fabs(fa - fb) > 1e-5f + 1e-4f * std::fabs(fb)) return false;
    }
    return true;
}

Tensor weights_like(const Tensor& t, uint64_t seed) {
    Tensor w = Tensor::empty(t.shape());
    Generator(seed).uniform(w.data_f32(), w.numel(), -1.f, 1.f);
    return w;
}

// The bits of each leaf's gradient (empty where it needs none) after f on copies of the leaves,
// the first made an intermediate where it needs a gradient (as a model's activation is), the output
// weighted by fixed weights; the output's bits into out_bits.
using Grads = std::vector<std::vector<uint32_t>>;
Grads grads_of(const std::vector<Tensor>& leaves, const std::function<Tensor(const std::vector<Tensor>&)>& f,
               std::vector<uint32_t>* out_bits) {
    std::vector<Tensor> in;
    for (const Tensor& t : leaves) in.push_back(t.defined() ? t.detach().requires_grad_(t.requires_grad()) : t);
    std::vector<Tensor> args = in;
    if (args[0].requires_grad()) args[0] = mul(args[0], 1.f);
    Tensor y = f(args);
    if (out_bits) *out_bits = bits_of(y);
    sum(mul(y, weights_like(y, 50))).backward();
    Grads g;
    for (const Tensor& t : in)
        g.push_back(t.defined() && t.requires_grad() ? bits_of(t.grad()) : std::vector<uint32_t>{});
    return g;
}

Tensor unfused_bias_gelu(const Tensor& x, const Tensor& b, bool approximate) {
    return approximate ? gelu_tanh(add(x, b)) : gelu(add(x, b));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// bias_gelu

// bias_gelu (exact and tanh) and bias_silu against the activation after add.
TEST_CASE("bias_gelu, bias_silu: act(x + bias), the unfused values and gradients", "[elementwise][fused]") {
    struct Act {
        const char* name;
        std::function<Tensor(const Tensor&, const Tensor&)> fused, unfused;
    };
    for (const Act& a : {Act{"gelu", [](auto& x, auto& b) { return bias_gelu(x, b); },
                             [](auto& x, auto& b) { return unfused_bias_gelu(x, b, false); }},
                         Act{"gelu_tanh", [](auto& x, auto& b) { return bias_gelu(x, b, true); },
                             [](auto& x, auto& b) { return unfused_bias_gelu(x, b, true); }},
                         Act{"silu", [](auto& x, auto& b) { return bias_silu(x, b); },
                             [](auto& x, auto& b) { return silu(add(x, b)); }}}) {
        INFO(a.name);
        Tensor x = param({3, 5, 37}, 1, -4.f, 4.f), b = param({37}, 2, -1.f, 1.f);
        Tensor x2 = x.detach().requires_grad_(true), b2 = b.detach().requires_grad_(true);
        Tensor y = a.fused(x, b), want = a.unfused(x2, b2);
        // The same functors on the same float x + b, but not necessarily the same bits: which
        // elements take the vectorized loop body and which the scalar remainder differs between
        // [rows, 37] and one flat loop, and the two may contract a·b + c into an FMA differently.
        CHECK(test::max_abs_diff(y, want) < 1e-6f);
        Tensor w = weights_like(y, 3);
        sum(mul(y, w)).backward();
        sum(mul(want, w)).backward();
        // dbias sums 15 rows, here in double, in the unfused sum_to in another order.
        CHECK(test::max_abs_diff(x.grad(), x2.grad()) < 1e-6f);
        CHECK(test::max_abs_diff(b.grad(), b2.grad()) < 1e-5f);
    }
}

TEST_CASE("bias_gelu", "[elementwise][gradcheck]") {
    gradcheck("bias_gelu", [](auto& in) { return bias_gelu(in[0], in[1]); },
              {param({4, 6}, 4, -3.f, 3.f), param({6}, 5, -1.f, 1.f)});
    gradcheck("bias_gelu_tanh", [](auto& in) { return bias_gelu(in[0], in[1], true); },
              {param({2, 3, 5}, 6, -3.f, 3.f), param({5}, 7, -1.f, 1.f)});
    gradcheck("bias_silu", [](auto& in) { return bias_silu(in[0], in[1]); },
              {param({3, 7}, 16, -3.f, 3.f), param({7}, 17, -1.f, 1.f)});
}

TEST_CASE("bias_gelu: only one input needing a gradient, no rows", "[elementwise][fused]") {
    Tensor g = weights_like(Tensor::empty({4, 6}), 15);
    Tensor x = param({4, 6}, 8, -2.f, 2.f), b = param({6}, 9);
    bias_gelu(x, b).backward(g);
    Tensor x_only = x.detach().requires_grad_(true), b_only = b.detach().requires_grad_(true);
    bias_gelu(x_only, b.detach()).backward(g);
    bias_gelu(x.detach(), b_only).backward(g);
    CHECK(bits_of(x_only.grad()) == bits_of(x.grad()));
    CHECK(bits_of(b_only.grad()) == bits_of(b.grad()));
    // No rows: an empty output, and a zero bias gradient.
    Tensor e = param({0, 6}, 10), be = param({6}, 11);
    Tensor y = bias_gelu(e, be);
    CHECK(y.shape() == Shape({0, 6}));
    sum(y).backward();
    for (float v : be.grad().to_vector()) CHECK(v == 0.f);
}

TEST_CASE("bias_gelu: dbias does not depend on the thread count, and is the column sum of dx", "[elementwise][fused]") {
    Tensor x = param({700, 96}, 12, -3.f, 3.f), b = param({96}, 13);  // several rows per chunk, parallel loops
    Tensor g = weights_like(x, 14);
    auto grads = [&](int threads) {
        int prev = omp_get_max_threads();
        omp_set_num_threads(threads);
        x.zero_grad();
        b.zero_grad();
        bias_gelu(x, b).backward(g);
        omp_set_num_threads(prev);
        return std::vector<std::vector<uint32_t>>{bits_of(x.grad()), bits_of(b.grad())};
    };
    auto one = grads(1), two = grads(2), three = grads(3);
    CHECK(one == two);
    CHECK(one == three);
    std::vector<float> dx = x.grad().to_vector(), db = b.grad().to_vector();
    for (int64_t j = 0; j < 96; j += 19) {
        double s = 0;
        for (int64_t r = 0; r < 700; r++) s += dx[r * 96 + j];
        CHECK(db[j] == Approx(s).margin(1e-5));
    }
}

TEST_CASE("bias_gelu: argument errors", "[elementwise][fused]") {
    Tensor x = Tensor::zeros({2, 3});
    CHECK_THROWS_WITH(bias_gelu(x, Tensor::zeros({4})),
                      Catch::Contains("bias_gelu: bias [4] does not match the last dim of input [2,3]"));
    CHECK_THROWS_WITH(bias_gelu(x, Tensor::zeros({1, 3})), Catch::Contains("bias_gelu: bias [1,3]"));
    CHECK_THROWS_WITH(bias_gelu(x, Tensor()), Catch::Contains("bias_gelu: bias is undefined"));
    CHECK_THROWS_WITH(bias_silu(x, Tensor::zeros({2})),
                      Catch::Contains("bias_silu: bias [2] does not match the last dim of input [2,3]"));
}

// ---------------------------------------------------------------------------------------------
// bias_silu_gate: GAU's mul(bias_silu(x, b), gate)

// The same bits as mul(bias_silu(x, b), gate) forward and for x and the gate (the same products in
// the same order), dbias within its sum's order (the fused sum adds dx, the unfused bias_silu's
// backward adds the same dx). Every input with a gradient, or one of them; widths that leave
// remainders after the vectorized loop body.
TEST_CASE("bias_silu_gate: the bits of mul(bias_silu(x, b), gate), forward and backward", "[elementwise][fused]") {
    for (int64_t n : {37, 96})
        for (int wanted = 0; wanted < 4; wanted++) {  // all, x only, bias only, gate only
            INFO("width " << n << " gradients " << wanted);
            std::vector<Tensor> leaves{param({3, 5, n}, 110, -4.f, 4.f), param({n}, 111, -1.f, 1.f),
                                       param({3, 5, n}, 112, -2.f, 2.f)};
            for (int i = 0; i < 3; i++) leaves[i].requires_grad_(wanted == 0 || wanted == i + 1);
            std::vector<uint32_t> fused_bits, plain_bits;
            Grads fused = grads_of(leaves, [](auto& in) { return bias_silu_gate(in[0], in[1], in[2]); }, &fused_bits);
            Grads plain = grads_of(leaves, [](auto& in) { return mul(bias_silu(in[0], in[1]), in[2]); }, &plain_bits);
            CHECK(fused_bits == plain_bits);
            CHECK(fused[0] == plain[0]);
            CHECK(fused[2] == plain[2]);
            CHECK(bits_close(fused[1], plain[1]));
        }
}

TEST_CASE("bias_silu_gate", "[elementwise][gradcheck]") {
    gradcheck("bias_silu_gate", [](auto& in) { return bias_silu_gate(in[0], in[1], in[2]); },
              {param({3, 7}, 113, -3.f, 3.f), param({7}, 114, -1.f, 1.f), param({3, 7}, 115, -2.f, 2.f)});
}

// What it is for: U = silu(x + b) is not kept for the backward.
TEST_CASE("bias_silu_gate: one [rows, n] tensor less alive between forward and backward", "[elementwise][fused]") {
    const int64_t rows = 64, n = 256;
    Tensor x0 = param({rows, n}, 116), b = param({n}, 117), gate0 = param({rows, n}, 118);
    auto kept = [&](bool fused) {
        Tensor x = mul(x0, 1.f), gate = mul(gate0, 1.f);  // intermediates, as in GAU
        size_t before = host_memory_in_use();
        Tensor y = fused ? bias_silu_gate(x, b, gate) : mul(bias_silu(x, b), gate);
        size_t held = host_memory_in_use() - before;
        sum(y).backward();
        return held;
    };
    size_t fused = kept(true), plain = kept(false);
    CHECK(plain - fused == (size_t)rows * n * sizeof(float));
}

TEST_CASE("bias_silu_gate: argument errors", "[elementwise][fused]") {
    Tensor x = Tensor::zeros({2, 3}), b = Tensor::zeros({3});
    CHECK_THROWS_WITH(bias_silu_gate(x, Tensor::zeros({4}), x),
                      Catch::Contains("bias_silu_gate: bias [4] does not match the last dim of input [2,3]"));
    CHECK_THROWS_WITH(bias_silu_gate(x, b, Tensor::zeros({3, 2})),
                      Catch::Contains("bias_silu_gate: gate [3,2] is not the input's shape [2,3]"));
    CHECK_THROWS_WITH(bias_silu_gate(x, b, Tensor()), Catch::Contains("bias_silu_gate: gate is undefined"));
}

// ---------------------------------------------------------------------------------------------
// add_layer_norm

TEST_CASE("add_layer_norm: the bits of add then layer_norm, forward and backward", "[nnops][fused]") {
    for (int variant = 0; variant < 3; variant++) {  // affine, weight only, none
        INFO("variant " << variant);
        Tensor x = param({3, 4, 33}, 20, -2.f, 2.f), r = param({3, 4, 33}, 21, -2.f, 2.f);
        Tensor w = variant < 2 ? param({33}, 22, 0.5f, 1.5f) : Tensor();
        Tensor b = variant < 1 ? param({33}, 23) : Tensor();
        auto copy = [](const Tensor& t) { return t.defined() ? t.detach().requires_grad_(true) : t; };
        Tensor x2 = copy(x), r2 = copy(r), w2 = copy(w), b2 = copy(b);

        AddLayerNorm got = add_layer_norm(x, r, w, b, 1e-5f);
        Tensor sum2 = add(x2, r2), norm2 = layer_norm(sum2, w2, b2, 1e-5f);
        CHECK(bits_of(got.sum) == bits_of(sum2));
        CHECK(bits_of(got.norm) == bits_of(norm2));
        // Both outputs used, as in a block: the next residual add takes the sum, a branch the norm.
        Tensor ws = weights_like(got.sum, 24), wn = weights_like(got.norm, 25);
        engine::sum(add(mul(got.sum, ws), mul(got.norm, wn))).backward();
        engine::sum(add(mul(sum2, ws), mul(norm2, wn))).backward();
        CHECK(bits_of(x.grad()) == bits_of(x2.grad()));
        CHECK(bits_of(r.grad()) == bits_of(r2.grad()));
        if (w.defined()) CHECK(bits_of(w.grad()) == bits_of(w2.grad()));
        if (b.defined()) CHECK(bits_of(b.grad()) == bits_of(b2.grad()));
    }
}

TEST_CASE("add_layer_norm", "[nnops][gradcheck]") {
    // Both outputs at once: concat puts the sum and the norm in one tensor for the weighted loss.
    auto both = [](auto& in) {
        AddLayerNorm o = add_layer_norm(in[0], in[1], in[2], in[3]);
        return concat({o.sum, o.norm}, 0);
    };
    gradcheck("add_layer_norm", both,
              {param({3, 5}, 30, -2.f, 2.f), param({3, 5}, 31, -2.f, 2.f), param({5}, 32, 0.5f, 1.5f),
               param({5}, 33)});
    gradcheck("add_layer_norm_norm_only", [](auto& in) { return add_layer_norm(in[0], in[1], Tensor(), Tensor()).norm; },
              {param({2, 3, 4}, 34, -2.f, 2.f), param({2, 3, 4}, 35, -2.f, 2.f)});
    gradcheck("add_layer_norm_bias_only", both,
              {param({3, 5}, 36, -2.f, 2.f), param({3, 5}, 37, -2.f, 2.f), Tensor(), param({5}, 38)});
}

TEST_CASE("add_layer_norm: argument errors", "[nnops][fused]") {
    Tensor x = Tensor::zeros({2, 3});
    CHECK_THROWS_WITH(add_layer_norm(x, Tensor::zeros({1, 3}), Tensor(), Tensor()),
                      Catch::Contains("add_layer_norm: x [2,3] and residual [1,3] must have the same shape"));
    CHECK_THROWS_WITH(add_layer_norm(x, x, Tensor::ones({4}), Tensor()),
                      Catch::Contains("add_layer_norm: weight [4] does not match the last dim of input [2,3]"));
    CHECK_THROWS_WITH(add_layer_norm(x, x, Tensor(), Tensor(), -1.f), Catch::Contains("add_layer_norm: eps"));
}

// ---------------------------------------------------------------------------------------------
// scale_shift_rope: GAU's rope(add(mul(z, gamma), beta)) for Q and K in one op

namespace {

Tensor unfused_scale_shift_rope(const Tensor& x, const Tensor& gamma, const Tensor& beta, float base) {
    Tensor h = add(mul(x, gamma), beta);
    return base > 0.f ? rope(h, base) : h;
}

}  // namespace

// The values and gradients of mul, add and rope within roundings (one fma for x·gamma + beta, the
// parameters' sums in another order); with Q and K both from x (GAU's z), the second adds its
// share into x's gradient. [3, 40, 8] is 120 rows, more than the 64 chunks the CPU sums dgamma and
// dbeta over (so a chunk holds two rows, some two rows of different sequences: rope's position is
// r % T) and than the 64 rows of a CUDA chunk.
TEST_CASE("scale_shift_rope: mul, add and rope in one op, values and gradients", "[nnops][fused]") {
    for (const Shape& shape : {Shape{2, 5, 8}, Shape{3, 40, 8}})
        for (float base : {10000.f, 0.f})
            for (bool qk : {false, true}) {
                INFO("x " << shape.str() << " base " << base << " q·kᵀ from one x " << qk);
                std::vector<Tensor> leaves{param(shape, 90, -2.f, 2.f), param({8}, 91, 0.5f, 1.5f), param({8}, 92)};
                if (qk) leaves.insert(leaves.end(), {param({8}, 93, 0.5f, 1.5f), param({8}, 94)});
                auto model = [&](bool fused) {
                    return [fused, qk, base](const std::vector<Tensor>& in) {
                        auto f = fused ? scale_shift_rope : unfused_scale_shift_rope;
                        Tensor q = f(in[0], in[1], in[2], base);
                        return qk ? matmul(q, f(in[0], in[3], in[4], base), false, true) : q;
                    };
                };
                std::vector<uint32_t> fused_bits, plain_bits;
                Grads fused = grads_of(leaves, model(true), &fused_bits);
                Grads plain = grads_of(leaves, model(false), &plain_bits);
                CHECK(bits_close(fused_bits, plain_bits));
                for (size_t i = 0; i < leaves.size(); i++) {
                    INFO("leaf " << i);
                    CHECK(fused[i].size() == plain[i].size());
                    CHECK(bits_close(fused[i], plain[i]));
                }
            }
}

TEST_CASE("scale_shift_rope", "[nnops][gradcheck]") {
    gradcheck("scale_shift_rope", [](auto& in) { return scale_shift_rope(in[0], in[1], in[2], 100.f); },
              {param({2, 3, 6}, 95, -2.f, 2.f), param({6}, 96, 0.5f, 1.5f), param({6}, 97)});
    gradcheck("scale_shift_rope_no_rotation", [](auto& in) { return scale_shift_rope(in[0], in[1], in[2], 0.f); },
              {param({4, 5}, 98, -2.f, 2.f), param({5}, 99, 0.5f, 1.5f), param({5}, 100)});
}

// dgamma and dbeta: per chunk of rows, then over the chunks in order (layer_norm's sums), so the
// bits do not depend on the thread count.
TEST_CASE("scale_shift_rope: the parameters' gradients do not depend on the thread count", "[nnops][fused]") {
    Tensor x = param({6, 120, 64}, 101, -2.f, 2.f), gamma = param({64}, 102), beta = param({64}, 103);
    Tensor g = weights_like(x, 104);
    auto grads = [&](int threads) {
        int prev = omp_get_max_threads();
        omp_set_num_threads(threads);
        for (Tensor* t : {&x, &gamma, &beta}) t->zero_grad();
        scale_shift_rope(x, gamma, beta).backward(g);
        omp_set_num_threads(prev);
        return Grads{bits_of(x.grad()), bits_of(gamma.grad()), bits_of(beta.grad())};
    };
    Grads one = grads(1);
    CHECK(grads(2) == one);
    CHECK(grads(3) == one);
}

TEST_CASE("scale_shift_rope: argument errors", "[nnops][fused]") {
    Tensor x = Tensor::zeros({2, 3, 4}), p4 = Tensor::ones({4});
    CHECK_THROWS_WITH(scale_shift_rope(x, p4, Tensor()), Catch::Contains("scale_shift_rope: gamma and beta are both"));
    CHECK_THROWS_WITH(scale_shift_rope(x, Tensor::ones({3}), p4),
                      Catch::Contains("scale_shift_rope: gamma [3] does not match the last dim of input [2,3,4]"));
    CHECK_THROWS_WITH(scale_shift_rope(Tensor::zeros({2, 3}), Tensor::ones({3}), Tensor::ones({3})),
                      Catch::Contains("scale_shift_rope: a rotation needs an even last dim, got [2,3]"));
    CHECK_THROWS_WITH(scale_shift_rope(Tensor::zeros({4}), p4, p4),
                      Catch::Contains("scale_shift_rope: input must be [..., T, D], got [4]"));
}

// ---------------------------------------------------------------------------------------------
// masked_relu2: GAU's mul(relu2(masked_fill(x, causal mask, 0)), scale) in one op

namespace {

// The mask of key j hidden from query i for [T, S] scores (attention's convention: j > i + S − T).
Tensor hidden_keys(int64_t T, int64_t S) {
    Tensor m = Tensor::zeros({T, S});
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < S; j++)
            if (j > i + S - T) m.data_f32()[i * S + j] = 1.f;
    return m;
}

}  // namespace

TEST_CASE("masked_relu2: the bits of masked_fill, relu2 and the scalar multiply, forward and backward",
          "[elementwise][fused]") {
    for (bool causal : {true, false})
        for (auto ts : std::vector<std::array<int64_t, 2>>{{9, 9}, {5, 9}, {9, 5}, {1, 37}}) {
            int64_t T = ts[0], S = ts[1];
            INFO("causal " << causal << " T " << T << " S " << S);
            const float scale = 1.f / 7.f;
            Tensor x = param({2, 3, T, S}, 18, -2.f, 2.f), x2 = x.detach().requires_grad_(true);
            Tensor y = masked_relu2(x, scale, causal);
            Tensor want = causal ? masked_fill(x2, hidden_keys(T, S), 0.f) : x2;
            want = mul(relu2(want), scale);
            CHECK(bits_of(y) == bits_of(want));
            Tensor w = weights_like(y, 19);
            sum(mul(y, w)).backward();
            sum(mul(want, w)).backward();
            CHECK(bits_of(x.grad()) == bits_of(x2.grad()));
        }
}

TEST_CASE("masked_relu2", "[elementwise][gradcheck]") {
    // Inputs away from 0, where relu2's derivative is continuous but its second is not.
    gradcheck("masked_relu2 causal", [](auto& in) { return masked_relu2(in[0], 0.5f, true); },
              {param({2, 4, 6}, 20, 0.2f, 1.5f)});
    gradcheck("masked_relu2", [](auto& in) { return masked_relu2(in[0], 2.f, false); },
              {param({3, 5}, 21, 0.2f, 1.5f)});
}

TEST_CASE("masked_relu2: argument errors", "[elementwise][fused]") {
    CHECK_THROWS_WITH(masked_relu2(Tensor::zeros({4}), 1.f, true),
                      Catch::Contains("masked_relu2: input [4] needs at least 2 dims"));
    CHECK_THROWS_WITH(masked_relu2(Tensor::zeros({2, 2}, DType::I32), 1.f, true), Catch::Contains("masked_relu2"));
}

// ---------------------------------------------------------------------------------------------
// gelu_linear: linear(bias_gelu(h, b1), w, b) keeping h, not the GELU's output

namespace {

// The gradients of h, b1, w and b after gelu_linear or the two ops it replaces, with the same
// weighting of the output (h an intermediate, as fc1's output is).
Grads gelu_linear_grads(bool fused, const std::vector<Tensor>& leaves, bool approximate,
                        std::vector<uint32_t>* out_bits = nullptr) {
    return grads_of(
        leaves,
        [&](const std::vector<Tensor>& in) {
            return fused ? gelu_linear(in[0], in[1], in[2], in[3], approximate)
                         : linear(bias_gelu(in[0], in[1], approximate), in[2], in[3]);
        },
        out_bits);
}

}  // namespace

TEST_CASE("gelu_linear: the bits of bias_gelu then linear, forward and every gradient", "[matmul][fused]") {
    for (bool approximate : {false, true})
        for (int64_t hidden : {96, 37}) {  // 37: the vectorized loops' scalar remainder too
            INFO("approximate " << approximate << " hidden " << hidden);
            std::vector<Tensor> leaves{param({3, 7, hidden}, 51, -3.f, 3.f), param({hidden}, 52),
                                       param({10, hidden}, 53), param({10}, 54)};
            std::vector<uint32_t> fused_out, plain_out;
            auto fused = gelu_linear_grads(true, leaves, approximate, &fused_out);
            auto plain = gelu_linear_grads(false, leaves, approximate, &plain_out);
            CHECK(fused_out == plain_out);
            for (size_t i = 0; i < fused.size(); i++) {
                INFO("input " << i);
                CHECK(fused[i] == plain[i]);
            }
        }
}

TEST_CASE("gelu_linear: some inputs without a gradient, no bias", "[matmul][fused]") {
    auto leaves = [](bool h, bool b1, bool w, bool b) {
        return std::vector<Tensor>{param({4, 12}, 55, -3.f, 3.f).requires_grad_(h), param({12}, 56).requires_grad_(b1),
                                   param({5, 12}, 57).requires_grad_(w), param({5}, 58).requires_grad_(b)};
    };
    for (auto flags : std::vector<std::array<bool, 4>>{{true, false, false, false}, {false, true, false, false},
                                                       {false, false, true, false}, {false, false, false, true},
                                                       {false, true, true, false}}) {
        INFO("h " << flags[0] << " b1 " << flags[1] << " w " << flags[2] << " b " << flags[3]);
        auto in = leaves(flags[0], flags[1], flags[2], flags[3]);
        CHECK(gelu_linear_grads(true, in, false) == gelu_linear_grads(false, in, false));
    }
    std::vector<Tensor> no_bias{param({4, 12}, 59, -3.f, 3.f), param({12}, 60), param({5, 12}, 61), Tensor()};
    CHECK(gelu_linear_grads(true, no_bias, false) == gelu_linear_grads(false, no_bias, false));
}

TEST_CASE("gelu_linear", "[matmul][gradcheck]") {
    gradcheck("gelu_linear", [](auto& in) { return gelu_linear(in[0], in[1], in[2], in[3]); },
              {param({2, 3, 6}, 62, -3.f, 3.f), param({6}, 63), param({4, 6}, 64), param({4}, 65)});
    gradcheck("gelu_linear tanh, no bias", [](auto& in) { return gelu_linear(in[0], in[1], in[2], Tensor(), true); },
              {param({5, 7}, 66, -3.f, 3.f), param({7}, 67), param({3, 7}, 68)});
}

// What the op is for: from the forward to the backward it keeps h and the weights, not also the
// GELU's [rows, hidden] output, as bias_gelu then linear do.
TEST_CASE("gelu_linear: one [rows, hidden] tensor less alive between forward and backward", "[matmul][fused]") {
    const int64_t rows = 64, hidden = 256, out = 16;
    Tensor x = param({rows, 32}, 69), w1 = param({hidden, 32}, 70), b1 = param({hidden}, 71),
           w2 = param({out, hidden}, 72), b2 = param({out}, 73);
    auto kept = [&](bool fused) {
        size_t before = host_memory_in_use();
        Tensor h = linear(x, w1, Tensor());
        Tensor y = fused ? gelu_linear(h, b1, w2, b2) : linear(bias_gelu(h, b1), w2, b2);
        h = Tensor();  // held by the graph only
        size_t held = host_memory_in_use() - before;
        sum(y).backward();
        return held;
    };
    size_t fused = kept(true), plain = kept(false);
    CHECK(plain - fused == (size_t)rows * hidden * sizeof(float));
}

TEST_CASE("gelu_linear: argument errors", "[matmul][fused]") {
    Tensor h = Tensor::zeros({2, 3}), w = Tensor::zeros({4, 3});
    CHECK_THROWS_WITH(gelu_linear(h, Tensor::zeros({4}), w),
                      Catch::Contains("gelu_linear: gelu bias [4] does not match the last dim of input [2,3]"));
    CHECK_THROWS_WITH(gelu_linear(h, Tensor::zeros({3}), Tensor::zeros({4, 5})),
                      Catch::Contains("gelu_linear: input [2,3] does not end in in_features=5"));
    CHECK_THROWS_WITH(gelu_linear(h, Tensor::zeros({3}), w, Tensor::zeros({3})),
                      Catch::Contains("gelu_linear: bias [3] does not match weight [4,3]"));
    CHECK_THROWS_WITH(gelu_linear(h, Tensor(), w), Catch::Contains("gelu_linear: gelu bias is undefined"));
}

// ---------------------------------------------------------------------------------------------
// linear and gelu_linear with a residual: residual + the op, the add done by the GEMM

namespace {

// linear(x, w, b) or gelu_linear(x, b1, w, b) plus the residual (in: x, [b1,] w, b, residual), the
// add inside the GEMM (fused) or after it.
Tensor plus_residual(bool fused, bool gelu, const std::vector<Tensor>& in) {
    const Tensor& r = in.back();
    if (gelu)
        return fused ? gelu_linear(in[0], in[1], in[2], in[3], false, r)
                     : add(r, gelu_linear(in[0], in[1], in[2], in[3]));
    return fused ? linear(in[0], in[1], in[2], r) : add(r, linear(in[0], in[1], in[2]));
}

}  // namespace

// The forward within the rounding of the sums' order ((residual + b) + x·Wᵀ against residual +
// (b + x·Wᵀ)); the backward the same bits, the residual's gradient the output's.
TEST_CASE("linear, gelu_linear: a residual added by the GEMM against add after the op", "[matmul][fused]") {
    for (bool gelu : {false, true})
        for (bool bias : {true, false})
            for (bool residual_grad : {true, false}) {
                INFO("gelu " << gelu << " bias " << bias << " residual needs a gradient " << residual_grad);
                std::vector<Tensor> leaves;  // (not a braced list: GCC 12 warns falsely on it here)
                leaves.push_back(param({3, 7, 12}, 74, -3.f, 3.f));
                if (gelu) leaves.push_back(param({12}, 75));
                leaves.push_back(param({10, 12}, 76));
                leaves.push_back(bias ? param({10}, 77) : Tensor());
                leaves.push_back(param({3, 7, 10}, 78).requires_grad_(residual_grad));
                std::vector<uint32_t> fused_bits, plain_bits;
                Grads fused = grads_of(leaves, [&](auto& in) { return plus_residual(true, gelu, in); }, &fused_bits);
                Grads plain = grads_of(leaves, [&](auto& in) { return plus_residual(false, gelu, in); }, &plain_bits);
                Tensor fused_out = plus_residual(true, gelu, leaves), plain_out = plus_residual(false, gelu, leaves);
                CHECK(test::max_abs_diff(fused_out, plain_out) < 1e-5f);
                if (bias) CHECK(test::max_abs_diff(fused_out, plain_out) > 0.f);  // the order differs somewhere
                for (size_t i = 0; i < fused.size(); i++) {
                    INFO("input " << i);
                    CHECK(fused[i] == plain[i]);
                }
                CHECK(fused.back().empty() != residual_grad);
            }
}

TEST_CASE("linear, gelu_linear with a residual", "[matmul][gradcheck]") {
    gradcheck("linear residual", [](auto& in) { return linear(in[0], in[1], in[2], in[3]); },
              {param({2, 3, 4}, 79), param({5, 4}, 80), param({5}, 81), param({2, 3, 5}, 82)});
    gradcheck("linear residual, no bias", [](auto& in) { return linear(in[0], in[1], Tensor(), in[2]); },
              {param({3, 4}, 83), param({2, 4}, 84), param({3, 2}, 85)});
    gradcheck("gelu_linear residual",
              [](auto& in) { return gelu_linear(in[0], in[1], in[2], in[3], true, in[4]); },
              {param({2, 3, 6}, 86, -3.f, 3.f), param({6}, 87), param({4, 6}, 88), param({4}, 89),
               param({2, 3, 4}, 90)});
}

TEST_CASE("linear, gelu_linear: residual argument errors", "[matmul][fused]") {
    Tensor x = Tensor::zeros({2, 3}), w = Tensor::zeros({4, 3});
    CHECK_THROWS_WITH(linear(x, w, Tensor(), Tensor::zeros({2, 3})),
                      Catch::Contains("linear: residual [2,3] is not the output's shape [2,4] "
                                      "(input [2,3], weight [4,3])"));
    CHECK_THROWS_WITH(gelu_linear(x, Tensor::zeros({3}), w, Tensor(), false, Tensor::zeros({4})),
                      Catch::Contains("gelu_linear: residual [4] is not the output's shape [2,4]"));
    CHECK_THROWS_WITH(linear(x, w, Tensor(), Tensor::zeros({2, 4}, DType::I32)),
                      Catch::Contains("linear: residual"));
}

// ---------------------------------------------------------------------------------------------
// layer_norm_linear: linear(layer_norm(x), w, b) keeping x, not the norm's output

namespace {

// The gradients of x, the norm's weight and bias, w and b after layer_norm_linear or the two ops it
// replaces, with the same weighting of the output. x is an intermediate (as a residual sum is), so
// its gradient goes through autograd's accumulation as in a model.
Grads layer_norm_linear_grads(bool fused, const std::vector<Tensor>& leaves,
                              std::vector<uint32_t>* out_bits = nullptr) {
    return grads_of(
        leaves,
        [&](const std::vector<Tensor>& in) {
            return fused ? layer_norm_linear(in[0], in[1], in[2], 1e-5f, in[3], in[4])
                         : linear(layer_norm(in[0], in[1], in[2], 1e-5f), in[3], in[4]);
        },
        out_bits);
}

}  // namespace

TEST_CASE("layer_norm_linear: the bits of layer_norm then linear, forward and every gradient", "[matmul][fused]") {
    for (int64_t n : {96, 37})  // 37: the vectorized loops' scalar remainder too
        for (bool affine : {true, false}) {
            INFO("n " << n << " affine " << affine);
            std::vector<Tensor> leaves{param({3, 7, n}, 81, -3.f, 3.f), affine ? param({n}, 82) : Tensor(),
                                       affine ? param({n}, 83) : Tensor(), param({10, n}, 84), param({10}, 85)};
            std::vector<uint32_t> fused_out, plain_out;
            auto fused = layer_norm_linear_grads(true, leaves, &fused_out);
            auto plain = layer_norm_linear_grads(false, leaves, &plain_out);
            CHECK(fused_out == plain_out);
            for (size_t i = 0; i < fused.size(); i++) {
                INFO("input " << i);
                CHECK(fused[i] == plain[i]);
            }
        }
}

TEST_CASE("layer_norm_linear: some inputs without a gradient, no bias", "[matmul][fused]") {
    auto leaves = [](std::array<bool, 5> f) {
        return std::vector<Tensor>{param({6, 12}, 86, -3.f, 3.f).requires_grad_(f[0]),
                                   param({12}, 87).requires_grad_(f[1]), param({12}, 88).requires_grad_(f[2]),
                                   param({5, 12}, 89).requires_grad_(f[3]), param({5}, 90).requires_grad_(f[4])};
    };
    for (auto flags : std::vector<std::array<bool, 5>>{{true, false, false, false, false},
                                                       {false, true, false, false, false},
                                                       {false, false, true, false, false},
                                                       {false, false, false, true, false},
                                                       {false, false, false, false, true},
                                                       {true, false, false, true, true}}) {
        INFO("x " << flags[0] << " norm weight " << flags[1] << " norm bias " << flags[2] << " w " << flags[3]
                  << " b " << flags[4]);
        auto in = leaves(flags);
        CHECK(layer_norm_linear_grads(true, in) == layer_norm_linear_grads(false, in));
    }
    auto no_bias = leaves({true, true, true, true, true});
    no_bias[4] = Tensor();
    CHECK(layer_norm_linear_grads(true, no_bias) == layer_norm_linear_grads(false, no_bias));
}

TEST_CASE("layer_norm_linear", "[matmul][gradcheck]") {
    gradcheck("layer_norm_linear",
              [](auto& in) { return layer_norm_linear(in[0], in[1], in[2], 1e-5f, in[3], in[4]); },
              {param({2, 3, 6}, 91, -3.f, 3.f), param({6}, 92), param({6}, 93), param({4, 6}, 94), param({4}, 95)});
    gradcheck("layer_norm_linear, no norm parameters, no bias",
              [](auto& in) { return layer_norm_linear(in[0], Tensor(), Tensor(), 1e-5f, in[1]); },
              {param({5, 7}, 96, -3.f, 3.f), param({3, 7}, 97)});
    gradcheck("layer_norm_linear, norm bias without norm weight",
              [](auto& in) { return layer_norm_linear(in[0], Tensor(), in[1], 1e-5f, in[2], in[3]); },
              {param({5, 7}, 103, -3.f, 3.f), param({7}, 104), param({3, 7}, 105), param({3}, 106)});
}

// What the op is for: from the forward to the backward it keeps x, its row statistics and the
// weights, not also the norm's [rows, in] output, as layer_norm then linear do.
TEST_CASE("layer_norm_linear: one [rows, in] tensor less alive between forward and backward", "[matmul][fused]") {
    const int64_t rows = 64, in = 48, out = 16;
    Tensor x0 = param({rows, in}, 98), nw = param({in}, 99), nb = param({in}, 100), w = param({out, in}, 101),
           b = param({out}, 102);
    auto kept = [&](bool fused) {
        size_t before = host_memory_in_use();
        Tensor x = mul(x0, 1.f);
        Tensor y = fused ? layer_norm_linear(x, nw, nb, 1e-5f, w, b) : linear(layer_norm(x, nw, nb), w, b);
        x = Tensor();  // held by the graph only
        size_t held = host_memory_in_use() - before;
        sum(y).backward();
        return held;
    };
    size_t fused = kept(true), plain = kept(false);
    CHECK(plain - fused == (size_t)rows * in * sizeof(float));
}

TEST_CASE("layer_norm_linear: argument errors", "[matmul][fused]") {
    Tensor x = Tensor::zeros({2, 3}), w = Tensor::zeros({4, 3});
    CHECK_THROWS_WITH(layer_norm_linear(x, Tensor::zeros({4}), Tensor(), 1e-5f, w),
                      Catch::Contains("layer_norm_linear: norm weight [4] does not match the last dim"));
    CHECK_THROWS_WITH(layer_norm_linear(x, Tensor(), Tensor::zeros({2}), 1e-5f, w),
                      Catch::Contains("layer_norm_linear: norm bias [2] does not match the last dim of input [2,3]"));
    CHECK_THROWS_WITH(layer_norm_linear(x, Tensor(), Tensor(), 1e-5f, Tensor::zeros({4, 5})),
                      Catch::Contains("layer_norm_linear: input [2,3] does not end in in_features=5"));
    CHECK_THROWS_WITH(layer_norm_linear(x, Tensor(), Tensor(), 1e-5f, w, Tensor::zeros({3})),
                      Catch::Contains("layer_norm_linear: bias [3] does not match weight [4,3]"));
    CHECK_THROWS_WITH(layer_norm_linear(x, Tensor(), Tensor(), -1.f, w), Catch::Contains("layer_norm_linear: eps"));
}

// ---------------------------------------------------------------------------------------------
// The modules: a hook on fc1 or on a norm takes the unfused path, which must compute the same.

namespace {

struct Run {
    std::vector<uint32_t> out;
    std::vector<std::vector<uint32_t>> grads;
};

// A transformer block 32 wide, 2 heads, MLP 64.
nn::BlockConfig small_block() {
    nn::BlockConfig c;
    c.dim = 32;
    c.heads = 2;
    c.mlp_hidden = 64;
    return c;
}

Run run_model(nn::Module& model, const std::function<Tensor()>& forward) {
    for (auto& p : model.parameters()) p.zero_grad();
    Tensor out = forward();
    engine::sum(mul(out, weights_like(out, 40))).backward();
    Run r{bits_of(out), {}};
    for (auto& p : model.parameters()) r.grads.push_back(bits_of(p.grad()));
    return r;
}

// Two runs' outputs and every parameter's gradient within the rounding of a changed summation
// order (bits_close), the parameter named where one is not.
void check_runs_close(const Run& a, const Run& b) {
    CHECK(bits_close(a.out, b.out));
    REQUIRE(a.grads.size() == b.grads.size());
    for (size_t i = 0; i < a.grads.size(); i++) {
        INFO("parameter " << i);
        CHECK(bits_close(a.grads[i], b.grads[i]));
    }
}

// The names of y's autograd graph's nodes, y's own first.
std::vector<std::string> graph_ops(const Tensor& y) {
    std::vector<std::string> names;
    std::set<const engine::Node*> seen;
    std::vector<const engine::Node*> todo{y.impl()->grad_fn.get()};
    while (!todo.empty()) {
        const engine::Node* n = todo.back();
        todo.pop_back();
        if (!n || !seen.insert(n).second) continue;
        names.push_back(n->name);
        for (const Tensor& in : n->inputs)
            if (in.defined()) todo.push_back(in.impl()->grad_fn.get());
    }
    return names;
}

int64_t count_ops(const std::vector<std::string>& names, const std::string& name) {
    return std::count(names.begin(), names.end(), name);
}

}  // namespace

TEST_CASE("MLP: bias_gelu path against the hooked (unfused) path", "[nn][fused]") {
    nn::MLP mlp(24, 96);
    Tensor x = param({2, 5, 24}, 41).detach();
    // Unhooked, fc1's bias goes in with the GELU (here inside gelu_linear, nothing coming before fc2)
    // after fc1's GEMM without it; hooked, fc1 adds its bias and the GELU runs apart.
    CHECK(graph_ops(mlp.forward(x)) == std::vector<std::string>{"gelu_linear", "linear"});
    Run fused = run_model(mlp, [&] { return mlp.forward(x); });
    int seen = 0;
    mlp.fc1->forward_hook = [&](const nn::Module&, const Tensor& out) {
        seen++;
        CHECK(out.shape() == Shape({2, 5, 96}));  // the Linear's output, bias included
    };
    Run hooked = run_model(mlp, [&] { return mlp.forward(x); });
    CHECK(seen == 1);
    CHECK(graph_ops(mlp.forward(x)) == std::vector<std::string>{"linear", "gelu", "linear"});
    mlp.fc1->forward_hook = nullptr;
    // Outputs and gradients agree to rounding (see the first bias_gelu test).
    REQUIRE(fused.out.size() == hooked.out.size());
    std::vector<float> fo(fused.out.size()), ho(fo.size());
    std::memcpy(fo.data(), fused.out.data(), fo.size() * 4);
    std::memcpy(ho.data(), hooked.out.data(), ho.size() * 4);
    for (size_t k = 0; k < fo.size(); k++) CHECK(fo[k] == Approx(ho[k]).epsilon(1e-5).margin(1e-6));
    REQUIRE(fused.grads.size() == hooked.grads.size());
    auto named = mlp.named_parameters();
    for (size_t i = 0; i < named.size(); i++) {
        INFO(named[i].name);
        std::vector<float> a(fused.grads[i].size()), b(a.size());
        std::memcpy(a.data(), fused.grads[i].data(), a.size() * 4);
        std::memcpy(b.data(), hooked.grads[i].data(), b.size() * 4);
        for (size_t k = 0; k < a.size(); k++) CHECK(a[k] == Approx(b[k]).epsilon(1e-5).margin(1e-6));
    }
}

// fc2's hook and an active dropout take bias_gelu then fc2; otherwise gelu_linear runs, with the
// same bits.
TEST_CASE("MLP: gelu_linear path against the fc2-hooked and dropout paths", "[nn][fused]") {
    nn::MLP mlp(24, 96, nn::Activation::GELU, 0.5f);
    Tensor x = param({2, 5, 24}, 42).detach();
    mlp.eval();  // dropout off: gelu_linear
    CHECK(graph_ops(mlp.forward(x)).front() == "gelu_linear");
    Run fused = run_model(mlp, [&] { return mlp.forward(x); });
    int seen = 0;
    std::vector<float> gelu_out;
    mlp.fc2->input_hook = [&](const nn::Module&, const Tensor& in) {
        seen++;
        CHECK(in.shape() == Shape({2, 5, 96}));  // the GELU's output
        gelu_out = in.to_vector();
    };
    Run hooked = run_model(mlp, [&] { return mlp.forward(x); });
    mlp.fc2->input_hook = nullptr;
    CHECK(seen == 1);
    CHECK(fused.out == hooked.out);
    CHECK(fused.grads == hooked.grads);
    // Training with p = 0.5: bias_gelu, the dropout, then fc2.
    mlp.train();
    CHECK(graph_ops(mlp.forward(x)) == std::vector<std::string>{"linear", "dropout", "bias_gelu", "linear"});
    Run dropped = run_model(mlp, [&] { return mlp.forward(x); });
    CHECK(dropped.out != fused.out);
    // What fc2 sees is the GELU's output with each value dropped (0) or kept and scaled by 1/(1 − p) = 2,
    // some of each.
    std::vector<float> dropped_in;
    mlp.fc2->input_hook = [&](const nn::Module&, const Tensor& in) { dropped_in = in.to_vector(); };
    mlp.forward(x);
    mlp.fc2->input_hook = nullptr;
    REQUIRE(dropped_in.size() == gelu_out.size());
    size_t zeros = 0;
    for (size_t i = 0; i < dropped_in.size(); i++) {
        if (dropped_in[i] == 0.f) {
            zeros++;
            continue;
        }
        CHECK(dropped_in[i] == Approx(2.f * gelu_out[i]));
    }
    CHECK(zeros > 0);
    CHECK(zeros < dropped_in.size());
}

// Without hooks on q, k and v, MultiHeadAttention runs them as one GEMM (attention_qkv); a hook
// takes three linears and attention_tokens. The same values and parameter gradients, to rounding
// (one GEMM over the stacked weights sums in other blocks than three).
TEST_CASE("MultiHeadAttention: one q/k/v GEMM against the hooked path", "[nn][fused]") {
    for (bool causal : {false, true}) {
        INFO("causal " << causal);
        nn::MultiHeadAttention mha(24, 3, causal);
        Tensor x = param({2, 7, 24}, 43).detach();
        // Unhooked: two linears (q/k/v stacked, proj); hooked: q, k, v and proj apart.
        CHECK(count_ops(graph_ops(mha.forward(x)), "linear") == 2);
        Run stacked = run_model(mha, [&] { return mha.forward(x); });
        int seen = 0;
        mha.k->forward_hook = [&](const nn::Module&, const Tensor&) { seen++; };
        Run hooked = run_model(mha, [&] { return mha.forward(x); });
        CHECK(seen == 1);
        CHECK(count_ops(graph_ops(mha.forward(x)), "linear") == 4);
        mha.k->forward_hook = nullptr;
        auto floats = [](const std::vector<uint32_t>& bits) {
            std::vector<float> f(bits.size());
            std::memcpy(f.data(), bits.data(), bits.size() * 4);
            return f;
        };
        std::vector<float> a = floats(stacked.out), b = floats(hooked.out);
        for (size_t k = 0; k < a.size(); k++) CHECK(a[k] == Approx(b[k]).epsilon(1e-5).margin(1e-6));
        auto named = mha.named_parameters();
        REQUIRE(stacked.grads.size() == named.size());
        for (size_t i = 0; i < named.size(); i++) {
            INFO(named[i].name);
            std::vector<float> ga = floats(stacked.grads[i]), gb = floats(hooked.grads[i]);
            for (size_t k = 0; k < ga.size(); k++) CHECK(ga[k] == Approx(gb[k]).epsilon(1e-5).margin(1e-6));
        }
    }
}

// Pre-LN: the norms inside the q/k/v GEMM and fc1's (layer_norm_linear); Post-LN: add_layer_norm.
// A hook on the norms takes layer_norm and add then layer_norm: the same bits.
TEST_CASE("TransformerBlock: fused norms against the hooked (unfused) path, Pre-LN and Post-LN", "[nn][fused]") {
    for (bool pre_norm : {true, false})
        for (bool fc1_hook : {true, false}) {
            INFO("pre_norm " << pre_norm << " fc1 hook " << fc1_hook);
            nn::BlockConfig c = small_block();
            c.pre_norm = pre_norm;
            c.layerscale = 0.5f;
            nn::TransformerBlock block(c);
            Tensor x = param({2, 6, 32}, 42).detach();
            // An input_hook on fc1 keeps the MLP on one path (fc1 with its bias, unfused) in both runs.
            if (fc1_hook) block.mlp->fc1->input_hook = [](const nn::Module&, const Tensor&) {};
            // Unhooked, the norms are fused: Pre-LN's into the GEMMs after them (fc1's only while fc1
            // has no hook), Post-LN's with the adds before them. Hooked, none is.
            const std::string fused_norm = pre_norm ? "layer_norm_linear" : "add_layer_norm";
            CHECK(count_ops(graph_ops(block.forward(x)), fused_norm) == (pre_norm && fc1_hook ? 1 : 2));
            Run fused = run_model(block, [&] { return block.forward(x); });
            int seen = 0;
            auto count = [&](const nn::Module&, const Tensor&) { seen++; };
            block.norm1->forward_hook = count;
            block.norm2->forward_hook = count;
            Run hooked = run_model(block, [&] { return block.forward(x); });
            CHECK(seen == 2);
            CHECK(count_ops(graph_ops(block.forward(x)), fused_norm) == 0);
            CHECK(fused.out == hooked.out);
            CHECK(fused.grads == hooked.grads);
        }
}

// What the Pre-LN fusion is for: neither norm's [B, T, dim] output is kept for the backward.
TEST_CASE("TransformerBlock: Pre-LN keeps two [B, T, dim] tensors less than with its norms apart", "[nn][fused]") {
    nn::BlockConfig c = small_block();
    nn::TransformerBlock block(c);
    const int64_t B = 2, T = 6;
    Tensor x0 = param({B, T, c.dim}, 43);
    auto kept = [&](bool hooked) {
        std::function<void(const nn::Module&, const Tensor&)> hook;
        if (hooked) hook = [](const nn::Module&, const Tensor&) {};
        block.norm1->forward_hook = hook;
        block.norm2->forward_hook = hook;
        size_t before = host_memory_in_use();
        Tensor y = block.forward(mul(x0, 1.f));
        size_t held = host_memory_in_use() - before;
        sum(y).backward();
        return held;
    };
    size_t fused = kept(false), apart = kept(true);
    CHECK(apart - fused == 2 * (size_t)(B * T * c.dim) * sizeof(float));
}

// Pre-LN without LayerScale: the residual adds go into proj's and fc2's GEMMs (the block's output is
// gelu_linear's, and no add is left in the graph), within the sums' rounding of the path a hook on
// the norms takes (which adds apart), the gradients likewise. With LayerScale or the block's dropout
// active, or a hook on proj or fc2, the adds stay apart.
TEST_CASE("TransformerBlock: Pre-LN adds its residuals inside the branches' last GEMMs", "[nn][fused]") {
    nn::BlockConfig c = small_block();
    nn::TransformerBlock block(c);
    Tensor x = param({2, 6, 32}, 45).detach();
    Tensor xg = mul(x.detach().requires_grad_(true), 1.f);
    std::vector<std::string> fused_ops = graph_ops(block.forward(xg));
    CHECK(fused_ops.front() == "gelu_linear");
    CHECK(count_ops(fused_ops, "add") == 0);
    CHECK(count_ops(fused_ops, "linear") == 1);  // proj, with the residual

    Run fused = run_model(block, [&] { return block.forward(x); });
    auto noop = [](const nn::Module&, const Tensor&) {};
    block.norm1->forward_hook = noop;
    block.norm2->forward_hook = noop;
    CHECK(count_ops(graph_ops(block.forward(xg)), "add") == 2);
    Run hooked = run_model(block, [&] { return block.forward(x); });
    block.norm1->forward_hook = nullptr;
    block.norm2->forward_hook = nullptr;
    check_runs_close(fused, hooked);
    // proj or fc2 hooked: that add stays apart, the other goes in
    block.attn->proj->forward_hook = noop;
    CHECK(count_ops(graph_ops(block.forward(xg)), "add") == 1);
    block.attn->proj->forward_hook = nullptr;
    block.mlp->fc2->input_hook = noop;
    CHECK(count_ops(graph_ops(block.forward(xg)), "add") == 1);
    block.mlp->fc2->input_hook = nullptr;
    // dropout active (the block's and the branches'): both apart
    c.dropout = 0.1f;
    nn::TransformerBlock dropping(c);
    CHECK(count_ops(graph_ops(dropping.forward(xg)), "add") == 2);
    dropping.eval();
    CHECK(count_ops(graph_ops(dropping.forward(xg)), "add") == 0);
    c.dropout = 0.f;
    c.layerscale = 0.5f;
    nn::TransformerBlock scaled(c);
    CHECK(count_ops(graph_ops(scaled.forward(xg)), "add") == 2);
}

// GAU LM: Post-Norm adds and normalizes in one pass (LayerNorm::forward_sum), Pre-Norm adds each
// residual inside out's GEMM (GAU::forward's residual). Hooks on the norms and on out take the
// unfused path, an add per layer: the same bits (Post-Norm), or within the rounding of the sums.
TEST_CASE("GAU LM: the residual adds join the norm (Post-Norm) or out's GEMM (Pre-Norm)", "[nn][fused]") {
    for (bool post_norm : {true, false}) {
        INFO("post_norm " << post_norm);
        nn::GAUConfig c;
        c.vocab = 20;
        c.dim = 16;
        c.depth = 2;
        c.expansion = 24;
        c.s = 8;
        c.post_norm = post_norm;
        manual_seed(11);
        nn::GAULM lm(c);
        Tensor ids = Tensor::from_vector(std::vector<int32_t>{1, 4, 19, 0, 7, 7, 3, 12, 5, 9, 18, 2}, {2, 6});
        auto adds = [&] { return count_ops(graph_ops(lm.forward(ids)), "add"); };
        int64_t fused_adds = adds();
        Run fused = run_model(lm, [&] { return lm.forward(ids); });
        auto noop = [](const nn::Module&, const Tensor&) {};
        for (size_t i = 0; i < lm.layers->size(); i++) {
            (*lm.norms)[i].forward_hook = noop;
            (*lm.layers)[i].out->forward_hook = noop;
        }
        CHECK(adds() - fused_adds == c.depth);
        Run apart = run_model(lm, [&] { return lm.forward(ids); });
        if (post_norm) {
            CHECK(fused.out == apart.out);
            CHECK(fused.grads == apart.grads);
        } else {
            check_runs_close(fused, apart);
        }
    }
}

// The LM's final norm joins the output GEMM (tied or not) unless the norm has a hook.
TEST_CASE("TransformerLM: the final norm inside the output GEMM against the hooked path", "[nn][fused]") {
    for (bool tie : {true, false}) {
        INFO("tie_weights " << tie);
        nn::LMConfig c;
        c.vocab = 50;
        c.dim = 32;
        c.heads = 2;
        c.depth = 1;
        c.max_len = 8;
        c.tie_weights = tie;
        nn::TransformerLM lm(c);
        Tensor ids = Tensor::empty({2, 8}, DType::I32);
        for (int64_t i = 0; i < ids.numel(); i++) ids.data_i32()[i] = (int32_t)((i * 7) % c.vocab);
        CHECK(graph_ops(lm.forward(ids)).front() == "layer_norm_linear");
        Run fused = run_model(lm, [&] { return lm.forward(ids); });
        int seen = 0;
        lm.norm->forward_hook = [&](const nn::Module&, const Tensor&) { seen++; };
        Run hooked = run_model(lm, [&] { return lm.forward(ids); });
        CHECK(seen == 1);
        CHECK(graph_ops(lm.forward(ids)).front() == "linear");  // the output GEMM, after the norm apart
        CHECK(fused.out == hooked.out);
        CHECK(fused.grads == hooked.grads);
    }
}

// ---------------------------------------------------------------------------------------------
// linear_cross_entropy

namespace {

// Targets in [0, V), every `ignored`-th one ignore_index (-100); none when ignored == 0.
Tensor lce_targets(Shape s, int32_t V, int ignored, uint64_t seed) {
    Tensor t = Tensor::empty(s, DType::I32);
    Generator(seed).randint(t.data_i32(), t.numel(), 0, V);
    if (ignored > 0)
        for (int64_t i = 0; i < t.numel(); i += ignored) t.data_i32()[i] = -100;
    return t;
}

// The loss and the gradients of x, w and b (b may be undefined), from the fused op or from
// cross_entropy(linear(...)), with the loss scaled by `g` before the backward. Only the inputs
// `wanted` (x, w, b) require a gradient; the others come back undefined.
std::vector<Tensor> lce_run(bool fused, const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& t,
                            float smoothing, float g, std::array<bool, 3> wanted = {true, true, true}) {
    Tensor x = x0.detach().requires_grad_(wanted[0]), w = w0.detach().requires_grad_(wanted[1]);
    Tensor b = b0.defined() ? b0.detach().requires_grad_(wanted[2]) : Tensor();
    Tensor xi = mul(x, 1.f);  // an activation, as a model's features are
    Tensor loss = fused ? linear_cross_entropy(xi, w, b, t, -100, smoothing)
                        : cross_entropy(linear(xi, w, b), t, -100, smoothing);
    mul(loss, g).backward();
    return {loss.detach(), x.grad(), w.grad(), b.defined() ? b.grad() : Tensor()};
}

}  // namespace

TEST_CASE("linear_cross_entropy: cross_entropy of linear, values and gradients, over several chunks",
          "[nnops][fused]") {
    // V = 40,000: chunks of 104 rows (4 M logits), so 300 rows make three, the last one short.
    struct Case {
        int64_t B, T, D, V;
        bool bias;
        int ignored;
        float smoothing, g;
    };
    for (const Case& c : {Case{2, 150, 6, 40000, true, 7, 0.f, 1.f}, Case{2, 150, 6, 40000, false, 0, 0.1f, 2.5f},
                          Case{3, 5, 8, 11, true, 4, 0.f, 1.f}, Case{1, 1, 3, 2, false, 0, 0.2f, -1.f}}) {
        INFO("B " << c.B << " T " << c.T << " D " << c.D << " V " << c.V << " bias " << c.bias << " ignored every "
                  << c.ignored << " smoothing " << c.smoothing << " g " << c.g);
        Tensor x = param({c.B, c.T, c.D}, 120, -1.f, 1.f), w = param({c.V, c.D}, 121, -0.5f, 0.5f);
        Tensor b = c.bias ? param({c.V}, 122, -0.5f, 0.5f) : Tensor();
        Tensor t = lce_targets({c.B, c.T}, (int32_t)c.V, c.ignored, 123);
        std::vector<Tensor> fused = lce_run(true, x, w, b, t, c.smoothing, c.g);
        std::vector<Tensor> plain = lce_run(false, x, w, b, t, c.smoothing, c.g);
        CHECK(fused[0].item() == Approx(plain[0].item()).epsilon(1e-5));
        for (int i = 1; i < 4; i++) {
            INFO("gradient " << i << " (x, w, b)");
            REQUIRE(fused[i].defined() == plain[i].defined());
            if (!plain[i].defined()) continue;
            const float scale = std::max(1e-6f, test::max_abs_diff(plain[i], Tensor::zeros(plain[i].shape())));
            CHECK(test::max_abs_diff(fused[i], plain[i]) <= 1e-4f * scale);
        }
    }
}

// Each subset of the gradients against cross_entropy(linear(...)) with all three: the fused op
// picks its GEMMs by what is wanted (db alone is a column sum of dlogits, not gemm_dbias's), and
// each chunk after the first adds into dw and db.
TEST_CASE("linear_cross_entropy: a subset of the gradients, over several chunks", "[nnops][fused]") {
    const int64_t B = 2, T = 60, D = 6, V = 40000;  // chunks of 104 rows, as above: 104 and 16
    Tensor x = param({B, T, D}, 145, -1.f, 1.f), w = param({V, D}, 146, -0.5f, 0.5f), b = param({V}, 147, -0.5f, 0.5f);
    Tensor t = lce_targets({B, T}, (int32_t)V, 5, 148);
    std::vector<Tensor> plain = lce_run(false, x, w, b, t, 0.1f, 1.5f);
    for (std::array<bool, 3> wanted : std::vector<std::array<bool, 3>>{{true, false, false},
                                                                      {false, true, true},
                                                                      {false, false, true},
                                                                      {true, false, true},
                                                                      {false, true, false}}) {
        INFO("x " << wanted[0] << " w " << wanted[1] << " b " << wanted[2]);
        std::vector<Tensor> fused = lce_run(true, x, w, b, t, 0.1f, 1.5f, wanted);
        CHECK(fused[0].item() == Approx(plain[0].item()).epsilon(1e-5));
        for (int i = 1; i < 4; i++) {
            INFO("gradient " << i << " (x, w, b)");
            REQUIRE(fused[i].defined() == wanted[i - 1]);
            if (!wanted[i - 1]) continue;
            const float scale = std::max(1e-6f, test::max_abs_diff(plain[i], Tensor::zeros(plain[i].shape())));
            CHECK(test::max_abs_diff(fused[i], plain[i]) <= 1e-4f * scale);
        }
    }
}

// The loss times 100, as cross_entropy's gradcheck (tests/test_nn_ops.cpp): a mean over the four
// rows not ignored gives w gradients from 4e-3 to 0.2, the smallest below the gradcheck's atol of
// 5e-3, where a zero gradient would pass.
TEST_CASE("linear_cross_entropy", "[nnops][gradcheck]") {
    Tensor t = lce_targets({2, 3}, 5, 4, 124);
    auto f = [t](auto& in) { return mul(linear_cross_entropy(in[0], in[1], in[2], t, -100, 0.1f), 100.f); };
    auto inputs = [](std::array<bool, 3> wanted) {
        return std::vector<Tensor>{param({2, 3, 4}, 125).requires_grad_(wanted[0]),
                                   param({5, 4}, 126).requires_grad_(wanted[1]),
                                   param({5}, 127).requires_grad_(wanted[2])};
    };
    gradcheck("linear_cross_entropy", f, inputs({true, true, true}));
    // The branches of a frozen input: x alone (a frozen output layer), w and b alone, b without w.
    gradcheck("linear_cross_entropy x only", f, inputs({true, false, false}));
    gradcheck("linear_cross_entropy w and b only", f, inputs({false, true, true}));
    gradcheck("linear_cross_entropy b only", f, inputs({false, false, true}));
    gradcheck("linear_cross_entropy x and b", f, inputs({true, false, true}));
}

TEST_CASE("linear_cross_entropy: only the gradients wanted, none under NoGrad", "[nnops][fused]") {
    Tensor x = param({4, 3}, 128), w = param({6, 3}, 129), b = param({6}, 130);
    Tensor t = lce_targets({4}, 6, 0, 131);
    float expected = cross_entropy(linear(x, w, b), t).item();
    {
        NoGrad no_grad;
        Tensor loss = linear_cross_entropy(x, w, b, t);
        CHECK_FALSE(loss.requires_grad());
        CHECK(loss.item() == Approx(expected).epsilon(1e-6));
    }
    Tensor wf = w.detach(), bf = b.detach();  // a frozen output layer: x's gradient alone
    Tensor loss = linear_cross_entropy(x, wf, bf, t);
    loss.backward();
    CHECK(x.grad().defined());
    CHECK_FALSE(wf.grad().defined());
    x.zero_grad();
    Tensor xf = x.detach();  // w's and b's alone
    linear_cross_entropy(xf, w, b, t).backward();
    CHECK(w.grad().defined());
    CHECK(b.grad().defined());
    CHECK_FALSE(xf.grad().defined());
}

// What it is for: the [rows, V] logits are not kept; between forward and backward it holds the
// gradients of x and w (and small scalars).
TEST_CASE("linear_cross_entropy: the logits are not kept", "[nnops][fused]") {
    const int64_t R = 64, D = 16, V = 512;  // whole 64-byte blocks
    Tensor x0 = param({R, D}, 132), w = param({V, D}, 133);
    Tensor t = lce_targets({R}, (int32_t)V, 0, 134);
    Tensor x = mul(x0, 1.f);
    const size_t before = host_memory_in_use();
    Tensor loss = linear_cross_entropy(x, w, Tensor(), t);
    const size_t held = host_memory_in_use() - before;
    CHECK(held >= sizeof(float) * (size_t)(R * D + V * D));
    CHECK(held < sizeof(float) * (size_t)(R * D + V * D) + 1024);
    loss.backward();
    CHECK(w.grad().defined());
}

TEST_CASE("linear_cross_entropy: no rows give a zero loss and zero gradients", "[nnops][fused]") {
    Tensor x = param({0, 3}, 142), w = param({4, 3}, 143), b = param({4}, 144);
    Tensor loss = linear_cross_entropy(x, w, b, Tensor::empty({0}, DType::I32));
    CHECK(loss.item() == 0.f);
    loss.backward();
    CHECK(test::max_abs_diff(w.grad(), Tensor::zeros({4, 3})) == 0.f);
    CHECK(test::max_abs_diff(b.grad(), Tensor::zeros({4})) == 0.f);
}

TEST_CASE("linear_cross_entropy: argument errors", "[nnops][fused]") {
    Tensor x = param({4, 3}, 135), w = param({6, 3}, 136), t = lce_targets({4}, 6, 0, 137);
    CHECK_THROWS_WITH(linear_cross_entropy(x, param({6, 4}, 138), Tensor(), t),
                      Catch::Contains("linear_cross_entropy: x [4,3] and w [6,4] are not [..., D] and [V, D]"));
    CHECK_THROWS_WITH(linear_cross_entropy(x, w, param({5}, 139), t),
                      Catch::Contains("linear_cross_entropy: b [5] is not [V] = [6]"));
    CHECK_THROWS_WITH(linear_cross_entropy(x, w, Tensor(), lce_targets({5}, 6, 0, 140)),
                      Catch::Contains("linear_cross_entropy: x [4,3] needs targets [4], got [5]"));
    Tensor bad = lce_targets({4}, 6, 0, 141);
    bad.data_i32()[2] = 6;
    CHECK_THROWS_WITH(linear_cross_entropy(x, w, Tensor(), bad), Catch::Contains("target 6 at position 2 is out of range"));
}
