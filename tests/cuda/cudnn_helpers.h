// tests/cuda/cudnn_helpers.h: what the cuDNN tests share (tests/cuda/test_cuda_cudnn.cpp: conv and
// batch norm; tests/cuda/test_cuda_cudnn_lstm.cpp: the LSTM): a scoped cuDNN switch (the GEMM
// precision's is test::PrecisionScope, tests/cuda/parity.h), and a run of one function with cuDNN on, off and on the CPU, outputs and gradients.
#pragma once
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>
#include "engine/cuda/cudnn.h"
#include "engine/cuda/matmul.h"
#include "engine/cuda/runtime.h"
#include "tests/cuda/parity.h"

namespace test {

// Sets the cuDNN switch for a scope.
struct CudnnSwitch {
    bool saved;
    explicit CudnnSwitch(bool on) : saved(engine::cuda::set_cudnn(on)) {}
    ~CudnnSwitch() { engine::cuda::set_cudnn(saved); }
};

// Sets the LSTM's own cuDNN switch (off by default) for a scope.
struct CudnnLstmSwitch {
    bool saved;
    explicit CudnnLstmSwitch(bool on) : saved(engine::cuda::set_cudnn_lstm(on)) {}
    ~CudnnLstmSwitch() { engine::cuda::set_cudnn_lstm(saved); }
};

inline bool have_cudnn() {
    if (!engine::cuda::cudnn_built()) WARN("this build has no cuDNN: the cuDNN path is not tested");
    return engine::cuda::cudnn_built();
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// f on fresh leaf copies of the inputs on `dev` (cuDNN on or off), with the gradients of
// L = Σ f·weights; the first entry is the output, then one gradient per input (undefined where none).
inline std::vector<Tensor> run(const Fn& f, const std::vector<Tensor>& inputs, Device dev, bool cudnn,
                               const Tensor& weights) {
    CudnnSwitch sw(cudnn);
    std::vector<Tensor> in;
    for (const Tensor& t : inputs) {
        if (!t.defined()) {
            in.push_back(t);
            continue;
        }
        Tensor c = t.detach().to(dev).clone();
        if (t.requires_grad()) c.requires_grad_(true);
        in.push_back(c);
    }
    Tensor out = f(in);
    std::vector<Tensor> result{out};
    if (weights.defined()) engine::sum(engine::mul(out, weights.to(dev))).backward();
    for (const Tensor& t : in) result.push_back(t.defined() && t.requires_grad() ? t.grad() : Tensor());
    return result;
}

// cuDNN against the own kernels and against the CPU: the output and every gradient; the cuDNN run
// must have gone through cuDNN both ways, one call for the forward and one for the backward (each
// direction chooses cuDNN on its own: a backward that declined would otherwise compare the own
// kernels with themselves).
inline void check_three_ways(const std::string& name, const Fn& f, const std::vector<Tensor>& inputs, Tol fwd,
                             Tol bwd) {
    INFO(name);
    Tensor probe = f(inputs).detach();
    engine::Generator wgen(99);
    Tensor weights = Tensor::empty(probe.shape());
    wgen.uniform(weights.data_f32(), weights.numel(), -1.f, 1.f);
    bool any_grad = false;
    for (const Tensor& t : inputs) any_grad = any_grad || (t.defined() && t.requires_grad());
    if (!any_grad) weights = Tensor();

    const int64_t calls_before = engine::cuda::cudnn_calls();
    std::vector<Tensor> with = run(f, inputs, Device::CUDA, true, weights);
    REQUIRE(engine::cuda::cudnn_calls() == calls_before + (any_grad ? 2 : 1));
    const int64_t calls_after = engine::cuda::cudnn_calls();
    std::vector<Tensor> own = run(f, inputs, Device::CUDA, false, weights);
    REQUIRE(engine::cuda::cudnn_calls() == calls_after);  // switched off: not one cuDNN call
    std::vector<Tensor> cpu = run(f, inputs, Device::CPU, false, weights);

    for (size_t i = 0; i < with.size(); i++) {
        if (!cpu[i].defined()) continue;
        const std::string what = i == 0 ? name + " forward" : name + " gradient of input " + std::to_string(i - 1);
        REQUIRE(with[i].defined());
        REQUIRE(with[i].is_cuda());
        test::Tol tol = i == 0 ? fwd : bwd;
        test::require_close(what + ": cuDNN against the own kernels", own[i], with[i], tol);
        test::require_close(what + ": cuDNN against the CPU", cpu[i], with[i], tol);
    }
}

// Zeroes the gradients of `leaves`, runs `step` (a forward and a backward, returning its output),
// twice, and requires the output and the leaves' gradients to have the same bits both times: the
// deterministic algorithms the project promises (what: the tensors' names, for the message).
inline void require_same_bits_twice(const std::vector<Tensor>& leaves, const std::function<Tensor()>& step,
                                    const std::string& what) {
    std::vector<std::vector<float>> runs[2];
    for (auto& run : runs) {
        for (const Tensor& t : leaves) Tensor(t).zero_grad();
        run.push_back(step().to_vector());
        for (const Tensor& t : leaves) run.push_back(t.grad().to_vector());
    }
    for (size_t i = 0; i < runs[0].size(); i++) {
        INFO("tensor " << i << " (" << what << ")");
        REQUIRE(runs[0][i] == runs[1][i]);
    }
}

// Device buffers of n floats (filled with 0.5) for calling the cuDNN path directly.
struct DeviceFloats {
    float* p;
    explicit DeviceFloats(size_t n) : p(static_cast<float*>(engine::cuda::alloc(sizeof(float) * n))) {
        engine::cuda::fill_f32(p, 0.5f, (int64_t)n);
    }
    ~DeviceFloats() { engine::cuda::free(p); }
};

}  // namespace test
