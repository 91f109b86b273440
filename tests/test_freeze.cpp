// tests/test_freeze.cpp: apps/common/freeze.h, which parameters --train-only and --freeze leave
// trainable, the errors for a pattern that matches nothing, and --freeze-until's unfreezing; and
// apps/common/lr_scale.h, the parameter groups --lr-scale makes and the step they take.
#include <catch2/catch.hpp>

#include "apps/common/freeze.h"
#include "apps/common/lr_scale.h"
#include "engine/error.h"
#include "nn/convmixer.h"
#include "nn/transformer.h"

namespace {

std::vector<std::string> trained_names(const nn::Module& m) {
    std::vector<std::string> out;
    for (const auto& p : m.named_parameters())
        if (p.tensor->requires_grad()) out.push_back(p.name);
    return out;
}

nn::LMConfig tiny_lm() {
    nn::LMConfig c;
    c.vocab = 11;
    c.dim = 8;
    c.depth = 2;
    c.heads = 2;
    c.max_len = 16;
    c.tie_weights = false;
    return c;
}

// --freeze-spatial: the model freezes its own spatial filters.
nn::ConvMixerConfig tiny_convmixer_frozen_spatial() {
    nn::ConvMixerConfig c;
    c.dim = 8;
    c.depth = 2;
    c.kernel = 3;
    c.patch = 2;
    c.num_classes = 10;
    c.freeze_spatial = true;
    return c;
}

}  // namespace

TEST_CASE("split_patterns: comma-separated globs; an empty item is refused", "[apps]") {
    CHECK(apps::split_patterns("", "--freeze").empty());
    CHECK(apps::split_patterns("a.*", "--freeze") == std::vector<std::string>{"a.*"});
    CHECK(apps::split_patterns("a,b.*,c", "--freeze") == std::vector<std::string>{"a", "b.*", "c"});
    CHECK_THROWS_WITH(apps::split_patterns("a,,b", "--freeze"), Catch::Contains("--freeze: an empty pattern"));
    CHECK_THROWS_AS(apps::split_patterns("a,", "--train-only"), engine::Error);
}

TEST_CASE("select_trained: --train-only keeps the matches, --freeze drops them, '*' crosses dots", "[apps]") {
    nn::TransformerLM lm(tiny_lm());
    int64_t all = (int64_t)lm.named_parameters().size();

    SECTION("no flags: everything trains") {
        auto s = apps::select_trained(lm, "", "");
        CHECK(s.trained_tensors == all);
        CHECK(s.frozen_tensors == 0);
        CHECK(s.trained_values == lm.num_parameters());
    }
    SECTION("--train-only the value layers of every block") {
        auto s = apps::select_trained(lm, "blocks.*.attn.v.*", "");
        CHECK(trained_names(lm) == std::vector<std::string>{"blocks.0.attn.v.weight", "blocks.0.attn.v.bias",
                                                            "blocks.1.attn.v.weight", "blocks.1.attn.v.bias"});
        CHECK(s.trained_values == 2 * (8 * 8 + 8));
        CHECK(s.trained_values + s.frozen_values == lm.num_parameters());
    }
    SECTION("--freeze every bias and LayerNorm; two lists combine") {
        apps::select_trained(lm, "", "*.bias,*norm*");
        for (const auto& name : trained_names(lm)) {
            INFO(name);
            CHECK(name.find("bias") == std::string::npos);
            CHECK(name.find("norm") == std::string::npos);
        }
        CHECK(lm.parameter("tok_emb.weight").requires_grad());
        CHECK(!lm.parameter("blocks.1.norm2.weight").requires_grad());
    }
    SECTION("both flags: train the matches of one minus those of the other") {
        apps::select_trained(lm, "blocks.1.*", "*.bias");
        for (const auto& name : trained_names(lm)) {
            INFO(name);
            CHECK(name.rfind("blocks.1.", 0) == 0);
            CHECK(name.find("bias") == std::string::npos);
        }
        CHECK(lm.parameter("blocks.1.mlp.fc1.weight").requires_grad());
    }
    SECTION("'?' is one character") {
        apps::select_trained(lm, "blocks.?.attn.q.weight", "");
        CHECK(trained_names(lm) == std::vector<std::string>{"blocks.0.attn.q.weight", "blocks.1.attn.q.weight"});
    }
}

