// tests/test_nn.cpp: modules, parameter names, the models' shapes, optimizers, schedules, and
// tiny-config overfit tests (a model that cannot drive the loss down on one small batch is broken).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include "engine/error.h"
#include "engine/ops.h"
#include "nn/optim.h"
#include "nn/transformer.h"
#include "tests/golden_helpers.h"
#include "tests/helpers.h"

using namespace engine;
using namespace nn;

static ViTConfig tiny_vit() {
    ViTConfig c;
    c.image_size = 8;
    c.patch = 4;
    c.num_classes = 3;
    c.dim = 16;
    c.depth = 2;
    c.heads = 2;
    return c;
}

TEST_CASE("ViT: parameter names are PyTorch-style dotted paths", "[nn]") {
    manual_seed(0);
    ViT vit(tiny_vit());
    std::vector<std::string> names;
    for (auto& p : vit.named_parameters()) names.push_back(p.name);
    auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
    CHECK(has("cls_token"));
    CHECK(has("patch_embed.weight"));
    CHECK(has("blocks.1.attn.q.weight"));
    CHECK(has("blocks.0.attn.proj.bias"));
    CHECK(has("blocks.1.mlp.fc2.weight"));
    CHECK(has("norm.weight"));
    CHECK(has("head.bias"));
    CHECK(!has("pos_embed"));  // sincos: a buffer, not a parameter
    CHECK(vit.named_buffers().size() == 1);
    // d=16, 2 blocks, mlp 64, 3 classes, patch 4x4x3: count by hand.
    int64_t block = 4 * (16 * 16 + 16) + 2 * 2 * 16 + (16 * 64 + 64) + (64 * 16 + 16);
    int64_t total = 16 + (16 * 48 + 16) + 2 * block + 2 * 16 + (16 * 3 + 3);
    CHECK(vit.num_parameters() == total);
    CHECK(vit.parameter("blocks.0.attn.q.weight").shape() == Shape({16, 16}));
    CHECK_THROWS_WITH(vit.parameter("blocks.9.attn.q.weight"), Catch::Contains("no parameter named"));
    CHECK(vit.is_training());
    vit.eval();
    CHECK(!(*vit.blocks)[1].attn->is_training());
}

TEST_CASE("ViT forward: shapes, pooling, position embeddings", "[nn]") {
    manual_seed(1);
    Tensor images = Tensor::normal({2, 3, 8, 8});
    for (std::string pool : {"cls", "avg"})
        for (std::string pos : {"sincos1d", "sincos2d", "learned"}) {
            ViTConfig c = tiny_vit();
            c.pool = pool;
            c.pos = pos;
            ViT vit(c);
            Tensor logits = vit.forward(images);
            CHECK(logits.shape() == Shape({2, 3}));
            CHECK(vit.embed(images).shape() == Shape({2, pool == "cls" ? 5 : 4, 16}));
        }
    ViTConfig bad = tiny_vit();
    bad.patch = 3;
    CHECK_THROWS_WITH(ViT(bad), Catch::Contains("not a multiple of patch"));
    ViT vit(tiny_vit());
    CHECK_THROWS_WITH(vit.forward(Tensor::zeros({2, 3, 16, 16})), Catch::Contains("ViT: images [2,3,16,16]"));
}

