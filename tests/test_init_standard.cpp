// tests/test_init_standard.cpp: the classic schemes (torch, timm, xavier, kaiming, lecun,
// normal:STD, orthogonal) and the registry: each tensor's moments against its formula,
// orthogonality, seed reproducibility, composition and the error messages.
//
// Statistical tolerance: for n draws with std σ, the sample mean has standard error σ/√n and the
// sample std a relative standard error of at most √(1/(2n)) (normal; the uniform's is smaller).
// Every check allows 6 standard errors (a false failure about once in 10⁸ per check), so the
// checks are loose on a 3×48 head and tight on a 64×256 MLP weight.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include "engine/error.h"
#include "engine/ops.h"
#include "init/init.h"
#include "init/standard.h"
#include "nn/lstm.h"
#include "nn/transformer.h"
#include "tests/helpers.h"

using namespace engine;

namespace {

struct Moments {
    double mean = 0, std = 0, max_abs = 0;
};

Moments moments(const Tensor& t) {
    std::vector<float> v = t.to_vector();
    Moments m;
    for (float x : v) m.mean += x;
    m.mean /= (double)v.size();
    for (float x : v) {
        m.std += (x - m.mean) * (x - m.mean);
        m.max_abs = test::max_err(m.max_abs, (double)std::fabs(x));
    }
    m.std = std::sqrt(m.std / (double)v.size());
    return m;
}

// Mean 0 and std `sd` within 6 standard errors.
void check_moments(const Tensor& t, double sd, const std::string& what) {
    Moments m = moments(t);
    double n = (double)t.numel();
    INFO(what << " " << t.shape().str() << ": mean " << m.mean << ", std " << m.std << ", expected std " << sd);
    CHECK(std::fabs(m.mean) <= 6 * sd / std::sqrt(n));
    CHECK(std::fabs(m.std / sd - 1) <= 6 * std::sqrt(1 / (2 * n)));
}

void check_constant(const Tensor& t, float value, const std::string& what) {
    INFO(what);
    for (float x : t.to_vector()) REQUIRE(x == value);
}

// A ViT with a class token and a learned PE, big enough for tight moments.
nn::ViTConfig small_vit() {
    nn::ViTConfig c;
    c.image_size = 8;
    c.patch = 4;
    c.num_classes = 3;
    c.dim = 64;
    c.depth = 2;
    c.heads = 4;
    c.pos = "learned";
    return c;
}

nn::LSTMConfig small_lstm() {
    nn::LSTMConfig c;
    c.vocab = 50;
    c.hidden = 32;
    c.layers = 2;
    return c;
}

// init::weight_layers of a small_vit() or a small_lstm(), their number required: the schemes write
// through the same list the tests loop over, so a layer it left out would be neither written nor
// checked. The ViT's: the patch conv, q k v proj fc1 fc2 per block, the head; the LSTM LM's: the
// embedding, weight_ih and weight_hh per layer, the head.
std::vector<init::WeightRef> vit_weights(nn::ViT& vit) {
    auto layers = init::weight_layers(vit);
    REQUIRE(layers.size() == 1 + 6 * vit.blocks->size() + 1);
    return layers;
}

std::vector<init::WeightRef> lstm_weights(nn::LSTMLM& lm) {
    auto layers = init::weight_layers(lm);
    REQUIRE(layers.size() == 1 + 2 * lm.layers->size() + 1);
    return layers;
}

// Sets every parameter to 7, so a test sees whether a scheme wrote each tensor.
void poison(nn::Module& m) {
    for (auto& p : m.named_parameters()) init::fill_value(*p.tensor, 7.f);
}

}  // namespace

