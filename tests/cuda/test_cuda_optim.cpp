// tests/cuda/test_cuda_optim.cpp: the optimizers' updates and the gradient norm on the device
// against the CPU (engine/cpu/optim.h is the reference: the same loops as before the kernels).
// Each test runs the same parameters and gradients through a CPU optimizer and a CUDA one.
//
// Tolerances: parameters and state after 3 steps atol 1e-6, rtol 1e-5 (float32 updates; nvcc may
// contract a·b + c into one FMA, the CPU build does not); gradient norms rtol 1e-6 (both sum in
// double, in different orders).
#include <catch2/catch.hpp>

#include <cmath>
#include "apps/common/run.h"
#include "engine/multi_tensor.h"
#include "engine/ops.h"
#include "nn/optim.h"
#include "tests/cuda/parity.h"
#ifdef ENGINE_CUDA_EMU
#include <cuda_runtime.h>  // the emulator's launch counter
#endif

using engine::Device;
using engine::Tensor;

namespace {

// Parameters of shapes that cover one element, odd sizes, and more than one block of the
// reductions; gradients for 3 steps, drawn once (CPU), copied to the device for the CUDA run.
struct Problem {
    std::vector<engine::Shape> shapes{{1}, {7, 33}, {1025}, {70, 300}};
    std::vector<Tensor> init;                 // CPU parameter values
    std::vector<std::vector<Tensor>> grads;   // [step][param]
    Problem() { draw(); }
    explicit Problem(std::vector<engine::Shape> s) : shapes(std::move(s)) { draw(); }
    void draw() {
        for (size_t i = 0; i < shapes.size(); i++) init.push_back(test::randn(shapes[i], false, 100 + i));
        for (int s = 0; s < 3; s++) {
            grads.emplace_back();
            for (size_t i = 0; i < shapes.size(); i++) grads.back().push_back(test::randn(shapes[i], false, 200 + 10 * s + i));
        }
    }
};

// One copy of the parameters on a device, in two groups (decayed, not decayed with an lr scale).
struct Params {
    std::vector<Tensor> t;
    Params(const Problem& p, Device dev) {
        for (auto& x : p.init) t.push_back(x.clone().to(dev).requires_grad_(true));
    }
    std::vector<nn::ParamGroup> groups(float wd) {
        nn::ParamGroup a, b;
        a.weight_decay = wd;
        b.lr_scale = 0.5f;
        for (size_t i = 0; i < t.size(); i++) {
            std::string name = std::to_string(i);
            name.insert(0, 1, 'p');  // (not "p" + ...: GCC 12 warns falsely with -Wrestrict on that)
            (i % 2 ? b : a).params.push_back({name, &t[i]});
        }
        return {a, b};
    }
    void set_grads(const std::vector<Tensor>& g, Device dev, bool skip_last = false) {
        for (size_t i = 0; i < t.size(); i++) {
            t[i].zero_grad();
            if (skip_last && i + 1 == t.size()) continue;  // a parameter without a gradient is left alone
            t[i].set_grad(g[i].to(dev));
        }
    }
};

void run_both(const std::function<std::unique_ptr<nn::Optimizer>(Params&)>& make, const std::string& what,
              const Problem& prob = Problem()) {
    INFO(what);
    Params cpu(prob, Device::CPU), gpu(prob, Device::CUDA);
    auto opt_cpu = make(cpu), opt_gpu = make(gpu);
    for (int s = 0; s < 3; s++) {
        cpu.set_grads(prob.grads[s], Device::CPU, s == 1);
        gpu.set_grads(prob.grads[s], Device::CUDA, s == 1);
        opt_cpu->step();
        opt_gpu->step();
    }
    test::Tol tol{1e-6f, 1e-5f};
    for (size_t i = 0; i < cpu.t.size(); i++) {
        REQUIRE(gpu.t[i].is_cuda());
        test::require_close(what + " parameter " + std::to_string(i), cpu.t[i], gpu.t[i], tol);
    }
    auto sc = opt_cpu->state(), sg = opt_gpu->state();
    REQUIRE(sc.size() == sg.size());
    for (auto& [name, t] : sc) {
        REQUIRE(sg.count(name));
        REQUIRE(sg[name]->is_cuda());
        test::require_close(what + " state " + name, *t, *sg[name], tol);
    }
}

}  // namespace

