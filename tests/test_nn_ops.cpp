// tests/test_nn_ops.cpp: the fused neural-network ops (engine/ops/nn.h) against formulas written
// out with plain loops in double, their gradients by finite differences, dropout's mask
// reproducibility, and their argument errors.
#include <catch2/catch.hpp>

#include <omp.h>
#include <array>
#include <cmath>
#include <vector>
#include "engine/error.h"
#include "engine/ops.h"
#include "engine/rng.h"
#include "tests/helpers.h"

using namespace engine;
using test::gradcheck;
using test::param;

// Every element of `got` within tol of `want` (relative for large values).
static void check_close(const Tensor& got, const std::vector<double>& want, double tol = 1e-5) {
    REQUIRE(got.numel() == (int64_t)want.size());
    std::vector<float> g = got.to_vector();
    for (size_t i = 0; i < want.size(); i++) {
        INFO("element " << i);
        CHECK(g[i] == Approx(want[i]).epsilon(tol).margin(tol));
    }
}

static std::vector<double> softmax_ref(const float* x, int64_t n) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < n; j++) m = std::max(m, (double)x[j]);
    std::vector<double> p(n);
    for (int64_t j = 0; j < n; j++) s += p[j] = std::exp(x[j] - m);
    for (double& v : p) v /= s;
    return p;
}

// ---------------------------------------------------------------------------------------------
// softmax, log_softmax

TEST_CASE("softmax and log_softmax match their formulas", "[nnops]") {
    Tensor x = param({3, 7}, 1, -3.f, 3.f);
    x.data_f32()[5] = 200.f;  // exp(200) overflows float: only the max-subtracted form survives
    x.data_f32()[9] = -200.f;
    Tensor y = softmax(x), ly = log_softmax(x);
    std::vector<double> want, want_log;
    for (int r = 0; r < 3; r++)
        for (double p : softmax_ref(x.data_f32() + r * 7, 7)) {
            want.push_back(p);
            want_log.push_back(std::log(p));
        }
    check_close(y, want);
    // log p of the -200 entry is about -200 - 3: compare those relatively.
    check_close(ly, want_log);
    CHECK(y.at({0, 5}) == Approx(1.0));
    CHECK(std::isfinite(ly.at({0, 0})));  // log(0) would be -inf; log_softmax stays finite
    // 1-d input: one row.
    Tensor v = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
    check_close(softmax(v), softmax_ref(v.data_f32(), 3));
    CHECK_THROWS_WITH(softmax(Tensor::zeros({3}, DType::I32)), Catch::Contains("softmax") && Catch::Contains("int32"));
    CHECK_THROWS_WITH(log_softmax(Tensor::full({}, 1.f)),
                      Catch::Contains("log_softmax: input must have at least 1 dim"));
}

TEST_CASE("softmax", "[nnops][gradcheck]") {
    gradcheck("softmax", [](auto& in) { return softmax(in[0]); }, {param({3, 5}, 2, -2.f, 2.f)});
    gradcheck("softmax_3d", [](auto& in) { return softmax(in[0]); }, {param({2, 2, 4}, 3, -2.f, 2.f)});
}

TEST_CASE("log_softmax", "[nnops][gradcheck]") {
    gradcheck("log_softmax", [](auto& in) { return log_softmax(in[0]); }, {param({3, 5}, 4, -2.f, 2.f)});
}

// ---------------------------------------------------------------------------------------------
// layer_norm

static std::vector<double> layer_norm_ref(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
    int64_t n = x.size(-1), rows = x.numel() / n;
    const float* px = x.data_f32();
    std::vector<double> y(x.numel());
    for (int64_t r = 0; r < rows; r++) {
        double mean = 0, var = 0;
        for (int64_t j = 0; j < n; j++) mean += px[r * n + j];
        mean /= n;
        for (int64_t j = 0; j < n; j++) var += (px[r * n + j] - mean) * (px[r * n + j] - mean);
        var /= n;
        for (int64_t j = 0; j < n; j++) {
            double v = (px[r * n + j] - mean) / std::sqrt(var + eps);
            if (w.defined()) v *= w.data_f32()[j];
            if (b.defined()) v += b.data_f32()[j];
            y[r * n + j] = v;
        }
    }
    return y;
}