TEST_CASE("init torch: PyTorch's default distributions for every layer kind", "[init]") {
    manual_seed(1);
    nn::ViT vit(small_vit());
    poison(vit);
    init::Report r = init::apply(vit, "torch");
    CHECK(!r.lines.empty());
    for (auto& w : vit_weights(vit)) {
        double bound = 1 / std::sqrt((double)init::fans_of(*w.weight).in);
        check_moments(*w.weight, bound / std::sqrt(3.0), w.name);
        CHECK(moments(*w.weight).max_abs <= bound);
        if (w.bias && w.bias->defined()) CHECK(moments(*w.bias).max_abs <= bound);
        if (w.bias && w.bias->defined()) CHECK(moments(*w.bias).max_abs > 0);
    }
    check_constant(vit.parameter("blocks.1.norm2.weight"), 1.f, "LayerNorm weight");
    check_constant(vit.parameter("norm.bias"), 0.f, "LayerNorm bias");
    check_constant(vit.cls_token, 0.f, "cls token");
    check_moments(vit.pos_embed, 0.02, "learned PE");

    nn::LSTMLM lstm(small_lstm());
    poison(lstm);
    init::apply(lstm, "torch");
    double bound = 1 / std::sqrt(32.0);
    for (const char* name : {"layers.0.weight_ih", "layers.1.weight_hh"}) {
        check_moments(lstm.parameter(name), bound / std::sqrt(3.0), name);
        CHECK(moments(lstm.parameter(name)).max_abs <= bound);
    }
    check_moments(lstm.parameter("layers.0.bias_hh"), bound / std::sqrt(3.0), "LSTM bias");
    check_moments(lstm.tok_emb->weight, 1.0, "Embedding");
}

TEST_CASE("init uniform:A: U(±A) on every weight and bias of an LSTM LM (Zaremba)", "[init]") {
    manual_seed(6);
    nn::LSTMLM lstm(small_lstm());
    poison(lstm);
    init::apply(lstm, "uniform:0.05");
    for (auto& w : lstm_weights(lstm)) {
        for (Tensor* t : {w.weight, w.bias}) {
            if (!t || !t->defined()) continue;
            Moments m = moments(*t);
            CHECK(m.max_abs <= 0.05);
            if (t->numel() >= 200) check_moments(*t, 0.05 / std::sqrt(3.0), w.name);
        }
    }
    init::apply(lstm, "uniform");  // plain: 0.1
    CHECK(moments(lstm.parameter("layers.0.weight_ih")).max_abs > 0.05);
    CHECK(moments(lstm.parameter("layers.0.weight_ih")).max_abs <= 0.1);
    CHECK_THROWS_WITH(init::apply(lstm, "uniform:-1"), Catch::Contains("e.g. uniform:0.05"));
}

TEST_CASE("init timm: trunc-normal 0.02 Linear weights, zero biases, norms 1/0, tokens 0.02, patch conv as built",
          "[init]") {
    manual_seed(2);
    nn::ViT vit(small_vit());
    poison(vit);
    init::apply(vit, "timm");
    // As timm: the patch conv keeps what it held (as built: PyTorch's default), the Linear layers
    // get 0.02.
    check_constant(vit.parameter("patch_embed.weight"), 7.f, "patch conv weight");
    check_constant(vit.parameter("patch_embed.bias"), 7.f, "patch conv bias");
    int linear = 0;
    for (auto& w : init::weight_layers(vit)) {
        if (w.kind != "Linear") continue;
        linear++;
        check_moments(*w.weight, 0.02, w.name);
        CHECK(moments(*w.weight).max_abs <= 2.0);
        if (w.bias && w.bias->defined()) check_constant(*w.bias, 0.f, w.name + " bias");
    }
    CHECK(linear == 6 * (int)vit.blocks->size() + 1);  // q k v proj fc1 fc2 per block, the head
    check_constant(vit.parameter("blocks.0.norm1.weight"), 1.f, "LayerNorm weight");
    check_constant(vit.parameter("blocks.0.norm1.bias"), 0.f, "LayerNorm bias");
    check_moments(vit.pos_embed, 0.02, "learned PE");
    Moments cls = moments(vit.cls_token);  // 64 values: only the scale
    CHECK(cls.std > 0.01);
    CHECK(cls.std < 0.04);
}

