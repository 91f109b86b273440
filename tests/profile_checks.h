// tests/profile_checks.h: the op-level profiler (engine/profile.h) on a small step, on either
// device: tests/test_profile.cpp runs it on the CPU, tests/cuda/test_cuda_profile.cpp on CUDA.
// Times are not checked against anything (machines are noisy); what is checked is what must hold
// exactly: which labels were charged, how often, with how many FLOPs and bytes, and that the
// labels of a step add up to the step.
#pragma once
#include <catch2/catch.hpp>

#include <thread>
#include "engine/ops.h"
#include "engine/profile.h"

namespace test {

inline const engine::profile::Entry* find_entry(const engine::profile::Report& r, const std::string& name,
                                                engine::profile::Phase phase) {
    for (const auto& e : r.entries)
        if (e.name == name && e.phase == phase) return &e;
    return nullptr;
}

inline void check_profile_of_a_small_step(engine::Device dev) {
    using namespace engine;
    using profile::Phase;
    const int64_t R = 6, I = 5, O = 4, C = 3;
    Tensor x = Tensor::normal({R, I}).to(dev);
    Tensor w1 = Tensor::normal({O, I}).to(dev).requires_grad_();
    Tensor w2 = Tensor::normal({C, O}).to(dev).requires_grad_();
    Tensor y = Tensor::randint({R}, 0, (int32_t)C).to(dev);
    auto step = [&] {
        profile::step_begin();
        Tensor h = gelu(linear(x, w1));
        Tensor loss = cross_entropy(matmul(h, w2, false, true), y);
        profile::boundary("between forward and backward", Phase::Outside);
        loss.backward();
        profile::step_end();
    };
    step();  // the profiler is off: nothing is collected
    REQUIRE(!profile::active());
    profile::start(dev);
    REQUIRE(profile::active());
    CHECK_THROWS_WITH(profile::start(dev), Catch::Contains("already running"));
    step();
    step();
    gelu(x);  // outside a step: not charged
    std::thread([&] {  // another thread (a data loader): not charged
        profile::step_begin();
        gelu(x);
        profile::step_end();
    }).join();
    profile::Report r = profile::stop();
    REQUIRE(!profile::active());
    REQUIRE(r.steps == 2);
    REQUIRE(r.device == dev);

    auto entry = [&](const std::string& name, Phase phase) {
        const profile::Entry* e = find_entry(r, name, phase);
        INFO(name << " (" << profile::phase_name(phase) << ")");
        REQUIRE(e != nullptr);
        CHECK(e->ms >= 0);
        return *e;
    };
    // linear: y = x·w1ᵀ (2·R·I·O FLOPs); backward only dw1 (x needs no gradient).
    auto lin_f = entry("linear", Phase::Forward), lin_b = entry("linear", Phase::Backward);
    CHECK(lin_f.calls == 2);
    CHECK(lin_f.flops == 2 * (2.0 * R * I * O));
    CHECK(lin_f.bytes == 2 * 4.0 * (R * I + O * I + R * O));
    CHECK(lin_b.calls == 2);
    CHECK(lin_b.flops == 2 * (2.0 * R * I * O));
    // matmul's backward runs two matmuls: they belong to the backward, not to matmul's forward.
    auto mm_f = entry("matmul", Phase::Forward), mm_b = entry("matmul", Phase::Backward);
    CHECK(mm_f.calls == 2);
    CHECK(mm_f.flops == 2 * (2.0 * R * O * C));
    CHECK(mm_b.calls == 2);
    CHECK(mm_b.flops == 2 * (4.0 * R * O * C));
    // gelu: no GEMM, bytes of its input and output; the two calls outside the steps are not here.
    auto gelu_f = entry("gelu", Phase::Forward);
    CHECK(gelu_f.calls == 2);
    CHECK(gelu_f.flops == 0);
    CHECK(gelu_f.bytes == 2 * 4.0 * (2 * R * O));
    CHECK(entry("cross_entropy", Phase::Forward).calls == 2);
    CHECK(entry("cross_entropy", Phase::Backward).calls == 2);
    CHECK(entry("between forward and backward", Phase::Outside).calls == 2);
    CHECK(entry("step end (sync, other)", Phase::Outside).calls == 2);
    CHECK(entry("accumulate gradients", Phase::Backward).calls > 0);
    CHECK(entry("autograd (order, release)", Phase::Backward).calls == 4);
    // Every moment of a step is charged to a label: the sum is the step, up to the clock reads
    // after the last boundary (on CUDA: device time from events against the host's clock).
    INFO("step " << r.step_ms << " ms, charged " << r.charged_ms() << " ms");
    CHECK(r.charged_ms() > 0);
    CHECK(r.charged_ms() <= r.step_ms * 1.1 + 0.05);
    CHECK(r.charged_ms() >= r.step_ms * 0.9 - 0.05);
    // Sorted by time, longest first.
    for (size_t i = 1; i < r.entries.size(); i++) CHECK(r.entries[i - 1].ms >= r.entries[i].ms);
}

}  // namespace test
