// tests/test_init_data.cpp: the data-dependent schemes (lsuv, relu-quantile, attn-logits), each
// checked for its defining property by the test's own measurement on the init batch: forward hooks
// installed here, statistics computed here with plain loops.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <map>
#include "engine/error.h"
#include "engine/linalg.h"
#include "engine/ops.h"
#include "init/data_dependent.h"
#include "nn/convmixer.h"
#include "nn/gau.h"
#include "nn/lstm.h"
#include "nn/transformer.h"
#include "tests/helpers.h"

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

TEST_CASE("lsuv on a ConvMixer: conv and depthwise outputs std 1 to a tight tolerance, BatchNorm on batch stats",
          "[init]") {
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

TEST_CASE("lsuv and relu-quantile after another scheme keep its weights up to scale", "[init]") {
    manual_seed(10);
    nn::ViT vit(small_vit());
    Tensor q0 = vit.parameter("blocks.0.attn.q.weight").clone();
    Tensor fc2 = vit.parameter("blocks.1.mlp.fc2.weight").clone();
    Tensor images = Tensor::normal({8, 3, 16, 16});
    init::InitData data{[&] { vit.forward(images); }, 8};
    init::Report report;
    init::Options after;
    after.after_other_scheme = true;  // what init::apply sets for "earlier+lsuv"
    init::lsuv_init(vit, after, &data, report);
    Tensor q1 = vit.parameter("blocks.0.attn.q.weight");
    double ratio = q1.at({0, 0}) / q0.at({0, 0});
    CHECK(ratio > 0);
    for (int64_t i = 0; i < 32; i++)
        for (int64_t j = 0; j < 32; j++) CHECK(q1.at({i, j}) == Approx(ratio * q0.at({i, j})).margin(1e-5));
    observe(vit, data.forward, [&](const std::string& path, const Tensor& out) {
        std::vector<float> v = out.to_vector();
        INFO(path);
        CHECK(std::fabs(sample_std(std::vector<double>(v.begin(), v.end())) - 1) <= 0.1);
    });
    Tensor q2 = vit.parameter("blocks.0.attn.q.weight").clone();
    Tensor fc2_lsuv = vit.parameter("blocks.1.mlp.fc2.weight").clone();
    init::relu_quantile_init(vit, after, &data, report);
    CHECK(values(vit.parameter("blocks.0.attn.q.weight")) == values(q2));  // not adapted: untouched
    CHECK(values(vit.parameter("blocks.1.mlp.fc2.weight")) == values(fc2_lsuv));
    CHECK(values(fc2_lsuv) != values(fc2));  // (lsuv had rescaled it)
    // fc1 is adapted: its biases now sit at the units' quantiles.
    bool bias_set = false;
    for (float b : values(vit.parameter("blocks.0.mlp.fc1.bias"))) bias_set |= b != 0.f;
    CHECK(bias_set);
}

// For the ViT's MLP activation (train_vit --act); the scheme's own setting is ReLU.
TEST_CASE("relu-quantile: active fraction = act_prob within 1/n and post-activation std = goal", "[init]") {
    const std::pair<nn::Activation, double (*)(double)> acts[] = {
        {nn::Activation::GELU, gelu},
        {nn::Activation::ReLU, [](double x) { return std::max(x, 0.0); }},
        {nn::Activation::ReLU2, [](double x) { return x > 0 ? x * x : 0.0; }},
        {nn::Activation::SiLU, [](double x) { return x / (1 + std::exp(-x)); }}};
    for (auto [act, act_fn] : acts)
    for (auto [f, g] : {std::pair<float, float>{0.8f, 1.f}, {0.6f, 0.5f}}) {
        INFO("activation " << (int)act << ", act_prob " << f);
        manual_seed(2);
        nn::ViTConfig c = small_vit();
        c.act = act;
        nn::ViT vit(c);
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
                for (double x : z) active += x > 0, post.push_back(act_fn(x));
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

TEST_CASE("relu-quantile ablations: without the scaling fc1 stays orthonormal, without the bias it stays 0",
          "[init]") {
    for (bool keep_bias : {true, false}) {
        manual_seed(3);
        nn::ViT vit(small_vit());
        Tensor images = Tensor::normal({16, 3, 16, 16});
        init::InitData data{[&] { vit.forward(images); }, 16};
        init::Options opt;
        opt.act_prob = 0.7f;
        opt.goal_std = 0.5f;
        opt.rq_bias = keep_bias;
        opt.rq_scale = !keep_bias;
        init::Report report;
        init::relu_quantile_init(vit, opt, &data, report);
        INFO((keep_bias ? "bias only" : "scale only"));
        for (const char* layer : {"blocks.0.mlp.fc1", "blocks.1.mlp.fc1"}) {
            Tensor w = vit.parameter(std::string(layer) + ".weight").detach();  // [128, 32]
            Tensor gram = matmul(w, w, true, false);
            double off_identity = 0;
            for (int64_t i = 0; i < 32; i++)
                for (int64_t j = 0; j < 32; j++) off_identity = std::max(off_identity, std::fabs((double)gram.at({i, j}) - (i == j)));
            INFO(layer);
            if (keep_bias) CHECK(off_identity < 1e-4);  // the orthonormal weights, unscaled
            else CHECK(off_identity > 0.1);               // rows scaled unit by unit
            bool all_zero = true;
            for (float b : values(vit.parameter(std::string(layer) + ".bias"))) all_zero &= b == 0.f;
            CHECK(all_zero == !keep_bias);
        }
        observe(vit, data.forward, [&](const std::string& path, const Tensor& out) {
            if (path.find("fc1") == std::string::npos) return;
            for (int64_t j = 0; j < out.size(-1); j++) {
                std::vector<double> z = unit_values(out, j, false), post;
                double active = 0;
                for (double x : z) active += x > 0, post.push_back(gelu(x));
                double n = (double)z.size();
                INFO(path << " unit " << j);
                if (keep_bias) CHECK(std::fabs(active / n - 0.7) <= 1 / n);
                else CHECK(sample_std(post) * std::sqrt((n - 1) / n) == Approx(0.5).epsilon(1e-3));
            }
        });
        CHECK(report.figures.count("relu_quantile.max_active_error") == (keep_bias ? 1u : 0u));
        CHECK(report.figures.count("relu_quantile.max_std_error") == (keep_bias ? 0u : 1u));
        // The measured ranges the report gives: the part that ran holds them at its target.
        for (const char* key : {"min_active", "max_active", "min_post_std", "max_post_std"})
            REQUIRE(report.figures.count(std::string("relu_quantile.") + key) == 1);
        if (keep_bias) {
            CHECK(std::fabs(report.figures["relu_quantile.min_active"] - 0.7) <= 1.0 / 256);
            CHECK(std::fabs(report.figures["relu_quantile.max_active"] - 0.7) <= 1.0 / 256);
        } else {
            CHECK(report.figures["relu_quantile.min_post_std"] == Approx(0.5).epsilon(1e-3));
            CHECK(report.figures["relu_quantile.max_post_std"] == Approx(0.5).epsilon(1e-3));
        }
    }
}

// Aguirre & Fuentes' Scheme 4, from the logits Z = X·W + b it produced: W solves min ||X·W − T||
// (every feature column is orthogonal to T − X·W = T − (Z − b)), and b = mean(T − X·W) (the
// residual Z − T has mean 0 per class). `bias`: the head's bias, undefined for a head without.
// Returns the rms residual of Z against T.
static double check_least_squares(const Tensor& features, const Tensor& logits, const Tensor& labels,
                                  const Tensor& bias) {
    const int64_t d = features.size(-1), rows = features.numel() / d, classes = logits.size(-1);
    REQUIRE(logits.numel() == rows * classes);
    const float *x = features.data_f32(), *z = logits.data_f32();
    const int32_t* y = labels.data_i32();
    double worst = 0, scale = 0, residual2 = 0;
    for (int64_t c = 0; c < classes; c++) {
        const double b = bias.defined() ? bias.data_f32()[c] : 0.0;
        std::vector<double> r(rows);  // Z − T
        double sum = 0;
        for (int64_t i = 0; i < rows; i++) {
            r[i] = z[i * classes + c] - (y[i] == c ? 2.0 : -2.0);
            residual2 += r[i] * r[i], sum += r[i];
        }
        for (int64_t k = 0; k < d; k++) {
            double dot = 0, norm = 0;
            for (int64_t i = 0; i < rows; i++) {
                const double v = x[i * d + k];
                dot += v * (r[i] - b), norm += v * v;
            }
            worst = test::max_err(worst, std::fabs(dot)), scale = std::max(scale, std::sqrt(norm));
        }
        if (bias.defined()) {
            worst = test::max_err(worst, std::fabs(sum));
            scale = std::max(scale, std::sqrt((double)rows));
        }
    }
    CHECK(worst < 1e-3 * scale);
    return std::sqrt(residual2 / (double)(rows * classes));
}

// Runs `forward` in eval mode without gradients; returns the input `head` saw.
static Tensor head_input(nn::Module& model, nn::Linear& head, const std::function<void()>& forward) {
    Tensor seen;
    head.input_hook = [&](const nn::Module&, const Tensor& x) { seen = x.detach().clone(); };
    NoGrad ng;
    model.eval();
    forward();
    model.train();
    head.input_hook = nullptr;
    return seen;
}

TEST_CASE("relu-quantile: the output layer is the least-squares read-out to logits ±2 of the labels", "[init]") {
    manual_seed(4);
    nn::ViT vit(small_vit());  // 5 classes, head 32 -> 5
    const int64_t n = 64, classes = 5;
    Tensor images = Tensor::normal({n, 3, 16, 16});
    init::InitData data{[&] { vit.forward(images); }, n, Tensor::randint({n}, 0, (int32_t)classes)};
    init::Report report;
    init::relu_quantile_init(vit, init::Options{}, &data, report);
    Tensor logits;
    Tensor features = head_input(vit, *vit.head, [&] { logits = vit.forward(images); });
    REQUIRE(features.size(0) == n);
    double rms = check_least_squares(features, logits, data.labels, vit.head->bias);
    // Not a joint fit of W and b: its normal equations (each feature column orthogonal to Z − T)
    // do not hold here, because the feature columns do not have mean 0.
    double joint = 0, column_mean = 0;
    for (int64_t k = 0; k < 32; k++) {
        double mean = 0;
        for (int64_t i = 0; i < n; i++) mean += features.data_f32()[i * 32 + k] / (double)n;
        column_mean = std::max(column_mean, std::fabs(mean));
        for (int64_t c = 0; c < classes; c++) {
            double dot = 0;
            for (int64_t i = 0; i < n; i++)
                dot += features.data_f32()[i * 32 + k] *
                       (logits.data_f32()[i * classes + c] - (data.labels.data_i32()[i] == c ? 2.0 : -2.0));
            joint = std::max(joint, std::fabs(dot));
        }
    }
    INFO("largest feature column mean " << column_mean);
    CHECK(joint > 1e-2);
    CHECK(report.figures["relu_quantile.output_rms_residual"] == Approx(rms).epsilon(1e-3));
    CHECK(rms < 2.0);  // better than all-zero logits
    CHECK(report.figures["relu_quantile.output_batch_acc"] > 0.5);  // 33 unknowns for 64 rows fit most labels

    // Without labels, or with the option off, the head keeps its orthonormal weights.
    for (bool with_labels : {false, true}) {
        manual_seed(4);
        nn::ViT other(small_vit());
        init::InitData plain{[&] { other.forward(images); }, n};
        if (with_labels) plain.labels = data.labels;
        init::Options off;
        if (with_labels) off.output_logit = 0;
        init::Report r2;
        init::relu_quantile_init(other, off, &plain, r2);
        CHECK(r2.figures.count("relu_quantile.output_rms_residual") == 0);
        Tensor w = other.parameter("head.weight").detach();
        CHECK(matmul(w, w, false, true).at({1, 1}) == Approx(1.0).epsilon(1e-4));
    }
}

TEST_CASE("output-fit: only the output layer changes, to the least-squares read-out of the features", "[init]") {
    const int64_t n = 64, classes = 5;
    manual_seed(6);
    Tensor images = Tensor::normal({n, 3, 16, 16}), labels = Tensor::randint({n}, 0, (int32_t)classes);
    manual_seed(7);
    nn::ViT torch_only(small_vit());
    init::apply(torch_only, "torch");
    manual_seed(7);
    nn::ViT vit(small_vit());
    init::InitData data{[&] { vit.forward(images); }, n, labels};
    init::Report report = init::apply(vit, "torch+output-fit", init::Options{}, &data);

    for (auto& [name, p] : vit.named_parameters()) {
        INFO(name);
        if (name.rfind("head.", 0) == 0) CHECK(values(*p) != values(torch_only.parameter(name)));
        else CHECK(values(*p) == values(torch_only.parameter(name)));
    }
    Tensor logits;
    Tensor features = head_input(vit, *vit.head, [&] { logits = vit.forward(images); });
    // The features are torch's: the head's input does not depend on the head.
    Tensor torch_features = head_input(torch_only, *torch_only.head, [&] { torch_only.forward(images); });
    CHECK(values(features) == values(torch_features));
    double rms = check_least_squares(features, logits, labels, vit.head->bias);
    CHECK(report.figures["output_fit.output_rms_residual"] == Approx(rms).epsilon(1e-3));
    CHECK(report.figures["output_fit.output_batch_acc"] > 0.5);
    // The figures beside the fit: the weights' norm and the features' spread and mean.
    double w2 = 0, spread = 0, common = 0;
    for (float v : values(vit.head->weight)) w2 += (double)v * v;
    const int64_t d = features.size(-1);
    for (int64_t k = 0; k < d; k++) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < n; i++) mean += features.data_f32()[i * d + k] / (double)n;
        for (int64_t i = 0; i < n; i++) var += std::pow(features.data_f32()[i * d + k] - mean, 2) / (double)n;
        spread += var / (double)d, common += mean * mean / (double)d;
    }
    CHECK(report.figures["output_fit.output_weight_norm"] == Approx(std::sqrt(w2)).epsilon(1e-5));
    CHECK(report.figures["output_fit.feature_std"] == Approx(std::sqrt(spread)).epsilon(1e-4));
    CHECK(report.figures["output_fit.feature_mean"] == Approx(std::sqrt(common)).epsilon(1e-4));
    // Effective rank (Σλ)²/Σλ² of the features' covariance, from its eigenvalues: the squared
    // singular values of the centered features.
    Tensor centered = engine::sub(features, engine::mean(features, {0}, true));
    double sum = 0, sum2 = 0;
    for (float sv : values(engine::svd(centered).S)) sum += (double)sv * sv, sum2 += std::pow((double)sv * sv, 2);
    CHECK(report.figures["output_fit.feature_effective_rank"] == Approx(sum * sum / sum2).epsilon(1e-3));
    CHECK(report.figures.count("relu_quantile.layers") == 0);

    // Refusals: no labels, --output-logit 0, a tied language model (no separate head).
    init::InitData unlabelled{[&] { vit.forward(images); }, n};
    CHECK_THROWS_WITH(init::apply(vit, "output-fit", init::Options{}, &unlabelled),
                      Catch::Contains("output-fit") && Catch::Contains("no labels"));
    init::Options zero;
    zero.output_logit = 0;
    CHECK_THROWS_WITH(init::apply(vit, "output-fit", zero, &data),
                      Catch::Contains("output-fit") && Catch::Contains("--output-logit"));
    CHECK_THROWS_WITH(init::apply(vit, "output-fit"), Catch::Contains("output-fit") && Catch::Contains("init batch"));
    nn::LMConfig lc;
    lc.vocab = 12, lc.dim = 16, lc.depth = 1, lc.heads = 2, lc.max_len = 8;
    nn::TransformerLM tied(lc);
    REQUIRE(!tied.head);
    Tensor ids = Tensor::randint({2, 8}, 0, 12);
    init::InitData lm_data{[&] { tied.forward(ids); }, 2, Tensor::randint({2, 8}, 0, 12)};
    CHECK_THROWS_WITH(init::apply(tied, "output-fit", init::Options{}, &lm_data),
                      Catch::Contains("output-fit") && Catch::Contains("TransformerLM") && Catch::Contains("--untied"));
}

TEST_CASE("output-fit with a ridge: the penalized normal equations hold and the head is smaller", "[init]") {
    const int64_t n = 64, classes = 5;
    manual_seed(6);
    Tensor images = Tensor::normal({n, 3, 16, 16}), labels = Tensor::randint({n}, 0, (int32_t)classes);
    auto fitted = [&](float ridge, init::Report& report) {
        manual_seed(7);
        auto vit = std::make_shared<nn::ViT>(small_vit());
        init::InitData data{[&] { vit->forward(images); }, n, labels};
        init::Options opt;
        opt.output_ridge = ridge;
        report = init::apply(*vit, "torch+output-fit", opt, &data);
        return vit;
    };
    init::Report plain_report, ridge_report;
    fitted(0.f, plain_report);
    const float ridge = 0.05f;
    auto vit = fitted(ridge, ridge_report);
    Tensor x = head_input(*vit, *vit->head, [&] { vit->forward(images); });
    const int64_t d = x.size(-1);
    // X^T(X·W − T)/n + ridge·W = 0, W = head.weightᵀ [d, classes]
    const float* w = vit->head->weight.data_f32();
    const float* xs = x.data_f32();
    const int32_t* y = labels.data_i32();
    double worst = 0, scale = 0;
    for (int64_t c = 0; c < classes; c++)
        for (int64_t k = 0; k < d; k++) {
            double g = 0;
            for (int64_t i = 0; i < n; i++) {
                double z = 0;
                for (int64_t j = 0; j < d; j++) z += (double)xs[i * d + j] * w[c * d + j];
                g += xs[i * d + k] * (z - (y[i] == c ? 2.0 : -2.0)) / (double)n;
            }
            g += ridge * w[c * d + k];
            worst = std::max(worst, std::fabs(g)), scale = std::max(scale, std::fabs((double)ridge * w[c * d + k]));
        }
    INFO("largest ridge term " << scale);
    CHECK(worst < 1e-3 * std::max(scale, 1.0));
    CHECK(ridge_report.figures["output_fit.output_weight_norm"] < 0.9 * plain_report.figures["output_fit.output_weight_norm"]);
    bool says_ridge = false;
    for (auto& line : ridge_report.lines) says_ridge |= line.find("(ridge 0.05)") != std::string::npos;
    CHECK(says_ridge);
}

TEST_CASE("relu-quantile on an untied TransformerLM: a bias-free head fitted to the next tokens", "[init]") {
    manual_seed(5);
    nn::LMConfig lc;
    lc.vocab = 12, lc.dim = 16, lc.depth = 1, lc.heads = 2, lc.max_len = 16, lc.tie_weights = false;
    nn::TransformerLM lm(lc);
    REQUIRE(lm.head);
    REQUIRE(!lm.head->bias.defined());
    Tensor ids = Tensor::randint({4, 16}, 0, 12), next = Tensor::randint({4, 16}, 0, 12);
    init::InitData data{[&] { lm.forward(ids); }, 4, next};
    init::Report report;
    init::relu_quantile_init(lm, init::Options{}, &data, report);
    Tensor logits;
    Tensor features = head_input(lm, *lm.head, [&] { logits = lm.forward(ids); });
    double rms = check_least_squares(features, logits, next, Tensor());
    CHECK(report.figures["relu_quantile.output_rms_residual"] == Approx(rms).epsilon(1e-3));
    CHECK(rms < 2.0);
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

// ‖X·W·Kᵀ/√k − L‖/‖L‖ over the batch by plain loops, W = q_rowsᵀ [d, k], K_b = X_b·k_rowsᵀ.
double logit_residual(const Tensor& X, const Tensor& q_rows, const Tensor& k_rows, const Tensor& L) {
    int64_t B = X.size(0), T = X.size(1), d = X.size(2), k = q_rows.size(0);
    double err = 0, norm = 0;
    for (int64_t b = 0; b < B; b++) {
        std::vector<std::vector<double>> q(T, std::vector<double>(k)), kk(T, std::vector<double>(k));
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < k; j++)
                for (int64_t c = 0; c < d; c++) {
                    q[t][j] += X.at({b, t, c}) * q_rows.at({j, c});
                    kk[t][j] += X.at({b, t, c}) * k_rows.at({j, c});
                }
        for (int64_t i = 0; i < T; i++)
            for (int64_t t = 0; t < T; t++) {
                double l = 0;
                for (int64_t j = 0; j < k; j++) l += q[i][j] * kk[t][j];
                double e = l / std::sqrt((double)k) - L.at({i, t});
                err += e * e;
                norm += (double)L.at({i, t}) * L.at({i, t});
            }
    }
    return std::sqrt(err / norm);
}

TEST_CASE("fit_queries: the least-squares W_q, for one sample (two pseudo-inverses) and over a batch", "[init]") {
    manual_seed(6);
    int64_t T = 12, d = 8, k = 4;
    Tensor k_rows = Tensor::normal({k, d}), L = Tensor::normal({T, T}, 0.f, 2.f);
    // One sample, X of full column rank: X⁺·L·√k·(Kᵀ)⁺ minimizes ‖X·W·Kᵀ/√k − L‖ over all W.
    Tensor X1 = Tensor::normal({1, T, d});
    init::QueryFit fit = init::fit_queries(X1, k_rows, L);
    double r0 = logit_residual(X1, fit.q_rows, k_rows, L);
    CHECK(fit.residual == Approx(r0).epsilon(1e-4));
    CHECK(r0 < 1.0);
    for (int trial = 0; trial < 8; trial++) {
        Tensor nudged = add(fit.q_rows, Tensor::normal({k, d}, 0.f, 0.01f));
        CHECK(logit_residual(X1, nudged, k_rows, L) > r0 - 1e-6);
    }
    // A batch: no exact solution, but far better than a random W_q of the usual scale.
    Tensor X = Tensor::normal({5, T, d}), random_q = Tensor::normal({k, d}, 0.f, 1.f / std::sqrt((float)d));
    init::QueryFit batch = init::fit_queries(X, k_rows, L, random_q);
    CHECK(batch.residual == Approx(logit_residual(X, batch.q_rows, k_rows, L)).epsilon(1e-4));
    CHECK(batch.baseline == Approx(logit_residual(X, random_q, k_rows, L)).epsilon(1e-4));
    CHECK(batch.residual < batch.baseline);
    for (int trial = 0; trial < 8; trial++) {  // the joint least-squares optimum over the batch
        Tensor nudged = add(batch.q_rows, Tensor::normal({k, d}, 0.f, 0.01f));
        CHECK(logit_residual(X, nudged, k_rows, L) > batch.residual - 1e-6);
    }
    CHECK_THROWS_WITH(init::fit_queries(X, k_rows, Tensor::zeros({T, T + 1})), Catch::Contains("fit_queries"));
}

TEST_CASE("attn_logit_targets: local in early layers, flat (global) in the last; heads narrow to wide", "[init]") {
    manual_seed(7);
    init::TokenGeometry grid{4, false}, cls{4, true}, seq{};
    CHECK(grid.distance(0, 5) == Approx(std::sqrt(2.0)));  // (0,0) to (1,1)
    CHECK(cls.distance(0, 9) == 0);
    CHECK(cls.distance(1, 6) == Approx(std::sqrt(2.0)));
    CHECK(seq.distance(3, 10) == 7);
    // Mean target logit over token pairs at distance 0 minus over pairs at distance >= 2.
    auto contrast = [&](const Tensor& l) {
        double near = 0, far = 0;
        int nn = 0, nf = 0;
        for (int64_t i = 0; i < 16; i++)
            for (int64_t j = 0; j < 16; j++) {
                double dist = grid.distance(i, j);
                if (dist == 0) near += l.at({i, j}), nn++;
                if (dist >= 2) far += l.at({i, j}), nf++;
            }
        return near / nn - far / nf;
    };
    double first = contrast(init::attn_logit_targets(grid, 16, 0, 4, 0, 2));
    double middle = contrast(init::attn_logit_targets(grid, 16, 2, 4, 0, 2));
    double last = contrast(init::attn_logit_targets(grid, 16, 3, 4, 0, 2));
    CHECK(first > 3.0);  // a = 4, σ = 1: exp(-2) at distance 2
    CHECK(middle < first);
    CHECK(std::fabs(last) < 0.1);  // a = 0: only the N(0, 0.05²) noise
    double wide = contrast(init::attn_logit_targets(grid, 16, 0, 4, 1, 2));
    CHECK(wide < first);  // σ = 2: the second head reaches further
    CHECK(wide > 0.5);
    CHECK_THROWS_WITH(init::attn_logit_targets(grid, 17, 0, 4, 0, 2), Catch::Contains("17 tokens"));
}

TEST_CASE("attn-logits on a ViT: W_k orthonormal, achieved logits fit the targets better than random W_q", "[init]") {
    manual_seed(8);
    nn::ViTConfig c = small_vit();
    c.depth = 3;
    nn::ViT vit(c);
    std::vector<float> v0 = values(vit.parameter("blocks.2.attn.v.weight"));
    Tensor images = Tensor::normal({16, 3, 16, 16});
    init::InitData data{[&] { vit.forward(images); }, 16};
    init::Report report;
    init::attn_logits_init(vit, init::Options{}, &data, report);

    CHECK(report.figures["attn_logits.layers"] == 3);
    CHECK(report.figures["attn_logits.residual"] < report.figures["attn_logits.baseline_residual"]);
    CHECK(report.figures["attn_logits.residual"] < 0.8);
    for (auto& block : *vit.blocks) {
        Tensor wk = block->attn->k->weight.detach();
        Tensor gram = matmul(wk, wk, false, true);
        for (int i = 0; i < 32; i++)
            for (int j = 0; j < 32; j++) CHECK(gram.at({i, j}) == Approx(i == j ? 1.0 : 0.0).margin(1e-5));
        for (float b : values(block->attn->q->bias)) CHECK(b == 0.f);
        for (float b : values(block->attn->k->bias)) CHECK(b == 0.f);
    }
    CHECK(values(vit.parameter("blocks.2.attn.v.weight")) == v0);

    // The achieved logits, from the model's weights on the attention inputs (norm1 outputs):
    // local in block 0, nearly flat in the last block.
    init::TokenGeometry grid{vit.grid(), false};
    std::vector<double> contrast;
    for (auto& block : *vit.blocks) {
        auto* attn = block->attn.get();
        Tensor X;
        block->norm1->forward_hook = [&](const nn::Module&, const Tensor& out) { X = out.clone(); };
        {
            NoGrad ng;
            vit.forward(images);
        }
        block->norm1->forward_hook = nullptr;
        double near = 0, far = 0;
        int nn = 0, nf = 0;
        for (int64_t h = 0; h < attn->heads; h++) {
            Tensor q = matmul(X, attn->head_rows(attn->q->weight, h), false, true);
            Tensor k = matmul(X, attn->head_rows(attn->k->weight, h), false, true);
            Tensor logits = mul(matmul(q, k, false, true), 1.f / std::sqrt((float)attn->head_dim));
            for (int64_t b = 0; b < X.size(0); b++)
                for (int64_t i = 0; i < 16; i++)
                    for (int64_t j = 0; j < 16; j++) {
                        double dist = grid.distance(i, j);
                        if (dist == 0) near += logits.at({b, i, j}), nn++;
                        if (dist >= 2) far += logits.at({b, i, j}), nf++;
                    }
        }
        contrast.push_back(near / nn - far / nf);
    }
    INFO("near - far logits per block: " << contrast[0] << " " << contrast[1] << " " << contrast[2]);
    CHECK(contrast[0] > 1.0);
    CHECK(contrast[0] > contrast[1]);
    CHECK(std::fabs(contrast[2]) < 0.5);
    CHECK(vit.is_training());
}

TEST_CASE("attn-logits on a Pre-LN TransformerLM; Post-LN and attention-free models are refused", "[init]") {
    manual_seed(9);
    nn::LMConfig lc;
    lc.vocab = 30;
    lc.dim = 32;
    lc.depth = 2;
    lc.heads = 2;
    lc.max_len = 16;
    nn::TransformerLM lm(lc);
    Tensor ids = Tensor::randint({8, 12}, 0, 30);
    init::InitData data{[&] { lm.forward(ids); }, 8};
    init::Report report;
    init::attn_logits_init(lm, init::Options{}, &data, report);
    CHECK(report.figures["attn_logits.layers"] == 2);
    CHECK(report.figures["attn_logits.residual"] < report.figures["attn_logits.baseline_residual"]);

    lc.pre_norm = false;
    nn::TransformerLM post(lc);
    init::InitData pdata{[&] { post.forward(ids); }, 8};
    CHECK_THROWS_WITH(init::attn_logits_init(post, init::Options{}, &pdata, report),
                      Catch::Contains("attn-logits") && Catch::Contains("TransformerLM") && Catch::Contains("Post-LN"));
    nn::ConvMixer cm(small_convmixer());
    Tensor images = Tensor::normal({2, 3, 16, 16});
    init::InitData cdata{[&] { cm.forward(images); }, 2};
    CHECK_THROWS_WITH(init::attn_logits_init(cm, init::Options{}, &cdata, report),
                      Catch::Contains("ConvMixer") && Catch::Contains("no transformer blocks"));
}

TEST_CASE("data-dependent schemes: same seed and batch, same weights", "[init]") {
    auto run = [](const std::string& scheme) {
        manual_seed(4);
        nn::ViT vit(small_vit());
        Tensor images = Tensor::normal({8, 3, 16, 16});
        init::InitData data{[&] { vit.forward(images); }, 8};
        init::Report r;
        if (scheme == "lsuv") init::lsuv_init(vit, init::Options{}, &data, r);
        else if (scheme == "relu-quantile") init::relu_quantile_init(vit, init::Options{}, &data, r);
        else init::attn_logits_init(vit, init::Options{}, &data, r);
        std::vector<float> out = values(vit.parameter("blocks.1.mlp.fc1.weight"));
        std::vector<float> q = values(vit.parameter("blocks.1.attn.q.weight"));
        out.insert(out.end(), q.begin(), q.end());
        return out;
    };
    CHECK(run("lsuv") == run("lsuv"));
    CHECK(run("relu-quantile") == run("relu-quantile"));
    CHECK(run("attn-logits") == run("attn-logits"));
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
