// tests/test_init_misc.cpp: smallemb (range, the LayerNorm after the embedding, PE at 0, what that LayerNorm
// sees next to a fixed sinusoidal PE),
// t-fixup (Xavier scaled by 0.67·N^(−1/4), embedding std (9N)^(−1/4)), zero-attn (W_q = 0, W_k = I, uniform
// attention), composition with mimetic, and their errors; and the GAU-at-init estimate of
// apps/gau_scale.h against measurement.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include "apps/gau_scale.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "init/fixup.h"
#include "init/init.h"
#include "init/smallemb.h"
#include "init/standard.h"
#include "nn/gau.h"
#include "nn/lstm.h"
#include "nn/transformer.h"
#include "tests/helpers.h"

using namespace engine;

namespace {

nn::LMConfig small_lm() {
    nn::LMConfig c;
    c.vocab = 300;
    c.dim = 64;
    c.depth = 4;
    c.heads = 4;
    c.max_len = 16;
    return c;
}

double std_of(const Tensor& t) {
    double s = 0, s2 = 0;
    auto v = t.to_vector();
    for (float x : v) s += x;
    double m = s / v.size();
    for (float x : v) s2 += (x - m) * (x - m);
    return std::sqrt(s2 / v.size());
}

double max_abs(const Tensor& t) {
    double w = 0;
    for (float x : t.to_vector()) w = test::max_err(w, (double)std::fabs(x));
    return w;
}

// The cosine between emb_norm's outputs for tokens a and b at position 0: what block 0 can tell apart at init.
double emb_norm_cos(const nn::TransformerLM& lm, int32_t a, int32_t b) {
    Tensor x = lm.tok_emb->forward(Tensor::from_vector(std::vector<int32_t>{a, b}, {2, 1}));
    if (lm.pos_embed.defined()) x = add(x, lm.pos_embed.narrow(0, 0, 1));
    std::vector<float> y = lm.emb_norm->forward(x).to_vector();
    size_t d = y.size() / 2;
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < d; i++) {
        ab += (double)y[i] * y[d + i];
        aa += (double)y[i] * y[i];
        bb += (double)y[d + i] * y[d + i];
    }
    return ab / std::sqrt(aa * bb);
}

}  // namespace

TEST_CASE("smallemb: the LayerNorm after it tells tokens apart, unless a fixed sinusoidal PE outweighs them", "[init]") {
    manual_seed(34);
    for (std::string pos : {"learned", "rope", "sinusoidal"}) {
        nn::LMConfig c = small_lm();
        c.emb_norm = true;
        c.pos = pos;
        nn::TransformerLM lm(c);
        init::apply(lm, "smallemb");
        double cos = emb_norm_cos(lm, 5, 6);
        INFO(pos << ": cos " << cos);
        if (pos == "sinusoidal")
            CHECK(cos > 0.9999);  // both rows are the normalized PE: the tokens are invisible to block 0
        else
            CHECK(std::fabs(cos) < 0.5);  // two U(±1e-4) rows, normalized: unrelated directions in 64 dims
    }
}

TEST_CASE("smallemb: embedding U(±1e-4), a LayerNorm after it, learned PE at 0", "[init]") {
    manual_seed(31);
    nn::LMConfig c = small_lm();
    c.emb_norm = true;
    c.pos = "learned";
    nn::TransformerLM lm(c);
    init::Report r = init::apply(lm, "timm+smallemb");
    Tensor& e = lm.tok_emb->weight;
    CHECK(max_abs(e) <= 1e-4);
    CHECK(max_abs(e) > 0.9e-4);
    CHECK(std_of(e) == Approx(1e-4 / std::sqrt(3.0)).epsilon(0.03));  // 19,200 draws
    CHECK(lm.emb_norm != nullptr);
    CHECK(lm.has_parameter("emb_norm.weight"));
    CHECK(max_abs(lm.pos_embed) == 0.0);
    CHECK(lm.parameter("blocks.0.attn.q.weight").at({0, 0}) != 0.f);  // timm part kept
    CHECK(r.lines.back().find("emb_norm") != std::string::npos);
    CHECK(r.figures.count("smallemb.pe_over_emb_rms") == 0);  // a learned PE is set to 0: nothing outweighs the tokens
    // The LayerNorm makes the tiny embedding unit-scale before block 0: the model's output is not tiny.
    Tensor ids = Tensor::from_vector(std::vector<int32_t>{5, 6, 7, 8}, {1, 4});
    CHECK(std_of(lm.forward(ids)) > 1e-6);

    // Post-LN: block 0's norm follows the embedding already.
    nn::LMConfig post = small_lm();
    post.pre_norm = false;
    nn::TransformerLM plm(post);
    init::Report pr = init::apply(plm, "smallemb");
    CHECK(pr.lines[0].find("Post-LN") != std::string::npos);
    CHECK(max_abs(plm.tok_emb->weight) <= 1e-4);

    // Pre-LN without emb_norm, a Pre-Norm GAU, an LSTM and a ViT are refused, saying what to do.
    nn::TransformerLM pre(small_lm());
    CHECK_THROWS_WITH(init::apply(pre, "smallemb"), Catch::Contains("emb_norm = true"));
    nn::GAUConfig gc;
    gc.vocab = 10;
    gc.dim = 16;
    gc.expansion = 32;
    gc.s = 8;
    gc.post_norm = false;
    nn::GAULM gau_pre(gc);
    CHECK_THROWS_WITH(init::apply(gau_pre, "smallemb"), Catch::Contains("post_norm = true"));
    gc.post_norm = true;
    nn::GAULM gau_post(gc);
    CHECK_NOTHROW(init::apply(gau_post, "smallemb"));
    CHECK(max_abs(gau_post.tok_emb->weight) <= 1e-4);
    nn::LSTMConfig lc;
    lc.vocab = 10;
    lc.hidden = 8;
    nn::LSTMLM lstm(lc);
    CHECK_THROWS_WITH(init::apply(lstm, "smallemb"), Catch::Contains("smallemb") && Catch::Contains("LSTMLM"));
}