TEST_CASE("layer_norm matches its formula", "[nnops]") {
    Tensor x = param({2, 3, 6}, 5, -2.f, 3.f);
    Tensor w = param({6}, 6, 0.5f, 1.5f), b = param({6}, 7);
    check_close(layer_norm(x, w, b, 1e-5f), layer_norm_ref(x, w, b, 1e-5), 1e-4);
    check_close(layer_norm(x, Tensor(), Tensor(), 0.1f), layer_norm_ref(x, Tensor(), Tensor(), 0.1), 1e-4);
    check_close(layer_norm(x, w, Tensor()), layer_norm_ref(x, w, Tensor(), 1e-5), 1e-4);
    check_close(layer_norm(x, Tensor(), b), layer_norm_ref(x, Tensor(), b, 1e-5), 1e-4);
    // A large common offset: the two-pass variance must not cancel it away.
    Tensor shifted = add(x, 1000.f);
    check_close(layer_norm(shifted, Tensor(), Tensor()), layer_norm_ref(x, Tensor(), Tensor(), 1e-5), 2e-3);

    CHECK_THROWS_WITH(layer_norm(x, Tensor::ones({5}), Tensor()),
                      Catch::Contains("layer_norm: weight [5] does not match the last dim of input [2,3,6]"));
    CHECK_THROWS_WITH(layer_norm(x, Tensor(), Tensor::ones({6, 1})), Catch::Contains("layer_norm: bias [6,1]"));
}

TEST_CASE("layer_norm", "[nnops][gradcheck]") {
    auto affine = [](auto& in) { return layer_norm(in[0], in[1], in[2]); };
    gradcheck("layer_norm_affine", affine, {param({3, 5}, 8, -2.f, 2.f), param({5}, 9, 0.5f, 1.5f), param({5}, 10)});
    gradcheck("layer_norm_plain", [](auto& in) { return layer_norm(in[0], Tensor(), Tensor()); },
              {param({2, 3, 4}, 11, -2.f, 2.f)});
    gradcheck("layer_norm_weight_only", [](auto& in) { return layer_norm(in[0], in[1], Tensor(), 1e-3f); },
              {param({4, 6}, 12, -2.f, 2.f), param({6}, 13, 0.5f, 1.5f)});
    gradcheck("layer_norm_bias_only", [](auto& in) { return layer_norm(in[0], Tensor(), in[1]); },
              {param({4, 6}, 17, -2.f, 2.f), param({6}, 18)});
}

TEST_CASE("layer_norm: dx added into the gradient a residual gave its input, as adding afterwards", "[nnops]") {
    Tensor x = param({37, 24}, 30, -2.f, 2.f), w = param({24}, 31, 0.5f, 1.5f), b = param({24}, 32);
    Tensor g = param({37, 24}, 33).detach();
    CHECK(test::residual_layer_norm_grad_diff(x, w, b, g) < 1e-5f);  // gradients of magnitude up to ~5
    CHECK(test::residual_layer_norm_grad_diff(x, Tensor(), Tensor(), g) < 1e-5f);
}

TEST_CASE("layer_norm backward is deterministic across thread counts", "[nnops]") {
    // Big enough that the kernels run in parallel; dweight/dbias must not depend on the threads.
    Tensor x = param({300, 128}, 14), w = param({128}, 15), b = param({128}, 16);
    Tensor g = Tensor::empty({300, 128});
    Generator(17).uniform(g.data_f32(), g.numel(), -1.f, 1.f);
    auto grads = [&](int threads) {
        int prev = omp_get_max_threads();
        omp_set_num_threads(threads);
        x.zero_grad(); w.zero_grad(); b.zero_grad();
        layer_norm(x, w, b).backward(g);
        omp_set_num_threads(prev);
        return std::vector<std::vector<float>>{x.grad().to_vector(), w.grad().to_vector(), b.grad().to_vector()};
    };
    auto one = grads(1), two = grads(2), three = grads(3);
    CHECK(one == two);
    CHECK(one == three);
    // And they are the right sums: dbias = Σ_rows g.
    for (int j = 0; j < 128; j += 31) {
        double s = 0;
        for (int r = 0; r < 300; r++) s += g.at({r, j});
        CHECK(one[2][j] == Approx(s).margin(1e-4));
    }
}

// ---------------------------------------------------------------------------------------------
// dropout

