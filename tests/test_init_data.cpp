// tests/test_init_data.cpp: the data-dependent schemes (lsuv, relu-quantile, attn-logits), each
// checked for its defining property by the test's own measurement on the init batch: forward hooks
// installed here, statistics computed here with plain loops.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <map>
#include "engine/error.h"
#include "engine/ops.h"
#include "init/data_dependent.h"
#include "nn/convmixer.h"
#include "nn/gau.h"
#include "nn/lstm.h"
#include "nn/transformer.h"

using namespace engine;

namespace {

nn::ViTConfig small_vit() {
    nn::ViTConfig c;
    c.image_size = 16;
    c.patch = 4;  // 4×4 tokens
    c.num_classes = 5;
    c.dim = 32;
    c.depth = 2;
    c.heads = 2;
    c.pool = "avg";
    return c;
}

nn::ConvMixerConfig small_convmixer() {
    nn::ConvMixerConfig c;
    c.dim = 16;
    c.depth = 2;
    c.kernel = 3;
    c.patch = 2;
    c.num_classes = 4;
    return c;
}

// Runs `forward` with a hook on every Linear/Conv of `model` that hands (path, output) to `fn`.
void observe(nn::Module& model, const std::function<void()>& forward,
             const std::function<void(const std::string&, const Tensor&)>& fn) {
    std::vector<nn::Module*> hooked;
    for (auto& [path, m] : model.named_modules())
        if (dynamic_cast<nn::Linear*>(m) || dynamic_cast<nn::Conv2d*>(m) || dynamic_cast<nn::DepthwiseConv2d*>(m)) {
            std::string p = path;
            m->forward_hook = [p, &fn](const nn::Module&, const Tensor& out) { fn(p, out); };
            hooked.push_back(m);
        }
    {
        NoGrad ng;
        forward();
    }
    for (auto* m : hooked) m->forward_hook = nullptr;
}

double sample_std(const std::vector<double>& x) {
    double mean = 0, sq = 0;
    for (double v : x) mean += v;
    mean /= x.size();
    for (double v : x) sq += (v - mean) * (v - mean);
    return std::sqrt(sq / (x.size() - 1));
}

// Unit j's values of a layer output: the last dim for Linear, dim 1 for convs.
std::vector<double> unit_values(const Tensor& out, int64_t j, bool conv) {
    std::vector<float> all = out.to_vector();
    std::vector<double> v;
    if (conv) {
        int64_t B = out.size(0), C = out.size(1), S = out.numel() / (B * C);
        for (int64_t b = 0; b < B; b++)
            for (int64_t s = 0; s < S; s++) v.push_back(all[(b * C + j) * S + s]);
    } else {
        int64_t U = out.size(-1);
        for (int64_t r = 0; r < out.numel() / U; r++) v.push_back(all[r * U + j]);
    }
    return v;
}

double gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }

std::vector<float> values(const Tensor& t) { return t.to_vector(); }

}  // namespace

TEST_CASE("lsuv: every Linear/Conv output has std 1 within tolerance on the init batch", "[init]") {
    manual_seed(0);
    nn::ViT vit(small_vit());
    Tensor images = Tensor::normal({24, 3, 16, 16});
    init::InitData data{[&] { vit.forward(images); }, 24};
    init::Options opt;
    init::Report report;
    init::lsuv_init(vit, opt, &data, report);

    int layers = 0;
    observe(vit, data.forward, [&](const std::string& path, const Tensor& out) {
        std::vector<float> v = out.to_vector();
        double s = sample_std(std::vector<double>(v.begin(), v.end()));
        INFO(path << " std " << s);
        CHECK(std::fabs(s - 1) <= opt.lsuv_tol);
        layers++;
    });
    CHECK(layers == 1 + 2 * 6 + 1);  // patch conv, q/k/v/proj/fc1/fc2 per block, head
    CHECK(report.figures["lsuv.layers"] == layers);
    CHECK(report.figures["lsuv.max_std_error"] <= opt.lsuv_tol);
    CHECK(report.figures["lsuv.rounds"] <= 1);
    // Orthonormal up to the LSUV scale: the rows of q.weight (square) are orthogonal, equal norms.
    Tensor w = vit.parameter("blocks.1.attn.q.weight").detach();
    Tensor gram = matmul(w, w, false, true);
    double d0 = gram.at({0, 0});
    for (int i = 0; i < 32; i++)
        for (int j = 0; j < 32; j++) CHECK(gram.at({i, j}) == Approx(i == j ? d0 : 0.0).margin(1e-4 * d0));
    for (float b : values(vit.parameter("blocks.0.mlp.fc1.bias"))) CHECK(b == 0.f);
    // The scheme's hooks are gone and the model is back in training mode.
    CHECK(vit.is_training());
    CHECK(!(*vit.blocks)[0].mlp->fc1->forward_hook);
}