TEST_CASE("select_trained: a pattern that matches nothing, and nothing left to train, are refused", "[apps]") {
    nn::TransformerLM lm(tiny_lm());
    CHECK_THROWS_WITH(apps::select_trained(lm, "blocks.*.atn.*", ""),
                      Catch::Contains("--train-only: 'blocks.*.atn.*' matches no parameter"));
    CHECK_THROWS_WITH(apps::select_trained(lm, "", "head.bias"),  // untied, but without a bias
                      Catch::Contains("--freeze: 'head.bias' matches no parameter"));
    CHECK_THROWS_WITH(apps::select_trained(lm, "blocks.*", "*"), Catch::Contains("leaves no parameter to train"));
    CHECK_THROWS_WITH(apps::select_trained(lm, "", "*"), Catch::Contains("leaves no parameter to train"));
}

TEST_CASE("select_trained: a model's own frozen parameters (ConvMixer's spatial filters) stay frozen", "[apps]") {
    nn::ConvMixer cm(tiny_convmixer_frozen_spatial());
    auto s = apps::select_trained(cm, "", "head.*");
    // Only what the flags turned off is theirs to hand back (--freeze-until): the head's two tensors.
    CHECK(s.frozen_by_flags == std::vector<engine::Tensor*>{&cm.parameter("head.weight"), &cm.parameter("head.bias")});
    CHECK(!cm.parameter("blocks.0.spatial.weight").requires_grad());
    CHECK(!cm.parameter("head.weight").requires_grad());
    CHECK(cm.parameter("blocks.0.pointwise.weight").requires_grad());
}

TEST_CASE("apply_freeze_flags --freeze-until: the frozen parameters train again at that step", "[apps]") {
    nn::ConvMixer cm(tiny_convmixer_frozen_spatial());
    auto all_trained = trained_names(cm);
    apps::FreezeFlags flags;
    flags.freeze = "blocks.0.*";
    SECTION("without --freeze-until nothing is handed back: frozen for the whole run") {
        apps::FrozenByFlags frozen = apps::apply_freeze_flags(cm, flags, "test");
        CHECK(frozen.tensors.empty());
        frozen.unfreeze_when_due(1000, "test");
        CHECK(!cm.parameter("blocks.0.pointwise.weight").requires_grad());
    }
    SECTION("with it, the flags' frozen tensors (not ConvMixer's own) train from that step") {
        flags.until = 3;
        apps::FrozenByFlags frozen = apps::apply_freeze_flags(cm, flags, "test");
        CHECK(frozen.tensors.size() == all_trained.size() - trained_names(cm).size());
        int64_t values = 0;
        for (engine::Tensor* t : frozen.tensors) values += t->numel();
        CHECK(values == 2 * 8 + (8 * 8 + 8) + 2 * 8);  // bn1, the pointwise conv, bn2
        frozen.unfreeze_when_due(2, "test");  // two steps taken: the third is still frozen
        CHECK(!cm.parameter("blocks.0.pointwise.weight").requires_grad());
        frozen.unfreeze_when_due(3, "test");
        CHECK(trained_names(cm) == all_trained);
        CHECK(!cm.parameter("blocks.0.spatial.weight").requires_grad());  // --freeze-spatial's stays
        CHECK(frozen.tensors.empty());
    }
    SECTION("a run resumed past the step unfreezes before its first step") {
        flags.until = 3;
        apps::FrozenByFlags frozen = apps::apply_freeze_flags(cm, flags, "test");
        frozen.unfreeze_when_due(10, "test");
        CHECK(trained_names(cm) == all_trained);
    }
    SECTION("--freeze-until without a pattern is refused") {
        apps::FreezeFlags none;
        none.until = 5;
        CHECK_THROWS_WITH(apps::apply_freeze_flags(cm, none, "test"), Catch::Contains("--freeze-until 5: there is nothing to unfreeze"));
    }
}

TEST_CASE("parse_lr_scales: GLOB=FACTOR items; a malformed item or a factor that is not positive is refused",
          "[apps]") {
    CHECK(apps::parse_lr_scales("").empty());
    auto s = apps::parse_lr_scales("blocks.*.mlp.fc1.weight=0.25,head.*=3");
    REQUIRE(s.size() == 2);
    CHECK(s[0].pattern == "blocks.*.mlp.fc1.weight");
    CHECK(s[0].factor == 0.25f);
    CHECK(s[1].pattern == "head.*");
    CHECK(s[1].factor == 3.f);
    CHECK_THROWS_WITH(apps::parse_lr_scales("head.weight"),
                      Catch::Contains("--lr-scale: 'head.weight' is not GLOB=FACTOR"));
    CHECK_THROWS_WITH(apps::parse_lr_scales("=2"), Catch::Contains("is not GLOB=FACTOR"));
    CHECK_THROWS_WITH(apps::parse_lr_scales("a="), Catch::Contains("is not GLOB=FACTOR"));
    CHECK_THROWS_WITH(apps::parse_lr_scales("a=0"), Catch::Contains("the factor '0' is not a positive number"));
    CHECK_THROWS_WITH(apps::parse_lr_scales("a=-1"), Catch::Contains("is not a positive number"));
    CHECK_THROWS_WITH(apps::parse_lr_scales("a=2x"), Catch::Contains("the factor '2x' is not a positive number"));
    CHECK_THROWS_WITH(apps::parse_lr_scales("a=inf"), Catch::Contains("is not a positive number"));
    CHECK_THROWS_WITH(apps::parse_lr_scales("a=2,,b=1"), Catch::Contains("--lr-scale: an empty pattern"));
}