TEST_CASE("dropout masks: reproducible, right rate, scaled, Philox stream", "[nnops]") {
    const int64_t n = 100000;
    const float p = 0.3f;
    Tensor x = Tensor::ones({n});
    manual_seed(123);
    Tensor a = dropout(x, p, true);
    manual_seed(123);
    Tensor b = dropout(x, p, true);
    CHECK(a.to_vector() == b.to_vector());  // bitwise
    Tensor c = dropout(x, p, true);         // next draw: a different mask
    CHECK(a.to_vector() != c.to_vector());

    // The mask is "keep where u >= p" over the generator's uniform stream, element by element.
    Generator gen(123);
    std::vector<float> u(n);
    gen.uniform(u.data(), n, 0.f, 1.f);
    int64_t kept = 0, mismatched = 0;
    std::vector<float> av = a.to_vector();
    for (int64_t i = 0; i < n; i++) {
        float want = u[i] >= p ? 1.f / (1.f - p) : 0.f;
        mismatched += av[i] != want;
        kept += av[i] != 0.f;
    }
    CHECK(mismatched == 0);
    CHECK((double)kept / n == Approx(1.0 - p).margin(0.01));
    // Inverted dropout keeps the expectation: the mean stays about 1.
    CHECK(mean(a).item() == Approx(1.0).margin(0.02));
}

TEST_CASE("dropout edge cases and backward", "[nnops]") {
    Tensor x = param({4, 5}, 20);
    CHECK(dropout(x, 0.5f, false).impl() == x.impl());  // eval: x itself
    CHECK(dropout(x, 0.f, true).impl() == x.impl());
    Tensor z = dropout(x, 1.f, true);
    for (float v : z.to_vector()) CHECK(v == 0.f);
    CHECK_THROWS_WITH(dropout(x, 1.5f, true), Catch::Contains("dropout: p must be in [0, 1], got 1.5"));
    CHECK_THROWS_WITH(dropout(x, -0.1f, false), Catch::Contains("dropout: p must be in [0, 1]"));

    // The gradient is the same scaled mask the forward applied.
    manual_seed(5);
    Tensor y = dropout(x, 0.5f, true);
    sum(y).backward();
    std::vector<float> xv = x.to_vector(), yv = y.to_vector(), gv = x.grad().to_vector();
    for (size_t i = 0; i < xv.size(); i++) {
        CHECK((gv[i] == 0.f || gv[i] == 2.f));
        CHECK(yv[i] == Approx(xv[i] * gv[i]));
    }
}

TEST_CASE("dropout", "[nnops][gradcheck]") {
    // Re-seeding inside f gives every evaluation the same mask.
    gradcheck("dropout", [](auto& in) { manual_seed(99); return dropout(in[0], 0.4f, true); }, {param({4, 6}, 21)});
}

// ---------------------------------------------------------------------------------------------
// cross_entropy

// PyTorch's definition: per counted row (1−ε)·(−log p_t) + ε·mean_c(−log p_c), mean over rows
// whose target is not ignore_index.
static double cross_entropy_ref(const Tensor& logits, const std::vector<int32_t>& t, int ignore, double eps) {
    int64_t C = logits.size(-1);
    double total = 0;
    int64_t count = 0;
    for (size_t r = 0; r < t.size(); r++) {
        if (t[r] == ignore) continue;
        std::vector<double> p = softmax_ref(logits.data_f32() + r * C, C);
        double smooth = 0;
        for (double pc : p) smooth -= std::log(pc) / C;
        total += (1 - eps) * -std::log(p[t[r]]) + eps * smooth;
        count++;
    }
    return count ? total / count : 0.0;
}