TEST_CASE("lsuv on a ConvMixer: conv and depthwise outputs std 1 to a tight tolerance, BatchNorm on batch statistics", "[init]") {
    manual_seed(1);
    nn::ConvMixer cm(small_convmixer());
    Tensor images = Tensor::normal({8, 3, 16, 16});
    init::InitData data{[&] { cm.forward(images); }, 8};
    init::Options opt;
    opt.lsuv_tol = 1e-4f;
    init::Report report;
    init::lsuv_init(cm, opt, &data, report);
    // The passes ran BatchNorm on batch statistics, then restored its running statistics.
    for (float m : values(cm.blocks->operator[](0).bn1->running_mean)) CHECK(m == 0.f);
    for (float v : values(cm.blocks->operator[](1).bn2->running_var)) CHECK(v == 1.f);
    CHECK(report.figures["lsuv.rounds"] == 1);  // rescaling is exact: one round, then a measuring pass
    int layers = 0;
    observe(cm, data.forward, [&](const std::string& path, const Tensor& out) {
        std::vector<float> v = out.to_vector();
        double s = sample_std(std::vector<double>(v.begin(), v.end()));
        INFO(path << " std " << s);
        CHECK(std::fabs(s - 1) <= 1e-4);
        layers++;
    });
    CHECK(layers == 1 + 2 * 2 + 1);
}

TEST_CASE("relu-quantile: active fraction = act_prob within 1/n and post-activation std = goal", "[init]") {
    for (auto [f, g] : {std::pair<float, float>{0.8f, 1.f}, {0.6f, 0.5f}}) {
        manual_seed(2);
        nn::ViT vit(small_vit());
        Tensor images = Tensor::normal({16, 3, 16, 16});
        init::InitData data{[&] { vit.forward(images); }, 16};
        init::Options opt;
        opt.act_prob = f;
        opt.goal_std = g;
        init::Report report;
        init::relu_quantile_init(vit, opt, &data, report);
        int adapted = 0;
        observe(vit, data.forward, [&](const std::string& path, const Tensor& out) {
            if (path.find("fc1") == std::string::npos) return;
            adapted++;
            for (int64_t j = 0; j < out.size(-1); j++) {
                std::vector<double> z = unit_values(out, j, false), post;
                double active = 0;
                for (double x : z) active += x > 0, post.push_back(gelu(x));
                double n = (double)z.size();  // 16 images × 16 tokens
                INFO(path << " unit " << j);
                CHECK(std::fabs(active / n - f) <= 1 / n);
                // population std, as the paper (np.std)
                CHECK(sample_std(post) * std::sqrt((n - 1) / n) == Approx(g).epsilon(1e-3));
            }
        });
        CHECK(adapted == 2);
        CHECK(report.figures["relu_quantile.layers"] == 2);
        CHECK(report.figures["relu_quantile.max_active_error"] <= 1.0 / 256);
        CHECK(report.figures["relu_quantile.max_std_error"] < 1e-3);
        // The layers without an activation keep orthonormal weights and zero biases.
        for (float b : values(vit.parameter("blocks.0.mlp.fc2.bias"))) CHECK(b == 0.f);
        Tensor w = vit.parameter("blocks.0.attn.v.weight").detach();
        CHECK(matmul(w, w, false, true).at({3, 3}) == Approx(1.0).epsilon(1e-4));
    }
}