TEST_CASE("mimetic+smallemb composes on a TransformerLM", "[init]") {
    manual_seed(32);
    nn::LMConfig c = small_lm();
    c.emb_norm = true;
    nn::TransformerLM lm(c);
    init::Report r = init::apply(lm, "mimetic+smallemb");
    REQUIRE(r.lines.size() == 3);
    CHECK(max_abs(lm.tok_emb->weight) <= 1e-4);
    // The fixed sinusoidal PE (rms √½) outweighs U(±1e-4) (rms 1e-4/√3) in front of emb_norm, and the report says so.
    CHECK(r.lines[2].find("--pos rope or learned") != std::string::npos);
    CHECK(r.figures.at("smallemb.pe_over_emb_rms") == Approx(std::sqrt(0.5) / (1e-4 / std::sqrt(3.0))).epsilon(0.03));
    CHECK(r.figures.at("mimetic.vo_diag_mean") == Approx(-0.4).margin(0.05));
}

TEST_CASE("t-fixup: Xavier attention/MLP, v/proj/MLP × 0.67·N^(−1/4), embedding std (9N)^(−1/4)", "[init]") {
    manual_seed(33);
    nn::TransformerLM lm(small_lm());  // 4 blocks, d = 64, MLP 256
    init::Report r = init::apply(lm, "t-fixup");
    float scale = 0.67f * std::pow(4.f, -0.25f);
    CHECK(init::tfixup_scale(4) == Approx(scale));
    CHECK(r.figures.at("t-fixup.scale") == Approx(scale));
    auto xavier_std = [](double in, double out) { return std::sqrt(2.0 / (in + out)); };
    for (int b : {0, 3}) {
        std::string p = "blocks." + std::to_string(b) + ".";
        INFO(p);
        // 4,096 or 16,384 draws: 3% covers 6 standard errors of the sample std.
        CHECK(std_of(lm.parameter(p + "attn.q.weight")) == Approx(xavier_std(64, 64)).epsilon(0.07));
        CHECK(std_of(lm.parameter(p + "attn.k.weight")) == Approx(xavier_std(64, 64)).epsilon(0.07));
        CHECK(std_of(lm.parameter(p + "attn.v.weight")) == Approx(scale * xavier_std(64, 64)).epsilon(0.07));
        CHECK(std_of(lm.parameter(p + "attn.proj.weight")) == Approx(scale * xavier_std(64, 64)).epsilon(0.07));
        CHECK(std_of(lm.parameter(p + "mlp.fc1.weight")) == Approx(scale * xavier_std(64, 256)).epsilon(0.04));
        CHECK(std_of(lm.parameter(p + "mlp.fc2.weight")) == Approx(scale * xavier_std(256, 64)).epsilon(0.04));
        CHECK(max_abs(lm.parameter(p + "attn.v.bias")) == 0.0);
        CHECK(max_abs(lm.parameter(p + "mlp.fc1.bias")) == 0.0);
    }
    // The authors' effective input: a d^(−1/2) table × √d in fairseq's forward × (9N)^(−1/4).
    CHECK(init::tfixup_embedding_std(4) == Approx(std::pow(36.0, -0.25)));
    CHECK(std_of(lm.tok_emb->weight) == Approx(std::pow(36.0, -0.25)).epsilon(0.035));  // 19,200 draws
    // Options::tfixup_layers overrides the depth.
    init::Options opt;
    opt.tfixup_layers = 16;
    init::apply(lm, "t-fixup", opt);
    CHECK(std_of(lm.parameter("blocks.1.mlp.fc1.weight")) ==
          Approx(0.67 * std::pow(16.0, -0.25) * xavier_std(64, 256)).epsilon(0.04));
    nn::LSTMConfig lc;
    lc.vocab = 10;
    lc.hidden = 8;
    nn::LSTMLM lstm(lc);
    CHECK_THROWS_WITH(init::apply(lstm, "t-fixup"), Catch::Contains("t-fixup") && Catch::Contains("LSTMLM"));
    CHECK_THROWS_WITH(init::tfixup_scale(0), Catch::Contains("positive"));
}

