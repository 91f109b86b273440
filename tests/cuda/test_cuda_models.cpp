// tests/cuda/test_cuda_models.cpp: every model family at a tiny size, on the CPU and on a CUDA copy
// of the same model (built twice from the same seed; the copy moved with Module::to): one training
// step gives the same loss and parameter gradients, and three AdamW steps (with gradient clipping)
// the same parameters; the attention families again with the opt-in GEMM paths on. Also
// Module::to itself and checkpoints across devices.
//
// Tolerances: loss atol 1e-5, rtol 1e-4; gradients and parameters atol 1e-4, rtol 1e-3 (a model
// chains dozens of float32 ops whose kernels add in other orders than the CPU's). One exception:
// the attention key bias. Softmax ignores a constant added to a row of logits, so that bias's
// true gradient is 0 and what the backward computes is rounding noise (~1e-9), different on each
// device; Adam divides it by its own magnitude and moves the bias by up to lr per step either
// way. After 3 steps at lr 1e-2 it is compared with atol 3·lr.
#include <catch2/catch.hpp>

#include <filesystem>
#include <unistd.h>
#include "engine/ops.h"
#include "engine/rng.h"
#include "nn/checkpoint.h"
#include "nn/convmixer.h"
#include "nn/gau.h"
#include "nn/lstm.h"
#include "nn/optim.h"
#include "nn/transformer.h"
#include "tests/cuda/parity.h"
#ifdef ENGINE_CUDA_EMU
#include <cublas_v2.h>  // the stand-in's census of GEMM operand alignment
#endif

using engine::Device;
using engine::Tensor;