// timm's order for global average pooling: the mean over the tokens, then the LayerNorm, then the
// head; the default is a LayerNorm on every token before the mean.
TEST_CASE("ViT fc_norm: with average pooling the final LayerNorm comes after the mean", "[nn]") {
    manual_seed(4);
    Tensor images = Tensor::normal({2, 3, 8, 8});
    ViTConfig c = tiny_vit();
    c.pool = "avg";
    c.fc_norm = true;
    ViT vit(c);
    // A norm with its own scale and shift, so that its place shows in more than the scale.
    Generator g(5);
    g.normal(vit.norm->weight.data_f32(), vit.norm->weight.numel(), 1.f, 0.5f);
    g.normal(vit.norm->bias.data_f32(), vit.norm->bias.numel(), 0.f, 0.5f);
    Tensor x = vit.embed(images);
    for (auto& b : *vit.blocks) x = b->forward(x);
    Tensor want = vit.head->forward(vit.norm->forward(mean(x, {1})));
    Tensor per_token = vit.head->forward(mean(vit.norm->forward(x), {1}));
    Tensor got = vit.forward(images);
    REQUIRE(got.shape() == Shape({2, 3}));
    CHECK(got.to_vector() == want.to_vector());
    CHECK(got.to_vector() != per_token.to_vector());
    c.fc_norm = false;
    ViT plain(c);
    auto from = vit.named_parameters(), to = plain.named_parameters();  // the same weights, the default order
    REQUIRE(from.size() == to.size());
    for (size_t i = 0; i < from.size(); i++)
        std::copy(from[i].tensor->data_f32(), from[i].tensor->data_f32() + from[i].tensor->numel(),
                  to[i].tensor->data_f32());
    CHECK(plain.forward(images).to_vector() == per_token.to_vector());
    c.pool = "cls";
    c.fc_norm = true;
    CHECK_THROWS_WITH(ViT(c), Catch::Contains("fc_norm") && Catch::Contains("pool avg"));
}

TEST_CASE("sinusoidal position embeddings follow the formulas", "[nn]") {
    Tensor pe = sincos_1d(10, 8);
    CHECK(pe.at({3, 2}) == Approx(std::sin(3 / std::pow(10000.0, 2.0 / 8))));
    CHECK(pe.at({3, 3}) == Approx(std::cos(3 / std::pow(10000.0, 2.0 / 8))));
    Tensor pe2 = sincos_2d(4, 4, 16);
    // Row r = 2, column c = 3 (token 11), frequency i = 1 of 4: ω = 1/10000^(1/4).
    double w = 1 / std::pow(10000.0, 0.25);
    CHECK(pe2.at({11, 1}) == Approx(std::sin(2 * w)));
    CHECK(pe2.at({11, 5}) == Approx(std::cos(2 * w)));
    CHECK(pe2.at({11, 9}) == Approx(std::sin(3 * w)));
    CHECK(pe2.at({11, 13}) == Approx(std::cos(3 * w)));
}

TEST_CASE("ViT: a tiny config overfits a tiny batch", "[nn][overfit]") {
    manual_seed(2);
    ViT vit(tiny_vit());
    Tensor images = Tensor::normal({6, 3, 8, 8});
    Tensor labels = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 0, 1, 2}, {6});
    auto [first, last] = test::train_steps(vit, [&] { return cross_entropy(vit.forward(images), labels); }, 60, 3e-3f);
    INFO("loss " << first << " -> " << last);
    CHECK(first > 0.8f);
    CHECK(last < 0.05f);
}

static LMConfig tiny_lm() {
    LMConfig c;
    c.vocab = 11;
    c.dim = 16;
    c.depth = 2;
    c.heads = 2;
    c.max_len = 16;
    return c;
}

TEST_CASE("TransformerLM: shapes, tying, causality", "[nn]") {
    manual_seed(3);
    TransformerLM lm(tiny_lm());
    Tensor ids = Tensor::randint({2, 7}, 0, 11);
    Tensor logits = lm.forward(ids);
    CHECK(logits.shape() == Shape({2, 7, 11}));
    CHECK(!lm.has_parameter("head.weight"));  // tied to tok_emb.weight
    // Causal: changing the last token must not change the logits of earlier positions.
    Tensor ids2 = ids.clone();
    ids2.set({0, 6}, (float)((int)ids.at({0, 6}) + 1) == 11 ? 0.f : ids.at({0, 6}) + 1);
    Tensor l2 = lm.forward(ids2);
    float earlier = 0, last = 0;
    for (int t = 0; t < 7; t++)
        for (int v = 0; v < 11; v++) {
            float d = std::fabs(logits.at({0, t, v}) - l2.at({0, t, v}));
            (t < 6 ? earlier : last) = test::max_err(t < 6 ? earlier : last, d);
        }
    CHECK(earlier == 0.f);
    CHECK(last > 0.f);
    LMConfig c = tiny_lm();
    c.tie_weights = false;
    c.pre_norm = false;
    c.emb_norm = true;
    c.pos = "rope";
    TransformerLM lm2(c);
    CHECK(lm2.has_parameter("head.weight"));
    CHECK(lm2.has_parameter("emb_norm.weight"));
    CHECK(lm2.forward(ids).shape() == Shape({2, 7, 11}));
    CHECK_THROWS_WITH(lm.forward(Tensor::zeros({1, 17}, DType::I32)), Catch::Contains("exceeds max_len 16"));
}