TEST_CASE("relu-quantile on a ConvMixer: every conv (GELU) unit per channel over positions", "[init]") {
    manual_seed(3);
    nn::ConvMixer cm(small_convmixer());
    Tensor images = Tensor::normal({4, 3, 16, 16});
    init::InitData data{[&] { cm.forward(images); }, 4};
    init::Options opt;
    init::Report report;
    init::relu_quantile_init(cm, opt, &data, report);
    int convs = 0;
    observe(cm, data.forward, [&](const std::string& path, const Tensor& out) {
        if (path == "head") return;
        convs++;
        for (int64_t c = 0; c < out.size(1); c++) {
            std::vector<double> z = unit_values(out, c, true), post;
            double active = 0;
            for (double x : z) active += x > 0, post.push_back(gelu(x));
            double n = (double)z.size();  // 4 images × 8×8 positions
            INFO(path << " channel " << c);
            CHECK(std::fabs(active / n - 0.8) <= 1 / n);
            CHECK(sample_std(post) * std::sqrt((n - 1) / n) == Approx(1.0).epsilon(1e-3));
        }
    });
    CHECK(convs == 1 + 2 * 2);
}

TEST_CASE("data-dependent schemes: same seed and batch, same weights", "[init]") {
    auto run = [](const std::string& scheme) {
        manual_seed(4);
        nn::ViT vit(small_vit());
        Tensor images = Tensor::normal({8, 3, 16, 16});
        init::InitData data{[&] { vit.forward(images); }, 8};
        init::Report r;
        if (scheme == "lsuv") init::lsuv_init(vit, init::Options{}, &data, r);
        else init::relu_quantile_init(vit, init::Options{}, &data, r);
        return values(vit.parameter("blocks.1.mlp.fc1.weight"));
    };
    CHECK(run("lsuv") == run("lsuv"));
    CHECK(run("relu-quantile") == run("relu-quantile"));
    CHECK(run("lsuv") != run("relu-quantile"));
}

TEST_CASE("data-dependent schemes refuse to run without data or on models they cannot adapt", "[init]") {
    manual_seed(5);
    nn::ViT vit(small_vit());
    init::Report r;
    init::Options opt;
    CHECK_THROWS_WITH(init::lsuv_init(vit, opt, nullptr, r), Catch::Contains("lsuv") && Catch::Contains("ViT") &&
                                                                 Catch::Contains("needs InitData"));
    CHECK_THROWS_WITH(init::relu_quantile_init(vit, opt, nullptr, r), Catch::Contains("relu-quantile") &&
                                                                          Catch::Contains("needs InitData"));
    CHECK_THROWS_WITH(init::attn_logits_init(vit, opt, nullptr, r), Catch::Contains("attn-logits") &&
                                                                        Catch::Contains("needs InitData"));
    nn::LSTMConfig lc;
    lc.vocab = 20;
    lc.hidden = 8;
    nn::LSTMLM lstm(lc);
    std::vector<nn::LSTMState> state;
    Tensor ids = Tensor::randint({2, 5}, 0, 20);
    init::InitData data{[&] { lstm.forward(ids, state); }, 2};
    CHECK_THROWS_WITH(init::relu_quantile_init(lstm, opt, &data, r),
                      Catch::Contains("relu-quantile") && Catch::Contains("LSTMLM") && Catch::Contains("ReLU"));
    opt.act_prob = 1.5f;
    Tensor images = Tensor::normal({2, 3, 16, 16});
    init::InitData vdata{[&] { vit.forward(images); }, 2};
    CHECK_THROWS_WITH(init::relu_quantile_init(vit, opt, &vdata, r), Catch::Contains("act_prob 1.5"));
}