TEST_CASE("cuda: SGD steps match the CPU (plain, momentum, Nesterov, weight decay)", "[cuda]") {
    run_both([](Params& p) { return std::make_unique<nn::SGD>(p.groups(0.f), 0.1f); }, "sgd");
    run_both([](Params& p) { return std::make_unique<nn::SGD>(p.groups(0.01f), 0.1f, 0.9f); }, "sgd momentum wd");
    run_both([](Params& p) { return std::make_unique<nn::SGD>(p.groups(0.01f), 0.1f, 0.9f, true); }, "sgd nesterov");
}

TEST_CASE("cuda: Adam and AdamW steps match the CPU", "[cuda]") {
    run_both([](Params& p) { return std::make_unique<nn::Adam>(p.groups(0.05f), 1e-2f, 0.9f, 0.999f, 1e-8f, true); },
             "adamw");
    run_both([](Params& p) { return std::make_unique<nn::Adam>(p.groups(0.05f), 1e-2f, 0.8f, 0.99f, 1e-3f, false); },
             "adam (L2)");
}

TEST_CASE("cuda: Adam over three lists of tensors gives the CPU result in one launch per list", "[cuda]") {
    // 2·kMaxListTensors + 5 tensors of sizes 1 .. 300 (and one of 1025): three lists, three launches.
    std::vector<engine::Shape> shapes;
    for (int i = 0; i < 2 * engine::kMaxListTensors + 5; i++) shapes.push_back({1 + (i * 37) % 300});
    shapes[10] = {1025};
    Problem prob(shapes);
    run_both([](Params& p) { return std::make_unique<nn::Adam>(p.groups(0.05f), 1e-2f, 0.9f, 0.999f, 1e-8f, true); },
             "adamw, 77 tensors", prob);
#ifdef ENGINE_CUDA_EMU
    Params gpu(prob, Device::CUDA);
    nn::Adam adam(gpu.groups(0.05f), 1e-2f);
    gpu.set_grads(prob.grads[0], Device::CUDA);
    uint64_t before = emu::counters().launches;
    adam.step();
    CHECK(emu::counters().launches - before == 3);
    before = emu::counters().launches;
    float norm = nn::grad_norm(gpu.t);
    CHECK(norm > 0);
    CHECK(emu::counters().launches - before <= 6);  // per list: partial sums (+ the final sum when >1 block)
#endif
}

TEST_CASE("cuda: SGD and gradient clipping over three lists give the CPU result in one launch per list", "[cuda]") {
    std::vector<engine::Shape> shapes;
    for (int i = 0; i < 2 * engine::kMaxListTensors + 5; i++) shapes.push_back({1 + (i * 53) % 400});
    shapes[40] = {1500};
    Problem prob(shapes);
    run_both([](Params& p) { return std::make_unique<nn::SGD>(p.groups(0.01f), 0.1f, 0.9f, true); },
             "sgd nesterov, 77 tensors", prob);
    // Clipping: the same scaled gradients on both devices.
    Params cpu(prob, Device::CPU), gpu(prob, Device::CUDA);
    cpu.set_grads(prob.grads[0], Device::CPU);
    gpu.set_grads(prob.grads[0], Device::CUDA);
    float norm_cpu = nn::clip_grad_norm(cpu.t, 1.f);
#ifdef ENGINE_CUDA_EMU
    uint64_t before = emu::counters().launches;
#endif
    float norm_gpu = nn::clip_grad_norm(gpu.t, 1.f);
#ifdef ENGINE_CUDA_EMU
    CHECK(emu::counters().launches - before <= 6 + 3);  // the norm's reductions, then one scale per list
#endif
    REQUIRE(norm_cpu > 1.f);
    CHECK(norm_gpu == Approx(norm_cpu).epsilon(1e-6));
    for (size_t i = 0; i < cpu.t.size(); i++)
        test::require_close("clipped gradient " + std::to_string(i), cpu.t[i].grad(), gpu.t[i].grad(),
                            test::Tol{1e-7f, 1e-6f});
    CHECK(nn::grad_norm(gpu.t) == Approx(1.f).epsilon(1e-5));
#ifdef ENGINE_CUDA_EMU
    nn::SGD sgd(gpu.groups(0.f), 0.1f);
    before = emu::counters().launches;
    sgd.step();
    CHECK(emu::counters().launches - before == 3);
#endif
}

