// tests/test_freeze.cpp: apps/common/freeze.h, which parameters --train-only and --freeze leave
// trainable, the errors for a pattern that matches nothing, and --freeze-until's unfreezing.
#include <catch2/catch.hpp>

#include "apps/common/freeze.h"
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
