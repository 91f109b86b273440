// tests/cuda/test_cuda_graph_step.cpp: training steps through a CUDA graph (nn/graph_step.h) equal
// the same eager steps bit for bit: losses and every parameter after N steps, for a ViT with
// dropout and attention dropout (AdamW, gradient clipping), a TransformerLM with dropout (SGD
// with momentum) and an LSTM LM carrying its state with a scaled backward (SGD, clipping), with a
// learning rate that changes every step and a new batch every step. The eager side is the apps'
// step (zero_grad, loss, backward, clip_grad_norm on the host, step()).
//
// Why bitwise: the graph runs the same kernels on the same values. The learning rate, Adam's bias
// corrections, the clipping decision and the dropout draws come from device memory instead of the
// kernels' arguments, computed by the same float operations; the gradients are zeroed in place
// (0 + g = g) instead of being made anew.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <memory>
#include "engine/rng.h"
#include "nn/graph_step.h"
#include "nn/lstm.h"
#include "nn/transformer.h"
#include "tests/cuda/parity.h"
#ifdef ENGINE_CUDA_EMU
#include <cuda_runtime.h>  // the emulator's count of host waits
#endif

using engine::Device;
using engine::Tensor;

namespace {

constexpr int kSteps = 5;  // one eager warm-up, the capture's launch, three more launches

struct Run {
    std::vector<float> losses;
    std::vector<std::vector<float>> initial, params;  // the parameters before the first step and after the last
    uint64_t generator_offset = 0;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

Tensor random_ids(engine::Shape s, int32_t vocab, uint64_t seed) {
    engine::Generator g(seed);
    Tensor t = Tensor::empty(s, engine::DType::I32);
    g.randint(t.data_i32(), t.numel(), 0, vocab);
    return t;
}

// A one-block TransformerLM of 11 words, small enough to step in the emulator.
nn::LMConfig tiny_lm_config() {
    nn::LMConfig l;
    l.vocab = 11, l.dim = 16, l.depth = 1, l.heads = 2, l.max_len = 16;
    return l;
}

// One model family: how to build it, its optimizer, and the batch of step k (CPU tensors).
struct Case {
    std::function<std::shared_ptr<nn::Module>()> build;
    std::function<Tensor(nn::Module&, const Tensor&, const Tensor&)> loss;
    std::function<std::unique_ptr<nn::Optimizer>(nn::Module&)> optimizer;
    std::function<std::pair<Tensor, Tensor>(int)> batch;
    float max_norm = 0.f;
    float backward_scale = 0.f;  // > 0: the backward starts from loss · backward_scale
};

float lr_of_step(int k) { return 1e-2f * (1.f + 0.37f * (float)k); }

Run train(const Case& c, bool graph) {
    engine::manual_seed(42);
    std::shared_ptr<nn::Module> model = c.build();
    model->to(Device::CUDA);
    model->train();
    std::unique_ptr<nn::Optimizer> opt = c.optimizer(*model);
    std::vector<Tensor> params;
    for (auto& p : model->named_parameters()) params.push_back(*p.tensor);
    Run r;
    for (const Tensor& p : params) r.initial.push_back(p.to_vector());
    engine::manual_seed(7);  // the dropout draws start at the same point in both runs
    if (graph) {
        auto [x0, y0] = c.batch(0);
        Tensor x = x0.to(Device::CUDA), y = y0.to(Device::CUDA);  // the step reads these; refilled each step
        Tensor scale;
        if (c.backward_scale > 0.f) scale = Tensor::full(engine::Shape{}, c.backward_scale).to(Device::CUDA);
        nn::GraphStep step(*opt, [&] { return c.loss(*model, x, y); }, params, c.max_norm, scale);
        for (int k = 0; k < kSteps; k++) {
            auto [xk, yk] = c.batch(k);
            nn::copy_into(x, xk);
            nn::copy_into(y, yk);
            opt->lr = lr_of_step(k);
            r.losses.push_back(step.run().item());
        }
        CHECK(step.captured());
    } else {
        for (int k = 0; k < kSteps; k++) {
            auto [xk, yk] = c.batch(k);
            opt->lr = lr_of_step(k);
            opt->zero_grad();
            Tensor loss = c.loss(*model, xk.to(Device::CUDA), yk.to(Device::CUDA));
            if (c.backward_scale > 0.f) engine::mul(loss, c.backward_scale).backward();
            else loss.backward();
            if (c.max_norm > 0.f) nn::clip_grad_norm(params, c.max_norm);
            opt->step();
            r.losses.push_back(loss.item());
        }
    }
    for (const Tensor& p : params) r.params.push_back(p.to_vector());
    r.generator_offset = engine::global_generator().offset();
    return r;
}

void check_graph_equals_eager(const Case& c) {
    Run eager = train(c, false), graph = train(c, true);
    for (int k = 0; k < kSteps; k++) {
        INFO("step " << k << ": eager loss " << eager.losses[k] << ", graph loss " << graph.losses[k]);
        CHECK(same_bits({eager.losses[k]}, {graph.losses[k]}));
    }
    // The steps did train: the losses differ anyway (each step has its own batch), the weights only
    // if the updates happened.
    size_t moved = 0;
    for (size_t i = 0; i < eager.params.size(); i++) moved += !same_bits(eager.params[i], eager.initial[i]);
    CHECK(moved > 0);
    REQUIRE(eager.params.size() == graph.params.size());
    for (size_t i = 0; i < eager.params.size(); i++) {
        INFO("parameter " << i);
        CHECK(same_bits(eager.params[i], graph.params[i]));
    }
    CHECK(eager.generator_offset == graph.generator_offset);
}

}  // namespace

TEST_CASE("graph step: a ViT with dropout, AdamW and clipping equals eager steps bit for bit", "[cuda][graph]") {
    Case c;
    c.build = [] {
        nn::ViTConfig v;
        v.image_size = 8;
        v.patch = 4;
        v.dim = 16;
        v.depth = 2;
        v.heads = 2;
        v.pool = "cls";
        v.dropout = 0.1f;
        v.attn_dropout = 0.1f;
        return std::make_shared<nn::ViT>(v);
    };
    c.loss = [](nn::Module& m, const Tensor& x, const Tensor& y) {
        return engine::cross_entropy(static_cast<nn::ViT&>(m).forward(x), y, -100, 0.1f);
    };
    c.optimizer = [](nn::Module& m) {
        return std::make_unique<nn::Adam>(nn::param_groups(m, 0.05f), 1e-2f, 0.9f, 0.999f, 1e-8f, true);
    };
    c.batch = [](int k) {
        return std::pair{test::randn({3, 3, 8, 8}, false, 100 + k), random_ids({3}, 10, 200 + k)};
    };
    c.max_norm = 0.5f;  // small: some steps clip, some may not
    check_graph_equals_eager(c);
}

TEST_CASE("graph step: a TransformerLM with dropout and SGD equals eager steps bit for bit", "[cuda][graph]") {
    Case c;
    c.build = [] {
        nn::LMConfig l;
        l.vocab = 11;
        l.dim = 16;
        l.depth = 2;
        l.heads = 2;
        l.max_len = 16;
        l.dropout = 0.1f;
        l.attn_dropout = 0.1f;
        l.emb_dropout = 0.1f;
        return std::make_shared<nn::TransformerLM>(l);
    };
    c.loss = [](nn::Module& m, const Tensor& x, const Tensor& y) {
        return engine::cross_entropy(static_cast<nn::TransformerLM&>(m).forward(x), y);
    };
    c.optimizer = [](nn::Module& m) {
        return std::make_unique<nn::SGD>(nn::param_groups(m, 1e-4f), 1e-2f, 0.9f, true);
    };
    c.batch = [](int k) { return std::pair{random_ids({2, 7}, 11, 300 + k), random_ids({2, 7}, 11, 400 + k)}; };
    check_graph_equals_eager(c);
}

// Truncated BPTT: the state each step leaves is the next one's start, in buffers that stay
// (nn::CarriedState); the loss scaled as --loss-scale time-sum scales it (the factor from device
// memory in the graph, from the host eagerly); Zaremba's SGD and clipping, dropout.
TEST_CASE("graph step: an LSTM LM carrying its state, with a scaled backward, equals eager steps bit for bit",
          "[cuda][graph]") {
    auto state = std::make_shared<nn::CarriedState>();
    Case c;
    c.build = [state] {
        *state = nn::CarriedState();  // each run starts from zeros
        return std::make_shared<nn::LSTMLM>(nn::LSTMConfig{11, 8, 2, 0.1f, false});
    };
    c.loss = [state](nn::Module& m, const Tensor& x, const Tensor& y) {
        return engine::cross_entropy(state->forward(static_cast<nn::LSTMLM&>(m), x).reshape({-1, 11}), y.reshape({-1}));
    };
    c.optimizer = [](nn::Module& m) { return std::make_unique<nn::SGD>(nn::param_groups(m, 0.f), 1.f); };
    c.batch = [](int k) { return std::pair{random_ids({2, 6}, 11, 500 + k), random_ids({2, 6}, 11, 600 + k)}; };
    c.max_norm = 5.f;
    c.backward_scale = 6.f;  // scored tokens per row
    check_graph_equals_eager(c);
}

TEST_CASE("graph step: the backward scale must be a float32 CUDA scalar", "[cuda][graph]") {
    Tensor w = test::to_cuda(test::randn({4, 3}, true, 8));
    nn::SGD opt({nn::ParamGroup{{{"w", &w}}}}, 0.1f);
    auto loss = [] { return Tensor(); };
    for (const Tensor& bad : {Tensor::zeros({2}, engine::DType::F32, Device::CUDA), Tensor::zeros(engine::Shape{})})
        REQUIRE_THROWS_WITH(nn::GraphStep(opt, loss, {}, 0.f, bad),
                            Catch::Matchers::Contains("the backward scale must be a float32 CUDA scalar"));
    nn::GraphStep ok(opt, loss, {}, 0.f, Tensor::zeros(engine::Shape{}, engine::DType::F32, Device::CUDA));
}

TEST_CASE("graph step: a step that reads the loss on the host cannot be captured, and says so", "[cuda][graph]") {
    engine::manual_seed(1);
    Tensor w = test::to_cuda(test::randn({4, 3}, true, 5));
    Tensor x = test::to_cuda(test::randn({2, 3}, false, 6));
    nn::SGD opt({nn::ParamGroup{{{"w", &w}}}}, 0.1f);
    nn::GraphStep step(opt, [&] {
        Tensor loss = engine::sum(engine::linear(x, w));
        (void)loss.item();  // waits for the device
        return loss;
    });
    step.run();  // eager: fine
    REQUIRE_THROWS_WITH(step.run(), Catch::Matchers::Contains("cannot be captured") && Catch::Matchers::Contains("copy to host"));
}

// A captured step updates every parameter with one set of Adam scalars, so parameters whose
// update counts differ (one frozen for an earlier step) are refused, naming both, instead of
// taking the wrong bias corrections.
TEST_CASE("graph step: parameters with different update counts are refused, naming them", "[cuda][graph]") {
    engine::manual_seed(3);
    nn::LMConfig l = tiny_lm_config();
    l.tie_weights = false;
    nn::TransformerLM lm(l);
    lm.to(Device::CUDA);
    nn::Adam opt(nn::param_groups(lm, 0.f), 1e-3f);
    Tensor x = random_ids({2, 7}, 11, 1).to(Device::CUDA), y = random_ids({2, 7}, 11, 2).to(Device::CUDA);
    auto loss = [&] { return engine::cross_entropy(lm.forward(x), y); };
    lm.parameter("head.weight").requires_grad_(false);  // the first step leaves it out
    opt.zero_grad();
    loss().backward();
    opt.step();
    lm.parameter("head.weight").requires_grad_(true);
    CHECK(opt.param_steps("head.weight") == 0);
    CHECK(opt.param_steps("tok_emb.weight") == 1);
    nn::GraphStep step(opt, loss);
    step.run();  // the eager warm-up: counts 2 and 1
    CHECK_THROWS_WITH(step.run(), Catch::Contains("has taken 2 updates and head.weight 1") &&
                                      Catch::Contains("--cuda-graph off"));
}

// The ids and targets of a step are checked on the device (engine/cuda/runtime.h): a bad target
// that a captured step meets is reported at the next wait, as an eager step's is.
TEST_CASE("graph step: a target out of range in a replayed step is reported at the next wait", "[cuda][graph]") {
    engine::manual_seed(4);
    nn::TransformerLM lm(tiny_lm_config());
    lm.to(Device::CUDA);
    nn::Adam opt(nn::param_groups(lm, 0.f), 1e-3f);
    Tensor good = random_ids({2, 7}, 11, 2);
    Tensor x = random_ids({2, 7}, 11, 1).to(Device::CUDA), y = good.to(Device::CUDA);
    nn::GraphStep step(opt, [&] { return engine::cross_entropy(lm.forward(x), y); });
    step.run();
    step.run();
    REQUIRE(step.captured());
    REQUIRE(std::isfinite(step.loss().item()));

    Tensor bad = good.clone();
    bad.data_i32()[5] = 11;
    nn::copy_into(y, bad);
    step.run();
    CHECK_THROWS_WITH(step.loss().item(), Catch::Contains("cross_entropy: target 11 at position 5 is out of range "
                                                          "[0, 11)") &&
                                              Catch::Contains("found on the device"));
    nn::copy_into(y, good);
    step.run();
    CHECK(std::isfinite(step.loss().item()));  // reported once; the record is clear again
}

#ifdef ENGINE_CUDA_EMU
// An eager step on the device, forward, backward and update, does not wait for the device: the
// embedding's ids and the loss's targets are checked there (no copy back to the host).
TEST_CASE("cuda: an eager LM step through embedding and cross_entropy does not wait for the device", "[cuda]") {
    engine::manual_seed(5);
    nn::TransformerLM lm(tiny_lm_config());
    lm.to(Device::CUDA);
    nn::Adam opt(nn::param_groups(lm, 0.f), 1e-3f);
    Tensor x = random_ids({2, 7}, 11, 1).to(Device::CUDA), y = random_ids({2, 7}, 11, 2).to(Device::CUDA);
    for (int s = 0; s < 2; s++) {
        const uint64_t waits = emu::counters().host_waits;
        opt.zero_grad();
        engine::cross_entropy(lm.forward(x), y).backward();
        opt.step();
        CHECK(emu::counters().host_waits == waits);
    }
    engine::cuda::synchronize();
}
#endif