TEST_CASE("cross_entropy matches its formula", "[nnops]") {
    Tensor logits = param({6, 5}, 30, -3.f, 3.f);
    std::vector<int32_t> t = {0, 4, 2, 2, 1, 3};
    Tensor tt = Tensor::from_vector(t, {6});
    CHECK(cross_entropy(logits, tt).item() == Approx(cross_entropy_ref(logits, t, -100, 0)).epsilon(1e-5));
    CHECK(cross_entropy(logits, tt, -100, 0.1f).item() ==
          Approx(cross_entropy_ref(logits, t, -100, 0.1)).epsilon(1e-5));
    // An in-range ignore_index: rows with target 2 drop out of the sum and the count.
    CHECK(cross_entropy(logits, tt, 2, 0.25f).item() == Approx(cross_entropy_ref(logits, t, 2, 0.25)).epsilon(1e-5));
    CHECK(cross_entropy(logits, tt, 2).item() != Approx(cross_entropy(logits, tt).item()).epsilon(1e-3));
    std::vector<int32_t> ti = {0, -100, 2, -100, 1, 3};
    CHECK(cross_entropy(logits, Tensor::from_vector(ti, {6}), -100, 0.1f).item() ==
          Approx(cross_entropy_ref(logits, ti, -100, 0.1)).epsilon(1e-5));
    // [B, T, C] logits with [B, T] targets.
    Tensor l3 = logits.reshape({2, 3, 5});
    CHECK(cross_entropy(l3, tt.reshape({2, 3})).item() == Approx(cross_entropy_ref(logits, t, -100, 0)).epsilon(1e-5));
    // Every row ignored: 0, not NaN, and a zero gradient.
    Tensor all_ignored = Tensor::full({6}, -100.f, DType::I32);
    Tensor loss = cross_entropy(logits, all_ignored);
    CHECK(loss.item() == 0.f);
    loss.backward();
    for (float g : logits.grad().to_vector()) CHECK(g == 0.f);
    // Huge logits stay finite (log-sum-exp with the max subtracted).
    Tensor big = Tensor::from_vector(std::vector<float>{1000.f, 0.f, -1000.f}, {1, 3});
    CHECK(cross_entropy(big, Tensor::from_vector(std::vector<int32_t>{1}, {1})).item() == Approx(1000.0));
}

TEST_CASE("cross_entropy argument errors", "[nnops]") {
    Tensor logits = param({4, 3}, 31);
    CHECK_THROWS_WITH(cross_entropy(logits, Tensor::from_vector(std::vector<int32_t>{0, 1, 3, 2}, {4})),
                      Catch::Contains("cross_entropy: target 3 at position 2 is out of range [0, 3)"));
    CHECK_THROWS_WITH(cross_entropy(logits, Tensor::from_vector(std::vector<int32_t>{0, -1, 1, 2}, {4})),
                      Catch::Contains("target -1"));
    CHECK_THROWS_WITH(cross_entropy(logits, Tensor::zeros({4, 1}, DType::I32)),
                      Catch::Contains("cross_entropy: logits [4,3] need targets [4], got [4,1]"));
    CHECK_THROWS_WITH(cross_entropy(logits, Tensor::zeros({4})), Catch::Contains("targets [4] must be int32"));
    CHECK_THROWS_WITH(cross_entropy(logits, Tensor::zeros({4}, DType::I32), -100, 2.f),
                      Catch::Contains("label_smoothing must be in [0, 1]"));
}

// The first loss times 100: its mean over four rows gives gradients from 3e-3 to 0.2, the smallest
// below the gradcheck's atol of 5e-3, where a zero gradient would pass. Scaled, the finite
// differences' noise (~3e-3) stays under the tolerance and every element counts.
TEST_CASE("cross_entropy", "[nnops][gradcheck]") {
    Tensor t = Tensor::from_vector(std::vector<int32_t>{0, 4, 2, 1}, {4});
    gradcheck("cross_entropy", [t](auto& in) { return mul(cross_entropy(in[0], t), 100.f); },
              {param({4, 5}, 32, -2.f, 2.f)});
    Tensor ti = Tensor::from_vector(std::vector<int32_t>{0, -1, 2, -1, 3, 1}, {2, 3});
    gradcheck("cross_entropy_ignore_smoothing", [ti](auto& in) { return cross_entropy(in[0], ti, -1, 0.2f); },
              {param({2, 3, 4}, 33, -2.f, 2.f)});
}

// Logits that only cross-entropy reads (a model's output, no handle kept) take their own
// gradient: the backward's peak holds one [rows, C] tensor less, the gradients are the same bits.
// A handle of the caller's keeps them: its values are still the logits after the backward.
TEST_CASE("cross_entropy: dlogits over logits nothing else holds, never over the caller's", "[nnops]") {
    const int64_t rows = 64, C = 300;
    Tensor x = param({rows, 16}, 34), w = param({C, 16}, 35);
    std::vector<int32_t> tv(rows);
    for (int64_t r = 0; r < rows; r++) tv[r] = (int32_t)((r * 37) % C);
    Tensor t = Tensor::from_vector(tv, {rows});
    struct Run {
        std::vector<float> dx, dw, held;
        size_t peak;
    };
    auto run = [&](bool hold) {
        x.zero_grad();
        w.zero_grad();
        Tensor held;
        size_t before = host_memory_in_use();
        reset_host_peak_memory();
        {
            Tensor logits = linear(x, w);
            if (hold) held = logits;
            Tensor loss = cross_entropy(logits, t);
            logits = Tensor();
            loss.backward();
        }
        Run r{x.grad().to_vector(), w.grad().to_vector(), {}, host_peak_memory() - before};
        if (hold) r.held = held.to_vector();
        return r;
    };
    Run held = run(true), free = run(false);
    CHECK(held.dx == free.dx);
    CHECK(held.dw == free.dw);
    CHECK(held.held == linear(x, w).detach().to_vector());
    CHECK(held.peak - free.peak == (size_t)(rows * C) * sizeof(float));
}