namespace {

const test::Tol kLossTol{1e-5f, 1e-4f}, kTol{1e-4f, 1e-3f};

// One model family: how to build it (from the global generator), its inputs, and its loss.
struct Family {
    std::string name;
    std::function<std::shared_ptr<nn::Module>()> build;
    std::function<Tensor(nn::Module&, const Tensor& x, const Tensor& y)> loss;
    Tensor x, y;  // CPU inputs and targets
};

std::vector<Family> families() {
    std::vector<Family> out;
    engine::Generator g(5);
    auto ids = [&](engine::Shape s, int32_t vocab) {
        Tensor t = Tensor::empty(s, engine::DType::I32);
        g.randint(t.data_i32(), t.numel(), 0, vocab);
        return t;
    };
    // A ViT on 8 x 8 images, 10 classes: the config as `set` leaves it, `batch` images from `seed`,
    // cross-entropy with label smoothing `smoothing`.
    auto vit = [&](std::string name, std::function<void(nn::ViTConfig&)> set, int64_t batch, uint64_t seed,
                   float smoothing) {
        Family f;
        f.name = std::move(name);
        f.build = [set] {
            nn::ViTConfig c;
            c.image_size = 8;
            set(c);
            return std::make_shared<nn::ViT>(c);
        };
        f.loss = [smoothing](nn::Module& m, const Tensor& x, const Tensor& y) {
            return engine::cross_entropy(static_cast<nn::ViT&>(m).forward(x), y, -100, smoothing);
        };
        f.x = test::randn({batch, 3, 8, 8}, false, seed);
        f.y = ids({batch}, 10);
        return f;
    };
    out.push_back(vit("ViT", [](nn::ViTConfig& c) {
        c.patch = 4;
        c.dim = 16;
        c.depth = 2;
        c.heads = 2;
        c.pool = "cls";
    }, 3, 21, 0.1f));
    out.push_back(vit("ViT avg pool, learned positions", [](nn::ViTConfig& c) {
        c.patch = 2;
        c.dim = 16;
        c.depth = 1;
        c.heads = 4;
        c.pool = "avg";
        c.pos = "learned";
        c.layerscale = 0.1f;
    }, 2, 22, 0.f));
    // Head dim 32 and 17 tokens (16 patches and the class token): the unfused attention's GEMMs take
    // 16 keys and the softmax kernels the 17th (engine/cuda/nn.h, edge keys).
    out.push_back(vit("ViT, head dim 32, 17 tokens", [](nn::ViTConfig& c) {
        c.patch = 2;
        c.dim = 64;
        c.depth = 1;
        c.heads = 2;
    }, 2, 24, 0.f));
    for (std::string pos : {"sinusoidal", "rope"}) {
        Family f;
        f.name = "TransformerLM " + pos;
        f.build = [pos] {
            nn::LMConfig c;
            c.vocab = 11;
            c.dim = 16;
            c.depth = 2;
            c.heads = 2;
            c.max_len = 16;
            c.pos = pos;
            return std::make_shared<nn::TransformerLM>(c);
        };
        f.loss = [](nn::Module& m, const Tensor& x, const Tensor& y) {
            return engine::cross_entropy(static_cast<nn::TransformerLM&>(m).forward(x), y);
        };
        f.x = ids({2, 7}, 11);
        f.y = ids({2, 7}, 11);
        out.push_back(f);
    }
    {
        Family f;
        f.name = "GAU LM";
        f.build = [] {
            nn::GAUConfig c;
            c.vocab = 11;
            c.dim = 16;
            c.depth = 2;
            c.expansion = 32;
            c.s = 8;
            return std::make_shared<nn::GAULM>(c);
        };
        f.loss = [](nn::Module& m, const Tensor& x, const Tensor& y) {
            return engine::cross_entropy(static_cast<nn::GAULM&>(m).forward(x), y);
        };
        f.x = ids({2, 7}, 11);
        f.y = ids({2, 7}, 11);
        out.push_back(f);
    }
    {
        Family f;
        f.name = "LSTM LM";
        f.build = [] { return std::make_shared<nn::LSTMLM>(nn::LSTMConfig{11, 16, 2, 0.f, false}); };
        f.loss = [](nn::Module& m, const Tensor& x, const Tensor& y) {
            std::vector<nn::LSTMState> state;  // fresh zeros on the input's device
            return engine::cross_entropy(static_cast<nn::LSTMLM&>(m).forward(x, state), y);
        };
        f.x = ids({3, 5}, 11);
        f.y = ids({3, 5}, 11);
        out.push_back(f);
    }
    {
        Family f;
        f.name = "ConvMixer";
        f.build = [] {
            nn::ConvMixerConfig c;
            c.dim = 8;
            c.depth = 2;
            c.kernel = 3;
            c.patch = 2;
            return std::make_shared<nn::ConvMixer>(c);
        };
        f.loss = [](nn::Module& m, const Tensor& x, const Tensor& y) {
            return engine::cross_entropy(static_cast<nn::ConvMixer&>(m).forward(x), y);
        };
        f.x = test::randn({2, 3, 8, 8}, false, 23);
        f.y = ids({2}, 10);
        out.push_back(f);
    }
    return out;
}

// The same model twice: on the CPU, and built from the same seed then moved to the device.
std::pair<std::shared_ptr<nn::Module>, std::shared_ptr<nn::Module>> twins(const Family& f) {
    engine::manual_seed(42);
    auto cpu = f.build();
    engine::manual_seed(42);
    auto gpu = f.build();
    gpu->to(Device::CUDA);
    return {cpu, gpu};
}

void compare_tensors(const std::string& what, const std::vector<nn::NamedTensor>& a,
                     const std::vector<nn::NamedTensor>& b, test::Tol tol, float key_bias_atol = -1.f) {
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); i++) {
        REQUIRE(a[i].name == b[i].name);
        REQUIRE(b[i].tensor->is_cuda());
        bool key_bias = a[i].name.find("attn.k.bias") != std::string::npos;
        test::Tol t = key_bias && key_bias_atol >= 0.f ? test::Tol{key_bias_atol, 0.f} : tol;
        test::require_close(what + " " + a[i].name, *a[i].tensor, *b[i].tensor, t);
    }
}

}  // namespace

TEST_CASE("cuda: Module::to moves parameters and buffers in place", "[cuda]") {
    engine::manual_seed(1);
    nn::ConvMixerConfig c;
    c.dim = 4;
    c.depth = 1;
    c.freeze_spatial = true;
    nn::ConvMixer m(c);
    Tensor* stem_w = &m.stem->weight;
    std::vector<float> before = m.stem->weight.to_vector();
    REQUIRE(&m.to(Device::CUDA) == &m);
    REQUIRE(m.stem->weight.is_cuda());  // the member itself was replaced
    REQUIRE(&m.stem->weight == stem_w);
    REQUIRE(m.stem->weight.to_vector() == before);
    for (auto& p : m.named_parameters()) {
        INFO(p.name);
        REQUIRE(p.tensor->is_cuda());
        bool frozen = p.name.find("spatial") != std::string::npos;
        REQUIRE(p.tensor->requires_grad() == !frozen);
    }
    for (auto& b : m.named_buffers()) REQUIRE(b.tensor->is_cuda());
    m.to(Device::CPU);
    REQUIRE(!m.stem->weight.is_cuda());
    REQUIRE(m.stem->weight.requires_grad());
    REQUIRE(m.stem->weight.to_vector() == before);
}