TEST_CASE("init xavier, kaiming, lecun, normal:STD: std per tensor from its fans", "[init]") {
    struct Case {
        std::string name;
        bool uniform;
        std::function<double(init::Fans)> std;
    };
    float gain = 1.5f;
    std::vector<Case> cases = {
        {"xavier", true, [&](init::Fans f) { return gain * std::sqrt(2.0 / (f.in + f.out)); }},
        {"xavier-normal", false, [&](init::Fans f) { return gain * std::sqrt(2.0 / (f.in + f.out)); }},
        {"kaiming", false, [&](init::Fans f) { return gain * std::sqrt(2.0 / f.in); }},
        {"kaiming-uniform", true, [&](init::Fans f) { return gain * std::sqrt(2.0 / f.in); }},
        {"kaiming-fan-out", false, [&](init::Fans f) { return gain * std::sqrt(2.0 / f.out); }},
        {"lecun", false, [&](init::Fans f) { return gain * std::sqrt(1.0 / f.in); }},
        {"normal:0.05", false, [](init::Fans) { return 0.05; }},
    };
    init::Options opt;
    opt.gain = gain;
    for (auto& c : cases) {
        SECTION(c.name) {
            manual_seed(3);
            nn::ViT vit(small_vit());
            nn::LSTMLM lstm(small_lstm());
            poison(vit);
            poison(lstm);
            init::apply(vit, c.name, opt);
            init::apply(lstm, c.name, opt);
            for (const auto& layers : {vit_weights(vit), lstm_weights(lstm)})
                for (auto& w : layers) {
                    double sd = c.std(init::fans_of(*w.weight));
                    check_moments(*w.weight, sd, c.name + " " + w.name);
                    // A uniform of std σ has bound √3·σ.
                    if (c.uniform) CHECK(moments(*w.weight).max_abs <= std::sqrt(3.0) * sd * (1 + 1e-6));
                    if (w.bias && w.bias->defined()) check_constant(*w.bias, 0.f, w.name + " bias");
                }
            check_constant(vit.parameter("blocks.1.norm1.weight"), 1.f, "LayerNorm weight");
        }
    }
    // The fan rule of torch.nn.init: conv [out, in, k, k] -> in·k², out·k².
    init::Fans f = init::fans_of(Tensor::zeros({8, 3, 4, 4}));
    CHECK(f.in == 48);
    CHECK(f.out == 128);
    CHECK_THROWS_WITH(init::fans_of(Tensor::zeros({8})), Catch::Contains("fan in/out"));
}

// Max |MᵀM − gain²I| (tall) or |MMᵀ − gain²I| (wide) of a [rows, cols] matrix, in double.
static double orthogonality_error(const float* m, int64_t rows, int64_t cols, double gain) {
    bool tall = rows >= cols;
    int64_t n = tall ? cols : rows, len = tall ? rows : cols;
    auto at = [&](int64_t vec, int64_t i) { return tall ? m[i * cols + vec] : m[vec * cols + i]; };
    double worst = 0;
    for (int64_t a = 0; a < n; a++)
        for (int64_t b = 0; b < n; b++) {
            double dot = 0;
            for (int64_t i = 0; i < len; i++) dot += (double)at(a, i) * at(b, i);
            worst = test::max_err(worst, std::fabs(dot - (a == b ? gain * gain : 0.0)));
        }
    return worst;
}

TEST_CASE("init orthogonal: WᵀW = gain²·I (tall), WWᵀ = gain²·I (wide), convs flattened", "[init]") {
    manual_seed(4);
    for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{40, 7}, {7, 40}, {16, 16}, {1, 5}}) {
        Tensor q = init::orthogonal_matrix(r, c, 2.f);
        CHECK(q.shape() == Shape({r, c}));
        INFO(r << "x" << c);
        CHECK(orthogonality_error(q.data_f32(), r, c, 2.0) < 1e-5);
    }
    init::Options opt;
    opt.gain = 0.5f;
    nn::ViT vit(small_vit());
    poison(vit);
    init::apply(vit, "orthogonal", opt);
    for (auto& w : vit_weights(vit)) {
        int64_t rows = w.weight->size(0), cols = w.weight->numel() / rows;
        INFO(w.name);
        CHECK(orthogonality_error(w.weight->data_f32(), rows, cols, 0.5) < 1e-5);
        if (w.bias && w.bias->defined()) check_constant(*w.bias, 0.f, w.name + " bias");
    }
    // Haar-distributed: the entries of a square orthogonal matrix have std 1/√n.
    check_moments(init::orthogonal_matrix(128, 128, 1.f), 1 / std::sqrt(128.0), "orthogonal 128x128");
    CHECK_THROWS_WITH(init::orthogonal_matrix(0, 3, 1.f), Catch::Contains("orthogonal_matrix"));
}