// ---------------------------------------------------------------------------------------------
// mse_loss

TEST_CASE("mse_loss matches its formula", "[nnops]") {
    Tensor a = param({3, 7}, 40), b = param({3, 7}, 41);
    double s = 0;
    for (int i = 0; i < 21; i++) s += std::pow((double)a.data_f32()[i] - b.data_f32()[i], 2);
    CHECK(mse_loss(a, b).item() == Approx(s / 21).epsilon(1e-6));
    CHECK(mse_loss(a, b).ndim() == 0);
    CHECK_THROWS_WITH(mse_loss(a, Tensor::zeros({7, 3})),
                      Catch::Contains("mse_loss: pred [3,7] and target [7,3] must have the same shape"));
}

TEST_CASE("mse_loss", "[nnops][gradcheck]") {
    gradcheck("mse_loss", [](auto& in) { return mse_loss(in[0], in[1]); }, {param({3, 4}, 42), param({3, 4}, 43)});
}

// ---------------------------------------------------------------------------------------------
// attention

// O[b,h,i] = Σ_j softmax_j(scale·q_i·k_j over visible j)·mask_ij·v_j, by explicit loops; causal:
// key j is visible to query i when j <= i + S − T. A query with no visible key gets zeros.
static std::vector<double> attention_ref(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                         double scale, const std::vector<float>* mask) {
    int64_t B = q.size(0), H = q.size(1), T = q.size(2), S = k.size(2), D = q.size(3);
    std::vector<double> out(B * H * T * D, 0.0);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < T; i++) {
                std::vector<double> s(S, -INFINITY);
                double m = -INFINITY, z = 0;
                for (int64_t j = 0; j < S; j++) {
                    if (causal && j > i + S - T) continue;
                    double dot = 0;
                    for (int64_t d = 0; d < D; d++) dot += (double)q.at({b, h, i, d}) * k.at({b, h, j, d});
                    s[j] = scale * dot;
                    m = std::max(m, s[j]);
                }
                if (m == -INFINITY) continue;
                for (int64_t j = 0; j < S; j++) z += std::exp(s[j] - m);
                for (int64_t j = 0; j < S; j++) {
                    double p = std::exp(s[j] - m) / z;
                    if (mask) p *= (*mask)[((b * H + h) * T + i) * S + j];
                    for (int64_t d = 0; d < D; d++) out[((b * H + h) * T + i) * D + d] += p * v.at({b, h, j, d});
                }
            }
    return out;
}

TEST_CASE("attention matches explicit loops", "[nnops]") {
    Tensor q = param({2, 3, 4, 8}, 50), k = param({2, 3, 6, 8}, 51), v = param({2, 3, 6, 8}, 52);
    double default_scale = 1 / std::sqrt(8.0);
    check_close(attention(q, k, v, false), attention_ref(q, k, v, false, default_scale, nullptr));
    check_close(attention(q, k, v, true), attention_ref(q, k, v, true, default_scale, nullptr));
    check_close(attention(q, k, v, true, 0.f, false, 0.7f), attention_ref(q, k, v, true, 0.7, nullptr));
    // Causal and non-causal must differ (the mask does something).
    CHECK(test::max_abs_diff(attention(q, k, v, true), attention(q, k, v, false)) > 1e-3f);
    // Self-attention T == S: the first query sees only the first key, so its output is v[0].
    Tensor ks = param({2, 3, 4, 8}, 53), vs = param({2, 3, 4, 8}, 54);
    Tensor o = attention(q, ks, vs, true);
    for (int d = 0; d < 8; d++) CHECK(o.at({1, 2, 0, d}) == Approx(vs.at({1, 2, 0, d})));
    // T > S with causal: the first T − S queries see no key and give zeros.
    Tensor o2 = attention(k, q, q, true);  // T = 6 queries, S = 4 keys
    check_close(o2, attention_ref(k, q, q, true, default_scale, nullptr));
    for (int d = 0; d < 8; d++) CHECK(o2.at({0, 0, 1, d}) == 0.f);
    // Eval mode ignores dropout_p.
    CHECK(test::max_abs_diff(attention(q, k, v, false, 0.5f, false), attention(q, k, v, false)) == 0.f);
}