TEST_CASE("cuda: optimizer state is made on the parameters' device", "[cuda]") {
    Problem prob;
    Params gpu(prob, Device::CUDA);
    nn::Adam adam(gpu.groups(0.f), 1e-3f);
    for (auto& [name, t] : adam.state()) REQUIRE(t->is_cuda());
    nn::SGD sgd(gpu.groups(0.f), 1e-3f, 0.9f);
    for (auto& [name, t] : sgd.state()) REQUIRE(t->is_cuda());
}

TEST_CASE("cuda: an optimizer built before the move says so", "[cuda]") {
    Problem prob;
    Params p(prob, Device::CPU);
    nn::Adam adam(p.groups(0.f), 1e-3f);
    for (auto& t : p.t) t = t.detach().to(Device::CUDA).requires_grad_(true);  // moved after the optimizer
    p.set_grads(prob.grads[0], Device::CUDA);
    REQUIRE_THROWS_WITH(adam.step(), Catch::Contains("build the optimizer after moving the model"));
}

TEST_CASE("cuda: gradient norm and clipping match the CPU", "[cuda]") {
    Problem prob;
    Params cpu(prob, Device::CPU), gpu(prob, Device::CUDA);
    cpu.set_grads(prob.grads[0], Device::CPU, true);
    gpu.set_grads(prob.grads[0], Device::CUDA, true);
    float n_cpu = nn::grad_norm(cpu.t), n_gpu = nn::grad_norm(gpu.t);
    REQUIRE(n_cpu > 1.f);
    REQUIRE(std::fabs(n_gpu - n_cpu) <= 1e-6f * n_cpu);
    REQUIRE(nn::grad_norm(gpu.t) == n_gpu);  // deterministic: the same bits again

    // Not clipped (max above the norm): the gradients stay as they are.
    REQUIRE(nn::clip_grad_norm(gpu.t, 2.f * n_cpu) == n_gpu);
    for (size_t i = 0; i + 1 < gpu.t.size(); i++)
        test::require_close("unclipped grad", prob.grads[0][i], gpu.t[i].grad(), {0.f, 0.f});

    // Clipped to 1: the norm before is returned, and the gradients are scaled alike on both.
    float c_cpu = nn::clip_grad_norm(cpu.t, 1.f), c_gpu = nn::clip_grad_norm(gpu.t, 1.f);
    REQUIRE(std::fabs(c_gpu - c_cpu) <= 1e-6f * c_cpu);
    for (size_t i = 0; i + 1 < gpu.t.size(); i++)
        test::require_close("clipped grad " + std::to_string(i), cpu.t[i].grad(), gpu.t[i].grad(), {1e-7f, 1e-5f});
    REQUIRE(std::fabs(nn::grad_norm(gpu.t) - 1.f) < 1e-4f);
    REQUIRE(!gpu.t.back().grad().defined());

    // No gradients at all: norm 0.
    for (auto& t : gpu.t) t.zero_grad();
    REQUIRE(nn::grad_norm(gpu.t) == 0.f);
}