TEST_CASE("apply_lr_scales: matches move to groups of their own with the factor and their weight decay", "[apps]") {
    nn::TransformerLM lm(tiny_lm());
    auto base = nn::param_groups(lm, 0.1f);
    REQUIRE(base.size() == 2);
    CHECK(apps::apply_lr_scales(base, "", "test").size() == 2);  // no flag: the groups as they were

    // fc1's weights (decayed) and every bias (not decayed) at two factors; the first item counts
    // for blocks.0.mlp.fc1.bias, which both match.
    auto groups = apps::apply_lr_scales(base, "blocks.*.mlp.fc1.weight=0.5,blocks.0.mlp.fc1.*=4,*.bias=2", "test");
    std::map<std::string, std::pair<float, float>> seen;  // name -> (lr_scale, weight_decay)
    size_t count = 0;
    for (const auto& g : groups) {
        CHECK(!g.params.empty());
        for (const auto& p : g.params) seen[p.name] = {g.lr_scale, g.weight_decay}, count++;
    }
    CHECK(count == lm.named_parameters().size());  // each parameter once
    CHECK(seen.size() == count);
    CHECK(seen.at("blocks.0.mlp.fc1.weight") == std::pair<float, float>{0.5f, 0.1f});
    CHECK(seen.at("blocks.1.mlp.fc1.weight") == std::pair<float, float>{0.5f, 0.1f});
    CHECK(seen.at("blocks.0.mlp.fc1.bias") == std::pair<float, float>{4.f, 0.f});
    CHECK(seen.at("blocks.1.mlp.fc1.bias") == std::pair<float, float>{2.f, 0.f});
    CHECK(seen.at("blocks.1.norm2.bias") == std::pair<float, float>{2.f, 0.f});
    CHECK(seen.at("blocks.1.norm2.weight") == std::pair<float, float>{1.f, 0.f});
    CHECK(seen.at("blocks.0.mlp.fc2.weight") == std::pair<float, float>{1.f, 0.1f});

    CHECK_THROWS_WITH(apps::apply_lr_scales(base, "*.bias=2,blocks.*.atn.*=2", "test"),
                      Catch::Contains("--lr-scale: 'blocks.*.atn.*' matches no parameter, or only ones an earlier "
                                      "item took (e.g. '"));
    CHECK_THROWS_WITH(apps::apply_lr_scales(base, "*=2,head.*=3", "test"),  // shadowed by the first
                      Catch::Contains("--lr-scale: 'head.*' matches no parameter, or only ones"));
}

// The step a group takes: SGD without momentum moves each weight by lr × lr_scale × its gradient.
TEST_CASE("apply_lr_scales: SGD moves a scaled parameter by the factor times the step of the others", "[apps]") {
    nn::TransformerLM lm(tiny_lm());
    std::map<std::string, engine::Tensor> before;
    for (const auto& p : lm.named_parameters()) {
        before[p.name] = p.tensor->detach().clone();
        p.tensor->set_grad(engine::Tensor::full(p.tensor->shape(), 1.f));
    }
    nn::SGD opt(apps::apply_lr_scales(nn::param_groups(lm, 0.f), "blocks.1.attn.q.weight=0.25", "test"), 0.5f);
    opt.step();
    auto moved = [&](const char* name) {
        engine::Tensor now = lm.parameter(name).detach();
        return (before.at(name).data_f32()[0] - now.data_f32()[0]);
    };
    CHECK(moved("blocks.1.attn.q.weight") == Approx(0.125f));
    CHECK(moved("blocks.0.attn.q.weight") == Approx(0.5f));
    CHECK(moved("blocks.1.attn.q.bias") == Approx(0.5f));
}