TEST_CASE("attention dropout uses the global Philox stream", "[nnops]") {
    Tensor q = param({1, 2, 3, 4}, 55), k = param({1, 2, 5, 4}, 56), v = param({1, 2, 5, 4}, 57);
    const float p = 0.4f;
    manual_seed(77);
    Tensor o = attention(q, k, v, true, p, true);
    Generator gen(77);
    std::vector<float> mask(1 * 2 * 3 * 5);
    gen.uniform(mask.data(), (int64_t)mask.size(), 0.f, 1.f);
    for (float& m : mask) m = m >= p ? 1.f / (1.f - p) : 0.f;
    check_close(o, attention_ref(q, k, v, true, 0.5, &mask));
    manual_seed(77);
    CHECK(test::max_abs_diff(attention(q, k, v, true, p, true), o) == 0.f);
    CHECK(test::max_abs_diff(attention(q, k, v, true, p, true), o) > 0.f);  // next draw: another mask
}

// On the CPU the forward keeps each query row's softmax max and 1/sum, not P [B·H, T, S]; the
// backward recomputes P from them (gradients: the gradchecks below).
TEST_CASE("attention on the CPU keeps two floats a query row, not the probabilities", "[nnops]") {
    const int64_t B = 2, H = 2, T = 32, S = 48, D = 8;  // every tensor whole 64-byte blocks
    Tensor q = param({B, H, T, D}, 58), k = param({B, H, S, D}, 59), v = param({B, H, S, D}, 60);
    for (bool causal : {false, true}) {
        const size_t before = host_memory_in_use();
        Tensor o = attention(q, k, v, causal);
        CHECK(host_memory_in_use() - before == sizeof(float) * (size_t)(B * H * T * D + B * H * T * 2));
        sum(mul(o, o)).backward();
        CHECK(q.grad().defined());
        CHECK(v.grad().defined());
    }
}

TEST_CASE("attention argument errors", "[nnops]") {
    Tensor q = param({2, 3, 4, 8}, 60), k = param({2, 3, 6, 8}, 61);
    CHECK_THROWS_WITH(attention(q.reshape({6, 4, 8}), k, k, false),
                      Catch::Contains("attention: q [B,H,T,D] must be 4-d, got [6,4,8]"));
    CHECK_THROWS_WITH(attention(q, param({2, 3, 6, 7}, 62), k, false),
                      Catch::Contains("attention: q [2,3,4,8] and k [2,3,6,7] must agree on B, H and D"));
    CHECK_THROWS_WITH(attention(q, k, param({2, 3, 5, 8}, 63), false),
                      Catch::Contains("attention: v [2,3,5,8] must have the shape of k [2,3,6,8]"));
    CHECK_THROWS_WITH(attention(q, k, k, false, 1.5f, true), Catch::Contains("dropout_p must be in [0, 1]"));
}

// attention_tokens: the heads addressed in place in [B, T, H·D] against the permutes around
// attention, forward and the three gradients, causal and not, T != S, dropout from one seed.
TEST_CASE("attention_tokens: the permutes around attention", "[nnops]") {
    struct Case { int64_t B, T, S, H, D; bool causal; float dropout; };
    for (Case c : {Case{2, 5, 5, 3, 8, false, 0.f}, Case{2, 5, 5, 3, 8, true, 0.f}, Case{1, 4, 7, 2, 6, true, 0.f},
                   Case{2, 7, 4, 2, 6, true, 0.f}, Case{2, 5, 6, 3, 4, false, 0.3f}}) {
        INFO("B " << c.B << " T " << c.T << " S " << c.S << " H " << c.H << " D " << c.D << " causal " << c.causal
                  << " dropout " << c.dropout);
        auto run = [&](bool tokens) {
            Tensor q = param({c.B, c.T, c.H * c.D}, 80), k = param({c.B, c.S, c.H * c.D}, 81),
                   v = param({c.B, c.S, c.H * c.D}, 82);
            manual_seed(5);
            Tensor o = tokens ? attention_tokens(q, k, v, c.H, c.causal, c.dropout, true)
                              : test::attention_by_permutes(q, k, v, c.H, c.causal, c.dropout, true);
            sum(mul(o, param(o.shape(), 83).detach())).backward();
            return std::vector<Tensor>{o, q.grad(), k.grad(), v.grad()};
        };
        std::vector<Tensor> got = run(true), want = run(false);
        for (size_t i = 0; i < got.size(); i++) {
            INFO("output (0) or gradient of q, k, v (1-3): " << i);
            CHECK(got[i].shape() == want[i].shape());
            CHECK(test::max_abs_diff(got[i], want[i]) < 1e-6f);
        }
    }
}