TEST_CASE("TransformerLM: embed() is the token embedding times emb_scale plus the PE times pe_scale", "[nn]") {
    Tensor ids = Tensor::from_vector(std::vector<int32_t>{4, 0, 9}, {1, 3});
    for (std::string pos : {"sinusoidal", "learned"}) {
        LMConfig c = tiny_lm();
        c.pos = pos;
        c.pe_scale = 3.f;
        c.emb_scale = 0.5f;
        TransformerLM lm(c);
        Tensor x = lm.embed(ids);
        CHECK(x.shape() == Shape({1, 3, 16}));
        float err = 0.f;
        for (int t = 0; t < 3; t++)
            for (int j = 0; j < 16; j++) {
                float want = 0.5f * lm.tok_emb->weight.at({(int64_t)ids.at({0, t}), j}) + 3.f * lm.pos_embed.at({t, j});
                err = test::max_err(err, std::fabs(x.at({0, t, j}) - want));
            }
        INFO(pos);
        CHECK(err < 1e-6f);
    }
    LMConfig c = tiny_lm();
    c.pos = "none";
    TransformerLM bare(c);  // no position embedding: the tokens' embeddings alone
    CHECK(bare.embed(ids).at({0, 2, 5}) == bare.tok_emb->weight.at({9, 5}));
    CHECK_THROWS_WITH([&] { c.pe_every_block = true; TransformerLM again(c); }(), Catch::Contains("pos is none"));
    c.pe_every_block = false;
    c.pos = "rope";
    c.pe_scale = 2.f;  // rotary PE has no vector to scale
    CHECK_THROWS_WITH(TransformerLM(c), Catch::Contains("pos is rope"));
}

TEST_CASE("TransformerLM: pe_every_block adds the scaled position embedding before every block", "[nn]") {
    LMConfig c = tiny_lm();
    c.pe_scale = 2.f;
    manual_seed(4);
    TransformerLM plain(c);  // the same weights (the same seed), the PE added once
    plain.eval();
    c.pe_every_block = true;
    manual_seed(4);
    TransformerLM lm(c);
    lm.eval();
    Tensor ids = Tensor::randint({2, 5}, 0, 11);
    Tensor pe = mul(lm.pos_embed.narrow(0, 0, 5), 2.f);
    Tensor want = lm.embed(ids);  // the embedding already holds the PE once
    want = (*lm.blocks)[0].forward(want);
    want = (*lm.blocks)[1].forward(add(want, pe));
    CHECK(test::max_abs_diff(lm.trunk(ids), want) == 0.f);
    CHECK(test::max_abs_diff(lm.block_input(want, 0), want) == 0.f);  // block 0 reads the embedding as it is
    CHECK(test::max_abs_diff(plain.embed(ids), lm.embed(ids)) == 0.f);
    CHECK(test::max_abs_diff(plain.trunk(ids), lm.trunk(ids)) > 1e-3f);
}

TEST_CASE("TransformerLM: a tiny config memorizes a sequence", "[nn][overfit]") {
    manual_seed(4);
    for (bool pre_norm : {true, false}) {
        LMConfig c = tiny_lm();
        c.pre_norm = pre_norm;
        TransformerLM lm(c);
        std::vector<int32_t> seq = {1, 5, 2, 7, 3, 9, 4, 10, 6, 8, 0, 1, 5};
        Tensor x = Tensor::from_vector(std::vector<int32_t>(seq.begin(), seq.end() - 1), {1, 12});
        Tensor y = Tensor::from_vector(std::vector<int32_t>(seq.begin() + 1, seq.end()), {1, 12});
        auto [first, last] = test::train_steps(lm, [&] { return cross_entropy(lm.forward(x), y); }, 80, 1e-2f);
        INFO((pre_norm ? "pre" : "post") << "-LN loss " << first << " -> " << last);
        CHECK(first > 1.5f);
        CHECK(last < 0.1f);
    }
}