namespace {

// One step (loss and every parameter gradient), then three AdamW steps with clipping, on the CPU
// and on the device: the same numbers within the tolerances above.
void check_trains_alike(const Family& f) {
    INFO("model " << f.name);
    auto [cpu, gpu] = twins(f);
    compare_tensors(f.name + " init", cpu->named_parameters(), gpu->named_parameters(), {0.f, 0.f});
    Tensor xg = f.x.to(Device::CUDA), yg = f.y.to(Device::CUDA);

    // One step: loss and every parameter gradient.
    Tensor lc = f.loss(*cpu, f.x, f.y), lg = f.loss(*gpu, xg, yg);
    REQUIRE(lg.is_cuda());
    test::require_close(f.name + " loss", lc, lg, kLossTol);
    lc.backward();
    lg.backward();
    auto pc = cpu->named_parameters(), pg = gpu->named_parameters();
    for (size_t i = 0; i < pc.size(); i++) {
        INFO("gradient of " << pc[i].name);
        REQUIRE(pc[i].tensor->grad().defined() == pg[i].tensor->grad().defined());
        if (!pc[i].tensor->grad().defined()) continue;
        REQUIRE(pg[i].tensor->grad().is_cuda());
        test::require_close(f.name + " grad " + pc[i].name, pc[i].tensor->grad(), pg[i].tensor->grad(), kTol);
    }

    // Three AdamW steps with clipping (the first reuses the gradients above).
    nn::Adam oc(nn::param_groups(*cpu, 0.05f), 1e-2f), og(nn::param_groups(*gpu, 0.05f), 1e-2f);
    auto params_c = cpu->parameters(), params_g = gpu->parameters();
    for (int s = 0; s < 3; s++) {
        if (s > 0) {
            oc.zero_grad();
            og.zero_grad();
            f.loss(*cpu, f.x, f.y).backward();
            f.loss(*gpu, xg, yg).backward();
        }
        float nc = nn::clip_grad_norm(params_c, 1.f), ng = nn::clip_grad_norm(params_g, 1.f);
        REQUIRE(ng == Approx(nc).epsilon(1e-3));
        oc.step();
        og.step();
    }
    compare_tensors(f.name + " after 3 AdamW steps", cpu->named_parameters(), gpu->named_parameters(), kTol,
                    3 * 1e-2f);
    compare_tensors(f.name + " buffers after 3 steps", cpu->named_buffers(), gpu->named_buffers(), kTol);
}

}  // namespace

TEST_CASE("cuda: each model family trains alike on the CPU and the device", "[cuda]") {
    const uint64_t edge = engine::cuda::attention_edge_key_calls();
    for (const Family& f : families()) check_trains_alike(f);
    CHECK(engine::cuda::attention_edge_key_calls() > edge);  // (the ViT at head dim 32)
}

// The same with the opt-in GEMM paths on (engine/cuda/matmul.h): the attention GEMMs from address
// arrays and every GEMM autotuned through cuBLASLt, on the families with attention.
TEST_CASE("cuda: model families train alike with address-array and autotuned GEMMs", "[cuda]") {
    test::PointerBatchScope pointers(true);
    test::GemmAutotuneScope tuned(true);
    const uint64_t batched = engine::cuda::pointer_batch_calls();
    const uint64_t tunings = engine::cuda::gemm_autotune_stats().tunings;
    for (const Family& f : families())
        if (f.name.rfind("ViT", 0) == 0 || f.name.rfind("TransformerLM", 0) == 0) check_trains_alike(f);
    CHECK(engine::cuda::pointer_batch_calls() > batched);
    CHECK(engine::cuda::gemm_autotune_stats().tunings > tunings);
}

#ifdef ENGINE_CUDA_EMU
namespace {

// One training step's forward and backward of a ViT on the device: `batch` 32 x 32 images, label 0.
void vit_step(const nn::ViT& vit, int64_t batch, uint64_t seed) {
    Tensor images = test::randn({batch, 3, 32, 32}, false, seed).to(Device::CUDA);
    Tensor labels = Tensor::zeros({batch}, engine::DType::I32).to(Device::CUDA);
    engine::cross_entropy(vit.forward(images), labels).backward();
}

// A ViT built from `seed`, moved to the device.
std::unique_ptr<nn::ViT> vit_on_device(const nn::ViTConfig& c, uint64_t seed) {
    engine::manual_seed(seed);
    auto vit = std::make_unique<nn::ViT>(c);
    vit->to(Device::CUDA);
    return vit;
}

}  // namespace