TEST_CASE("attention_tokens", "[nnops][gradcheck]") {
    gradcheck("attention_tokens causal", [](auto& in) { return attention_tokens(in[0], in[1], in[2], 2, true); },
              {param({2, 3, 8}, 84), param({2, 5, 8}, 85), param({2, 5, 8}, 86)});
}

TEST_CASE("attention_tokens argument errors", "[nnops]") {
    Tensor q = param({2, 4, 12}, 87), k = param({2, 6, 12}, 88);
    CHECK_THROWS_WITH(attention_tokens(q, k, k, 5, false),
                      Catch::Contains("attention_tokens: the width of q [2,4,12] is not divisible by 5 heads"));
    CHECK_THROWS_WITH(attention_tokens(q.reshape({2, 4, 3, 4}), k, k, 3, false),
                      Catch::Contains("attention_tokens: q [B,T,H·D] must be 3-d"));
    CHECK_THROWS_WITH(attention_tokens(q, param({2, 6, 8}, 89), k, 2, false),
                      Catch::Contains("attention_tokens: q [2,4,12] and k [2,6,8] must agree on B and the width"));
    CHECK_THROWS_WITH(attention_tokens(q, k, param({2, 5, 12}, 90), 3, false),
                      Catch::Contains("attention_tokens: v [2,5,12] must have the shape of k [2,6,12]"));
}

// attention_qkv: q, k and v as column blocks of one projection, against attention_tokens on the
// blocks split off (forward and qkv's gradient), causal and not, dropout from one seed.
TEST_CASE("attention_qkv: attention_tokens on the column blocks", "[nnops]") {
    struct Case { int64_t B, T, H, D; bool causal; float dropout; };
    for (Case c : {Case{2, 5, 3, 8, false, 0.f}, Case{2, 6, 2, 6, true, 0.f}, Case{1, 7, 3, 4, true, 0.3f}}) {
        INFO("B " << c.B << " T " << c.T << " H " << c.H << " D " << c.D << " causal " << c.causal << " dropout "
                  << c.dropout);
        auto run = [&](bool fused) {
            Tensor qkv = param({c.B, c.T, 3 * c.H * c.D}, 91);
            manual_seed(6);
            Tensor o;
            if (fused) {
                o = attention_qkv(qkv, c.H, c.causal, c.dropout, true);
            } else {
                std::vector<Tensor> p = test::split_qkv(qkv);
                o = attention_tokens(p[0], p[1], p[2], c.H, c.causal, c.dropout, true);
            }
            sum(mul(o, param(o.shape(), 92).detach())).backward();
            return std::vector<Tensor>{o, qkv.grad()};
        };
        std::vector<Tensor> got = run(true), want = run(false);
        CHECK(got[0].shape() == Shape({c.B, c.T, c.H * c.D}));
        CHECK(test::max_abs_diff(got[0], want[0]) < 1e-6f);
        CHECK(test::max_abs_diff(got[1], want[1]) < 1e-6f);
    }
}

TEST_CASE("attention_qkv", "[nnops][gradcheck]") {
    gradcheck("attention_qkv causal", [](auto& in) { return attention_qkv(in[0], 2, true); }, {param({2, 4, 12}, 93)});
}

TEST_CASE("attention_qkv argument errors", "[nnops]") {
    CHECK_THROWS_WITH(attention_qkv(param({2, 4, 12}, 94), 3, false),
                      Catch::Contains("attention_qkv: the width of qkv [2,4,12] is not 3 × 3 heads × a head dim"));
    CHECK_THROWS_WITH(attention_qkv(param({2, 4, 3, 4}, 95), 1, false),
                      Catch::Contains("attention_qkv: qkv [B,T,3·H·D] must be 3-d"));
    CHECK_THROWS_WITH(attention_qkv(param({2, 0, 12}, 96), 2, false), Catch::Contains("no tokens"));
}