// The group of each parameter by name ("decay" or "none"); every parameter in exactly one group.
static std::map<std::string, std::string> group_of(const Module& model, bool no_decay_embeddings = true) {
    auto groups = param_groups(model, 0.05f, no_decay_embeddings);
    REQUIRE(groups.size() == 2);
    CHECK(groups[0].weight_decay == 0.05f);
    CHECK(groups[1].weight_decay == 0.f);
    std::map<std::string, std::string> out;
    for (int g = 0; g < 2; g++)
        for (auto& p : groups[g].params) {
            INFO(p.name);
            CHECK(out.count(p.name) == 0);
            out[p.name] = g == 0 ? "decay" : "none";
        }
    CHECK(out.size() == model.named_parameters().size());
    return out;
}

TEST_CASE("param_groups: no decay on 1-d tensors and embeddings", "[nn][optim]") {
    ViTConfig c = tiny_vit();
    c.pos = "learned";  // a pos_embed parameter
    ViT vit(c);
    auto vit_groups = group_of(vit);
    for (auto& p : vit.named_parameters()) {
        INFO(p.name);
        bool embedding = p.name == "pos_embed" || p.name == "cls_token";
        CHECK(vit_groups.at(p.name) == (p.tensor->ndim() >= 2 && !embedding ? "decay" : "none"));
    }
    CHECK(vit_groups.at("patch_embed.weight") == "decay");  // a conv kernel, not an embedding table
    CHECK(vit_groups.at("blocks.0.attn.q.weight") == "decay");
    CHECK(vit_groups.at("blocks.0.attn.q.bias") == "none");

    // An nn::Embedding table is found by its module type; an untied head is a weight like any other.
    LMConfig l = tiny_lm();
    l.tie_weights = false;
    TransformerLM lm(l);
    auto lm_groups = group_of(lm);
    CHECK(lm_groups.at("tok_emb.weight") == "none");
    CHECK(lm_groups.at("head.weight") == "decay");
    CHECK(lm_groups.at("blocks.0.mlp.fc1.weight") == "decay");
    CHECK(group_of(lm, false).at("tok_emb.weight") == "decay");  // no_decay_embeddings off
}

// One parameter, known gradients: the optimizers' updates against torch.optim's formulas by hand.
TEST_CASE("optimizers match torch.optim's update rules", "[nn][optim]") {
    auto make = [] {
        Tensor p = Tensor::from_vector(std::vector<float>{1.f, -2.f}, {2});
        p.requires_grad_();
        return p;
    };
    auto group = [](Tensor& p, float wd) { return std::vector<ParamGroup>{{{{"p", &p}}, wd, 1.f}}; };
    auto set_grad = [](Tensor& p, float a, float b) { p.set_grad(Tensor::from_vector(std::vector<float>{a, b}, {2})); };

    Tensor p = make();
    Adam adamw(group(p, 0.1f), 0.01f, 0.9f, 0.999f, 1e-8f, true);
    set_grad(p, 0.5f, -1.f);
    adamw.step();
    // Step 1: m̂ = g, v̂ = g², so the update is lr·g/(|g| + eps) after p *= (1 − lr·wd).
    CHECK(p.at({0}) == Approx(1.f * (1 - 0.001f) - 0.01f).epsilon(1e-6));
    CHECK(p.at({1}) == Approx(-2.f * (1 - 0.001f) + 0.01f).epsilon(1e-6));
    set_grad(p, 0.5f, -1.f);
    adamw.step();
    CHECK(adamw.steps == 2);
    CHECK(adamw.state().count("p.exp_avg") == 1);

    Tensor q = make();
    SGD sgd(group(q, 0.f), 0.1f, 0.9f, false);
    set_grad(q, 1.f, 1.f);
    sgd.step();  // buf = g = 1
    set_grad(q, 1.f, 1.f);
    sgd.step();  // buf = 0.9 + 1 = 1.9
    CHECK(q.at({0}) == Approx(1.f - 0.1f - 0.19f));

    Tensor r = make();
    SGD nest(group(r, 0.f), 0.1f, 0.9f, true);
    set_grad(r, 1.f, 1.f);
    nest.step();  // buf = 1, step uses g + 0.9·buf = 1.9
    CHECK(r.at({0}) == Approx(1.f - 0.19f));
}