TEST_CASE("cuda: the gradient norm over several lists of tensors matches the CPU", "[cuda]") {
    std::vector<engine::Shape> shapes;
    for (int i = 0; i < engine::kMaxListTensors + 3; i++) shapes.push_back({1 + (i * 53) % 700});
    shapes[0] = {1 << 17};  // more than one block in the first list's reduction
    Problem prob(shapes);
    Params cpu(prob, Device::CPU), gpu(prob, Device::CUDA);
    cpu.set_grads(prob.grads[0], Device::CPU);
    gpu.set_grads(prob.grads[0], Device::CUDA);
    double ref = 0;
    for (auto& g : prob.grads[0])
        for (float v : g.to_vector()) ref += (double)v * v;
    float n_cpu = nn::grad_norm(cpu.t), n_gpu = nn::grad_norm(gpu.t);
    CHECK(n_cpu == Approx(std::sqrt(ref)).epsilon(1e-6));
    CHECK(n_gpu == Approx(std::sqrt(ref)).epsilon(1e-6));
    CHECK(nn::grad_norm(gpu.t) == n_gpu);  // the same bits again
}

TEST_CASE("cuda: the sum of squares over more blocks than the first pass launches", "[cuda]") {
    // 2^18 elements: the first pass is capped at 512 blocks of 256 threads, each looping twice.
    int64_t n = 1 << 18;
    Tensor g = Tensor::full({n}, 0.5f);
    Tensor p = Tensor::zeros({n}).to(Device::CUDA).requires_grad_(true);
    p.set_grad(g.to(Device::CUDA));
    REQUIRE(nn::grad_norm({p}) == Approx(std::sqrt(0.25 * n)).epsilon(1e-7));
}

#ifdef ENGINE_CUDA_EMU
// apps::backward_and_update, the trainers' eager step after the forward: on the device the
// gradients are clipped there, and the host waits for the device (the emulator counts it) only
// when a logged step asks for the norm. Loss Σᵢ Σ pᵢ·gᵢ makes each gradient the problem's gᵢ.
TEST_CASE("cuda: an eager step clips on the device and waits for it only for a logged norm", "[cuda]") {
    Problem prob;
    Params cpu(prob, Device::CPU), gpu(prob, Device::CUDA);
    nn::Adam opt_cpu(cpu.groups(0.05f), 1e-2f), opt_gpu(gpu.groups(0.05f), 1e-2f);
    for (int s = 0; s < 3; s++) {
        auto loss_of = [&](Params& p, Device dev) {
            Tensor loss;
            for (size_t i = 0; i < p.t.size(); i++) {
                p.t[i].zero_grad();
                Tensor term = engine::sum(engine::mul(p.t[i], prob.grads[s][i].to(dev)));
                loss = loss.defined() ? engine::add(loss, term) : term;
            }
            return loss;
        };
        Tensor loss_cpu = loss_of(cpu, Device::CPU), loss_gpu = loss_of(gpu, Device::CUDA);
        const bool logged = s == 1;
        INFO("step " << s << (logged ? " (logged)" : ""));
        const uint64_t waits = emu::counters().host_waits;
        const float norm_gpu = apps::backward_and_update(loss_gpu, gpu.t, opt_gpu, 1.f, logged);
        CHECK(emu::counters().host_waits - waits == (logged ? 1u : 0u));
        const float norm_cpu = apps::backward_and_update(loss_cpu, cpu.t, opt_cpu, 1.f, logged);
        REQUIRE(norm_cpu > 1.f);  // clipped
        if (logged) CHECK(std::fabs(norm_gpu - norm_cpu) <= 1e-6f * norm_cpu);
        else CHECK(norm_gpu == 0.f);
    }
    for (size_t i = 0; i < cpu.t.size(); i++)
        test::require_close("parameter " + std::to_string(i), cpu.t[i], gpu.t[i], {1e-6f, 1e-5f});
}
#endif