TEST_CASE("attention", "[nnops][gradcheck]") {
    auto inputs = [] {
        return std::vector<Tensor>{param({2, 2, 3, 4}, 64), param({2, 2, 5, 4}, 65), param({2, 2, 5, 4}, 66)};
    };
    gradcheck("attention_full", [](auto& in) { return attention(in[0], in[1], in[2], false); }, inputs());
    gradcheck("attention_causal", [](auto& in) { return attention(in[0], in[1], in[2], true); }, inputs());
    gradcheck("attention_causal_t_gt_s",
              [](auto& in) { return attention(in[0], in[1], in[2], true, 0.f, false, 0.8f); },
              {param({1, 2, 5, 4}, 67), param({1, 2, 3, 4}, 68), param({1, 2, 3, 4}, 69)});
    gradcheck("attention_dropout", [](auto& in) {
        manual_seed(3);
        return attention(in[0], in[1], in[2], true, 0.3f, true);
    }, inputs());
    gradcheck("attention_dropout_full", [](auto& in) {
        manual_seed(4);
        return attention(in[0], in[1], in[2], false, 0.3f, true);
    }, inputs());
    // Only v requiring grad: the kernel skips dS.
    Tensor q = param({1, 1, 3, 4}, 70), k = param({1, 1, 3, 4}, 71);
    q.requires_grad_(false);
    k.requires_grad_(false);
    gradcheck("attention_v_only", [](auto& in) { return attention(in[0], in[1], in[2], true); },
              {q, k, param({1, 1, 3, 4}, 72)});
    // v frozen: dS is still needed, dv is not; each of q and k alone, then both.
    auto frozen = [](std::array<bool, 3> wanted) {
        return std::vector<Tensor>{param({2, 1, 3, 4}, 73).requires_grad_(wanted[0]),
                                   param({2, 1, 5, 4}, 74).requires_grad_(wanted[1]),
                                   param({2, 1, 5, 4}, 75).requires_grad_(wanted[2])};
    };
    for (bool causal : {false, true}) {
        auto f = [causal](auto& in) { return attention(in[0], in[1], in[2], causal); };
        gradcheck(causal ? "attention_q_only causal" : "attention_q_only", f, frozen({true, false, false}));
        gradcheck(causal ? "attention_k_only causal" : "attention_k_only", f, frozen({false, true, false}));
        gradcheck(causal ? "attention_qk causal" : "attention_qk", f, frozen({true, true, false}));
    }
}

// ---------------------------------------------------------------------------------------------
// rope

TEST_CASE("rope matches its formula", "[nnops]") {
    const int64_t B = 2, T = 5, D = 8;
    const double base = 100.0;
    const int64_t start = 3;
    Tensor x = param({B, T, D}, 80);
    Tensor y = rope(x, (float)base, start);
    std::vector<double> want(B * T * D);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < D / 2; i++) {
                double angle = (start + t) * std::pow(base, -2.0 * i / D);
                double x1 = x.at({b, t, i}), x2 = x.at({b, t, i + D / 2});
                want[(b * T + t) * D + i] = x1 * std::cos(angle) - x2 * std::sin(angle);
                want[(b * T + t) * D + i + D / 2] = x2 * std::cos(angle) + x1 * std::sin(angle);
            }
    check_close(y, want);
    // Position 0 is the identity; rope(x, start) at position t equals rope at start + t.
    Tensor x0 = param({1, 1, D}, 81);
    CHECK(test::max_abs_diff(rope(x0), x0) == 0.f);
    CHECK(test::max_abs_diff(rope(x, 10000.f, 2).narrow(1, 2, 3), rope(x.narrow(1, 2, 3), 10000.f, 4)) < 1e-6f);
    CHECK_THROWS_WITH(rope(param({2, 3, 5}, 82)), Catch::Contains("rope: last dim D must be even, got [2,3,5]"));
    CHECK_THROWS_WITH(rope(param({4}, 83)), Catch::Contains("rope: input must be [..., T, D], got [4]"));
}

TEST_CASE("rope", "[nnops][gradcheck]") {
    gradcheck("rope", [](auto& in) { return rope(in[0], 10000.f, 7); }, {param({2, 2, 3, 6}, 84)});
}