// ViT-Tiny's shapes (patch 2 on 32 x 32: 257 tokens; width 192, 3 heads of 64; 16 classes, a whole
// number of vectors) and an LM at 98 tokens (head dim 64, vocabulary 1000), one block, batch 1:
// every GEMM of a training step, forward and backward, allows 16-byte vectors in the emulator's
// census (cublas_v2.h's emu::gemm_vector_widths), the condition under which the H100 ran cuBLAS's
// fast kernels; without the edge keys the attention's six products a layer do not.
TEST_CASE("cuda: every GEMM of a ViT-Tiny-shaped and an LM training step allows 16-byte vectors (emulator census)",
          "[cuda]") {
    test::PrecisionScope tf32(engine::cuda::GemmPrecision::tf32);
    test::EdgeKeysScope edge;
    nn::ViTConfig vc;
    vc.patch = 2;
    vc.depth = 1;
    vc.num_classes = 16;
    auto vit = vit_on_device(vc, 7);
    nn::LMConfig lc;
    lc.vocab = 1000;
    lc.dim = 128;
    lc.depth = 1;
    lc.heads = 2;
    lc.max_len = 128;
    nn::TransformerLM lm(lc);
    lm.to(Device::CUDA);
    Tensor tokens = Tensor::zeros({1, 98}, engine::DType::I32).to(Device::CUDA);
    for (bool on : {true, false}) {
        INFO("edge keys " << on);
        engine::cuda::set_attention_edge_keys(on);
        const emu::GemmVectorWidths before = emu::gemm_vector_widths();
        vit_step(*vit, 1, 25);
        engine::cross_entropy(lm.forward(tokens), tokens).backward();
        const emu::GemmVectorWidths after = emu::gemm_vector_widths();
        CHECK(after.bytes16 > before.bytes16 + 20);
        CHECK(after.narrower() - before.narrower() == (on ? 0u : 12u));
    }
}

// docs/ROOFLINE.md section 4 lists what one Pre-LN block of the default ViT step launches (TF32,
// unfused attention, 257 tokens, 3 heads): 17 kernels and cuBLAS calls forward, 33 backward. The
// difference between a 2-block and a 1-block step, counted by the emulator, is that; a change to
// the step's launches must update the list there.
TEST_CASE("cuda: a ViT block's training step makes the 50 launches docs/ROOFLINE.md lists", "[cuda]") {
    test::PrecisionScope tf32(engine::cuda::GemmPrecision::tf32);
    auto launches = [](int64_t depth) {
        nn::ViTConfig c;
        c.patch = 2;
        c.depth = depth;
        auto vit = vit_on_device(c, 8);
        const uint64_t gemms0 = emu::gemm_vector_widths().total(), kernels0 = emu::counters().launches;
        vit_step(*vit, 2, 26);
        return emu::counters().launches - kernels0 + emu::gemm_vector_widths().total() - gemms0;
    };
    CHECK(launches(2) - launches(1) == 50);
}
#endif

TEST_CASE("cuda: checkpoints of a model on the device load on either device", "[cuda]") {
    auto fams = families();
    const Family& f = fams[0];  // ViT
    auto [cpu, gpu] = twins(f);
    nn::Adam og(nn::param_groups(*gpu, 0.05f), 1e-2f);
    f.loss(*gpu, f.x.to(Device::CUDA), f.y.to(Device::CUDA)).backward();
    og.step();  // parameters and state differ from the CPU model's now

    std::string prefix = (std::filesystem::temp_directory_path() / ("initlab-cuda-ckpt-" + std::to_string(getpid()))).string();
    nn::save_checkpoint(prefix, *gpu, &og, {{"note", "test"}});

    nn::Adam oc(nn::param_groups(*cpu, 0.05f), 1e-2f);
    nn::load_checkpoint(prefix, *cpu, &oc);  // device -> file -> CPU
    compare_tensors("loaded on the CPU", cpu->named_parameters(), gpu->named_parameters(), {0.f, 0.f});
    REQUIRE(oc.steps == 1);

    engine::manual_seed(7);
    auto other = f.build();
    other->to(Device::CUDA);
    nn::Adam oo(nn::param_groups(*other, 0.05f), 1e-2f);
    nn::load_checkpoint(prefix, *other, &oo);  // file -> device, into the existing tensors
    for (auto& p : other->named_parameters()) {
        REQUIRE(p.tensor->is_cuda());
        REQUIRE(p.tensor->requires_grad());
    }
    compare_tensors("loaded on the device", other->named_parameters(), gpu->named_parameters(), {0.f, 0.f});
    auto so = oo.state(), sg = og.state();
    for (auto& [name, t] : sg) {
        REQUIRE(so[name]->is_cuda());
        test::require_close("state " + name, *t, *so[name], {0.f, 0.f});
    }
    std::filesystem::remove(prefix + ".safetensors");
    std::filesystem::remove(prefix + ".optim.safetensors");
}