TEST_CASE("init: the same seed gives the same weights, another seed other weights", "[init]") {
    for (std::string scheme : {"torch", "timm", "xavier", "kaiming", "lecun", "normal:0.1", "orthogonal"}) {
        auto weights = [&](uint64_t seed) {
            manual_seed(100);
            nn::ViT vit(small_vit());
            manual_seed(seed);
            init::apply(vit, scheme);
            std::vector<float> all;
            for (auto& p : vit.named_parameters()) {
                auto v = p.tensor->to_vector();
                all.insert(all.end(), v.begin(), v.end());
            }
            return all;
        };
        INFO(scheme);
        CHECK(weights(5) == weights(5));
        CHECK(weights(5) != weights(6));
    }
}

TEST_CASE("init registry: names, normal:STD, composition left to right, errors", "[init]") {
    std::set<std::string> names;
    for (auto& s : init::schemes()) {
        CHECK(!s.summary.empty());
        CHECK(s.fn);
        CHECK(names.insert(s.name).second);  // unique
    }
    for (const char* n : {"torch", "timm", "xavier", "xavier-normal", "kaiming", "kaiming-uniform", "kaiming-fan-out",
                          "lecun", "normal:STD", "uniform:A", "orthogonal", "mimetic", "impulse3", "impulse5",
                          "impulse3-closed", "smallemb",
                          "lsuv", "relu-quantile", "output-fit", "attn-logits", "t-fixup", "zero-attn"})
        CHECK(names.count(n) == 1);
    for (auto& s : init::schemes())
        CHECK(s.needs_data == (s.name == "lsuv" || s.name == "relu-quantile" || s.name == "output-fit" ||
                               s.name == "attn-logits"));
    CHECK(names.count("layerscale") == 0);  // a model option, not a scheme

    manual_seed(8);
    nn::ViT vit(small_vit());
    Tensor& fc1 = vit.parameter("blocks.0.mlp.fc1.weight");  // [256, 64]
    init::apply(vit, "normal:0.5");
    check_moments(fc1, 0.5, "normal:0.5");
    init::apply(vit, "normal");  // Options::normal_std
    check_moments(fc1, 0.02, "normal");
    // Left to right: the last scheme wins on the tensors both write.
    init::apply(vit, "normal:0.5+timm");
    check_moments(fc1, 0.02, "normal:0.5+timm");
    init::Report r = init::apply(vit, " timm + normal:0.5 ");
    check_moments(fc1, 0.5, "timm+normal:0.5");
    CHECK(r.lines.size() == 2);

    CHECK_THROWS_WITH(init::apply(vit, "mimetc"),
                      Catch::Contains("unknown scheme 'mimetc'") && Catch::Contains("valid: torch, timm"));
    CHECK_THROWS_WITH(init::apply(vit, "timm+bogus"), Catch::Contains("unknown scheme 'bogus'"));
    CHECK_THROWS_WITH(init::apply(vit, "timm++torch"), Catch::Contains("empty part"));
    CHECK_THROWS_WITH(init::apply(vit, ""), Catch::Contains("empty scheme name"));
    CHECK_THROWS_WITH(init::apply(vit, "normal:abc"), Catch::Contains("STD must be a number"));
    CHECK_THROWS_WITH(init::apply(vit, "normal:-1"), Catch::Contains("STD must be a number"));
    CHECK_THROWS_WITH(init::apply(vit, "timm+lsuv"), Catch::Contains("'lsuv' needs an init batch"));
    init::InitData no_forward;
    CHECK_THROWS_WITH(init::apply(vit, "relu-quantile", {}, &no_forward), Catch::Contains("needs an init batch"));
    // A bad name late in the chain fails before anything is written.
    std::vector<float> before = fc1.to_vector();
    CHECK_THROWS(init::apply(vit, "xavier+nope"));
    CHECK(fc1.to_vector() == before);
    // Which chains need an init batch: any data-dependent part makes the whole chain need one.
    CHECK_FALSE(init::needs_data("timm"));
    CHECK_FALSE(init::needs_data("mimetic+smallemb"));
    CHECK(init::needs_data("mimetic+lsuv"));
    CHECK(init::needs_data("attn-logits"));
    CHECK_THROWS_WITH(init::needs_data("timm+bogus"), Catch::Contains("unknown scheme 'bogus'"));
}