// tools/golden.py's optimizers(): six steps over a, b (group 1, weight decay 0.1) and c (group 2,
// none), where b has no gradient at steps 1-3 (frozen until then) and c none at step 5. torch.optim
// counts each parameter's updates, so b's step 4 is a first step (Adam's bias correction of a
// fresh start, SGD's buffer set to the gradient), and c's step 6 its fifth.
TEST_CASE("golden: optimizers count each parameter's updates as torch.optim does", "[nn][optim][golden]") {
    golden::File file("optim_late_start");
    const std::vector<std::string> names = {"a", "b", "c"};
    std::map<std::string, std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>)>> makers = {
        {"adamw", [](auto g) { return std::make_unique<Adam>(g, 1e-2f, 0.9f, 0.999f, 1e-8f, true); }},
        {"adam_l2", [](auto g) { return std::make_unique<Adam>(g, 1e-2f, 0.8f, 0.99f, 1e-3f, false); }},
        {"sgd_momentum", [](auto g) { return std::make_unique<SGD>(g, 0.1f, 0.9f, false); }},
        {"sgd_nesterov", [](auto g) { return std::make_unique<SGD>(g, 0.1f, 0.9f, true); }},
    };
    for (auto& [opt_name, make] : makers) {
        INFO(opt_name);
        std::map<std::string, Tensor> p;
        for (auto& n : names) p[n] = file.tensor("init." + n).clone().requires_grad_();
        auto opt = make({{{{"a", &p["a"]}, {"b", &p["b"]}}, 0.1f, 1.f}, {{{"c", &p["c"]}}, 0.f, 1.f}});
        for (int s = 1; s <= 6; s++) {
            for (auto& n : names) {
                std::string key = "grad." + std::to_string(s) + "." + n;
                if (file.has(key)) p[n].set_grad(file.tensor(key).clone());
                else p[n].zero_grad();
            }
            opt->step();
            if (s == 3) CHECK(opt->param_steps("b") == 0);
        }
        CHECK(opt->steps == 6);
        CHECK(opt->param_steps("a") == 6);
        CHECK(opt->param_steps("b") == 3);
        CHECK(opt->param_steps("c") == 5);
        CHECK(opt->param_steps_unlike_steps() == std::map<std::string, int64_t>{{"b", 3}, {"c", 5}});
        for (auto& n : names) file.compare(opt_name + "." + n, p[n], {1e-6f, 1e-5f});
    }
}

TEST_CASE("gradient clipping and schedules", "[nn][optim]") {
    Tensor a = Tensor::zeros({2}).requires_grad_();
    a.set_grad(Tensor::from_vector(std::vector<float>{3.f, 4.f}, {2}));
    CHECK(clip_grad_norm({a}, 1.f) == Approx(5.f));
    CHECK(grad_norm({a}) == Approx(1.f).epsilon(1e-5));
    CHECK(clip_grad_norm({a}, 10.f) == Approx(1.f).epsilon(1e-5));  // below the limit: unchanged

    WarmupCosine wc{1.f, 0.1f, 10, 110};
    CHECK(wc.lr(0) == Approx(0.1f));
    CHECK(wc.lr(9) == Approx(1.f));
    CHECK(wc.lr(60) == Approx(0.55f));
    CHECK(wc.lr(110) == Approx(0.1f));
    StepDecay sd{1.f, 0.5f, 4, 1};
    CHECK(sd.lr(3) == 1.f);
    CHECK(sd.lr(4) == 0.5f);
    CHECK(sd.lr(6) == 0.125f);
    ReduceOnPlateau rp{1.f, 0.25f};
    rp.update(5.f);
    CHECK(rp.update(4.f) == 1.f);
    CHECK(rp.update(4.f) == 0.25f);
}