TEST_CASE("zero-attn: W_q = 0, W_k = I, attention uniform at init", "[init]") {
    manual_seed(34);
    nn::ViTConfig c;
    c.image_size = 8;
    c.patch = 2;
    c.dim = 32;
    c.depth = 2;
    c.heads = 2;
    nn::ViT vit(c);
    auto v_before = vit.parameter("blocks.1.attn.v.weight").to_vector();
    init::apply(vit, "zero-attn");
    for (int b : {0, 1}) {
        auto& a = *(*vit.blocks)[b].attn;
        CHECK(max_abs(a.q->weight) == 0.0);
        CHECK(max_abs(a.q->bias) == 0.0);
        CHECK(max_abs(a.k->bias) == 0.0);
        for (int64_t i = 0; i < 32; i++)
            for (int64_t j = 0; j < 32; j++) REQUIRE(a.k->weight.at({i, j}) == (i == j ? 1.f : 0.f));
    }
    CHECK(vit.parameter("blocks.1.attn.v.weight").to_vector() == v_before);
    // Every logit is 0: each attention row is uniform over the 17 tokens.
    Tensor x = vit.embed(Tensor::normal({1, 3, 8, 8}));
    Tensor maps = (*vit.blocks)[0].attn->attention_map(x);
    for (float p : maps.to_vector()) REQUIRE(p == Approx(1.0 / 17));
    nn::GAUConfig gc;
    gc.vocab = 10;
    gc.dim = 16;
    gc.expansion = 32;
    gc.s = 8;
    nn::GAULM gau(gc);
    CHECK_THROWS_WITH(init::apply(gau, "zero-attn"), Catch::Contains("zero-attn") && Catch::Contains("GAULM"));
}

// ---------------------------------------------------------------------------------------------
// GAU at init (apps/gau_scale): the refined estimate of rms(GAU(x))/rms(x) that keeps A's
// off-diagonal mean, against measurement and against Su's s·ν⁶/n.

static double gau_ratio(int64_t d, int64_t s, int64_t n, double lambda, bool causal, uint64_t seed) {
    NoGrad ng;
    manual_seed(seed);
    nn::GAU gau(d, 2 * d, s, causal, false, false);
    init::fill_normal(gau.hidden->weight, 0.f, (float)(lambda / std::sqrt((double)d)));
    init::fill_normal(gau.out->weight, 0.f, (float)(lambda / std::sqrt(2.0 * d)));
    Tensor x = Tensor::normal({1, n, d});
    auto rms = [](const Tensor& t) {
        double s2 = 0;
        for (float v : t.to_vector()) s2 += (double)v * v;
        return std::sqrt(s2 / t.numel());
    };
    return rms(gau.forward(x)) / rms(x);
}

TEST_CASE("GAU at init: the refined estimate is within 25% of the measured scale; Su's is ~5x low", "[init]") {
    const int64_t d = 256, s = 128, n = 512;
    for (bool causal : {false, true}) {
        INFO((causal ? "causal" : "non-causal"));
        double measured = (gau_ratio(d, s, n, 1.0, causal, 1) + gau_ratio(d, s, n, 1.0, causal, 2)) / 2;
        gau_theory::Estimates est = gau_theory::estimate(d, s, n, 1.0, causal);
        INFO("measured " << measured << ", refined " << est.refined << ", Su " << est.su);
        CHECK(est.su == Approx(128 * std::pow(0.35578, 3) / 512).epsilon(1e-3));
        CHECK(measured / est.refined > 0.8);
        CHECK(measured / est.refined < 1.25);
        CHECK(measured / est.su > 2.5);  // the off-diagonal term Su drops dominates at n = 512
        // Every weight × ½: the refined factor follows the measured one (≈ λ⁹, not λ⁷).
        double half = gau_ratio(d, s, n, 0.5, causal, 1) / gau_ratio(d, s, n, 1.0, causal, 1);
        double predicted = gau_theory::estimate(d, s, n, 0.5, causal).refined / est.refined;
        INFO("lambda 1/2: measured factor " << half << ", refined " << predicted);
        CHECK(half / predicted > 0.8);
        CHECK(half / predicted < 1.25);
        CHECK(half < std::pow(0.5, 8));
    }
}
