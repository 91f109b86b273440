// tests/cuda/test_cuda_cudnn.cpp: the cuDNN path (engine/cuda/cudnn.cu) against the own kernels
// (engine/cuda/conv.cu, cuDNN switched off) and the CPU, forward and every gradient, on the shapes
// ConvMixer uses: the patch-embedding conv (kernel = stride = patch, an odd image), the 1x1
// pointwise conv, depthwise k 9 and 5 with 'same' padding on odd sizes, batch 1 and > 1; batch norm
// in training (running statistics too) and eval; TF32 and bf16 precision; a whole ConvMixer training
// step with cuDNN on and off; deterministic algorithms only (the same bits twice); bad descriptors
// (engine::Error naming the op); a CUDA graph that captures the cuDNN calls and replays them to the
// eager bits; and, in the emulated build, the stand-in's own checks.
// Each comparison also checks that the cuDNN path ran (engine::cuda::cudnn_calls()), so a path that
// silently declined cannot pass. In a build without cuDNN the tests say so and pass.
//
// Tolerances: the three implementations sum in different orders (cuDNN, the stand-in in double,
// cuBLAS or OpenBLAS): conv and depthwise atol 1e-4, rtol 1e-4 (forward and gradients); batch norm
// forward and running statistics atol 1e-5, rtol 1e-4, backward atol 1e-4, rtol 1e-4; TF32 convs
// (inputs rounded to 10 mantissa bits on both sides, sums of products in another order) atol 2e-3,
// rtol 1e-3; the ConvMixer step atol 1e-4, rtol 1e-3 (as the model-family tests).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include "engine/cuda/conv.h"
#include "engine/cuda/matmul.h"
#include "engine/cuda/runtime.h"
#include "engine/error.h"
#include "nn/convmixer.h"
#include "nn/optim.h"
#include "tests/cuda/cudnn_helpers.h"
#include "tests/cuda/parity.h"
#ifdef ENGINE_CUDA_EMU
#include <cudnn.h>  // the stand-in, for the test of the stand-in itself
#endif

using Catch::Contains;
using engine::Device;
using engine::Tensor;
using test::CudnnSwitch;
using test::Fn;
using test::have_cudnn;
using test::PrecisionScope;
using test::randn;
using test::run;

namespace {

const test::Tol kConvTol{1e-4f, 1e-4f};
const test::Tol kTf32Tol{2e-3f, 1e-3f};
const test::Tol kBnFwdTol{1e-5f, 1e-4f};
const test::Tol kBnBwdTol{1e-4f, 1e-4f};
const test::Tol kModelTol{1e-4f, 1e-3f};

void check_conv(const std::string& name, int64_t N, int64_t Cin, int64_t H, int64_t W, int64_t Cout, int64_t k,
                int stride, int pad, bool bias, test::Tol tol = kConvTol) {
    Tensor x = randn({N, Cin, H, W}, true, 1), w = randn({Cout, Cin, k, k}, true, 2);
    Tensor b = bias ? randn({Cout}, true, 3) : Tensor();
    test::check_three_ways(name, [=](auto& in) { return engine::conv2d(in[0], in[1], in[2], stride, pad); }, {x, w, b}, tol,
                     tol);
}

void check_depthwise(const std::string& name, int64_t N, int64_t C, int64_t H, int64_t W, int64_t k, bool bias) {
    Tensor x = randn({N, C, H, W}, true, 4), w = randn({C, 1, k, k}, true, 5);
    Tensor b = bias ? randn({C}, true, 6) : Tensor();
    test::check_three_ways(name, [](auto& in) { return engine::depthwise_conv2d(in[0], in[1], in[2]); }, {x, w, b},
                     kConvTol, kConvTol);
}

// Batch norm three ways, each with its own copy of the same running statistics, which must agree
// afterwards too.
void check_batch_norm(const engine::Shape& shape, bool training, bool affine, bool track) {
    INFO("batch_norm " << shape.str() << " training " << training << " affine " << affine << " track " << track);
    const int64_t C = shape[1];
    Tensor x = randn(shape, true, 7);
    Tensor w = affine ? test::rand_uniform({C}, 0.5f, 1.5f, true, 8) : Tensor();
    Tensor b = affine ? randn({C}, true, 9) : Tensor();
    Tensor rm0 = track ? randn({C}, false, 10) : Tensor(), rv0 = track ? test::rand_uniform({C}, 0.5f, 2.f, false, 11)
                                                                        : Tensor();
    std::vector<Tensor> rm(3), rv(3);  // [0] CPU, [1] own kernels, [2] cuDNN
    int which = 0;
    Fn f = [&](const std::vector<Tensor>& in) {
        // Each run gets fresh running statistics on its device (the probe run included).
        Device dev = in[0].device();
        rm[which] = track ? rm0.to(dev).clone() : Tensor();
        rv[which] = track ? rv0.to(dev).clone() : Tensor();
        return engine::batch_norm(in[0], in[1], in[2], rm[which], rv[which], training, 0.1f, 1e-5f);
    };
    Tensor weights = Tensor::empty(shape);
    engine::Generator(99).uniform(weights.data_f32(), weights.numel(), -1.f, 1.f);
    const int64_t calls_before = engine::cuda::cudnn_calls();
    which = 2;
    std::vector<Tensor> with = run(f, {x, w, b}, Device::CUDA, true, weights);
    REQUIRE(engine::cuda::cudnn_calls() >= calls_before + (training ? 2 : 1));  // forward (+ backward)
    which = 1;
    std::vector<Tensor> own = run(f, {x, w, b}, Device::CUDA, false, weights);
    which = 0;
    std::vector<Tensor> cpu = run(f, {x, w, b}, Device::CPU, false, weights);
    for (size_t i = 0; i < with.size(); i++) {
        if (!cpu[i].defined()) continue;
        INFO((i == 0 ? std::string("forward") : "gradient of input " + std::to_string(i - 1)));
        test::Tol tol = i == 0 ? kBnFwdTol : kBnBwdTol;
        test::require_close("cuDNN against the own kernels", own[i], with[i], tol);
        test::require_close("cuDNN against the CPU", cpu[i], with[i], tol);
    }
    if (track) {
        test::require_close("running_mean: cuDNN against the own kernels", rm[1], rm[2], kBnFwdTol);
        test::require_close("running_var: cuDNN against the own kernels", rv[1], rv[2], kBnFwdTol);
        test::require_close("running_mean: cuDNN against the CPU", rm[0], rm[2], kBnFwdTol);
        test::require_close("running_var: cuDNN against the CPU", rv[0], rv[2], kBnFwdTol);
        if (training) REQUIRE(rv[2].to_vector() != rv0.to_vector());  // they moved
    }
}

}  // namespace

TEST_CASE("cuda cudnn: the switch", "[cuda][cudnn]") {
    const bool built = engine::cuda::cudnn_built();
    CudnnSwitch on(true);
    REQUIRE(engine::cuda::cudnn_enabled() == built);
    REQUIRE(engine::cuda::set_cudnn(false) == true);
    REQUIRE(!engine::cuda::cudnn_enabled());
    REQUIRE(engine::cuda::set_cudnn(true) == false);
    REQUIRE(engine::cuda::cudnn_enabled() == built);
}

TEST_CASE("cuda cudnn: conv2d on ConvMixer's shapes", "[cuda][cudnn]") {
    if (!have_cudnn()) return;
    // The patch embedding: kernel = stride = patch, no padding; 9x9 leaves an edge over with patch 2.
    check_conv("stem patch 2, 3 -> 8, 8x8, batch 2", 2, 3, 8, 8, 8, 2, 2, 0, true);
    check_conv("stem patch 2, 3 -> 8, 9x9 (odd), batch 1", 1, 3, 9, 9, 8, 2, 2, 0, true);
    check_conv("stem patch 3, 3 -> 5, 7x7, batch 3, no bias", 3, 3, 7, 7, 5, 3, 3, 0, false);
    // The pointwise 1x1 conv of each block.
    check_conv("pointwise 1x1, 8 -> 8, 5x5, batch 2", 2, 8, 5, 5, 8, 1, 1, 0, true);
    check_conv("pointwise 1x1, 6 -> 4, 7x7, batch 1", 1, 6, 7, 7, 4, 1, 1, 0, true);
    // A general padded, strided conv.
    check_conv("k3 s2 p1, 3 -> 7, 9x9", 2, 3, 9, 9, 7, 3, 2, 1, true);
    check_conv("k5 s1 p2, 2 -> 3, 6x5", 2, 2, 6, 5, 3, 5, 1, 2, false);
}

TEST_CASE("cuda cudnn: depthwise conv2d k 9 and 5, 'same' padding, odd sizes", "[cuda][cudnn]") {
    if (!have_cudnn()) return;
    check_depthwise("k9, 4 channels, 9x9, batch 2", 2, 4, 9, 9, 9, true);
    check_depthwise("k9, 3 channels, 7x11 (image smaller than the filter span), batch 1", 1, 3, 7, 11, 9, false);
    check_depthwise("k5, 8 channels, 5x5, batch 3", 3, 8, 5, 5, 5, true);
    check_depthwise("k5, 2 channels, 13x7, batch 1", 1, 2, 13, 7, 5, true);
    check_depthwise("k3, 5 channels, 6x6, batch 2", 2, 5, 6, 6, 3, false);
}

TEST_CASE("cuda cudnn: batch norm, training and eval, running statistics", "[cuda][cudnn]") {
    if (!have_cudnn()) return;
    for (bool affine : {true, false}) {
        check_batch_norm({2, 8, 5, 5}, true, affine, true);
        check_batch_norm({1, 4, 7, 7}, true, affine, true);  // batch 1
        check_batch_norm({3, 5, 9, 9}, true, affine, false);
        check_batch_norm({2, 8, 5, 5}, false, affine, true);
    }
    check_batch_norm({6, 3}, true, true, true);       // [N, C]
    check_batch_norm({2, 3, 11}, true, true, true);   // [N, C, L]
    check_batch_norm({2, 3, 11}, false, true, true);
}

TEST_CASE("cuda cudnn: TF32 convs, and bf16 left to the own kernels", "[cuda][cudnn]") {
    if (!have_cudnn()) return;
    {
        PrecisionScope tf32(engine::cuda::GemmPrecision::tf32);
        Tensor x = randn({2, 3, 9, 9}, true, 1), w = randn({8, 3, 3, 3}, true, 2), b = randn({8}, true, 3);
        Fn f = [](auto& in) { return engine::conv2d(in[0], in[1], in[2], 1, 1); };
        Tensor weights = randn({2, 8, 9, 9}, false, 4);
        const int64_t before = engine::cuda::cudnn_calls();
        std::vector<Tensor> with = run(f, {x, w, b}, Device::CUDA, true, weights);
        REQUIRE(engine::cuda::cudnn_calls() == before + 2);
        std::vector<Tensor> own = run(f, {x, w, b}, Device::CUDA, false, weights);
        // Each rounds its inputs to TF32 (2^-11 relative) in its own order, so the two differ by
        // about 2^-10·sqrt(K)·|term| over a K-term sum, i.e. 2^-10 of the output's rms (the GPU's
        // dw sums 162 terms: seen 0.011 apart at rms ~13). The bound is 4x that; a wrong tap or
        // channel is off by the rms itself.
        for (size_t i = 0; i < with.size(); i++) {
            INFO("output " << i);
            const float rms = (float)test::rms(own[i]);
            test::require_close("tf32 conv2d: cuDNN against the own kernels", own[i], with[i],
                                test::Tol{std::max(kTf32Tol.atol, 4e-3f * rms), kTf32Tol.rtol});
        }
    }
    {
        PrecisionScope bf16(engine::cuda::GemmPrecision::bf16);
        CudnnSwitch on(true);
        const int64_t before = engine::cuda::cudnn_calls();
        Tensor x = randn({1, 3, 4, 4}, false).to(Device::CUDA), w = randn({2, 3, 1, 1}, false).to(Device::CUDA);
        Tensor y = engine::conv2d(x, w);
        REQUIRE(engine::cuda::cudnn_calls() == before);  // declined: the own bf16 GEMM path ran
        Tensor wd = randn({3, 1, 3, 3}, false).to(Device::CUDA);
        engine::depthwise_conv2d(x, wd);  // depthwise is fp32 whatever the GEMM precision: cuDNN
        REQUIRE(engine::cuda::cudnn_calls() == before + 1);
    }
}

TEST_CASE("cuda cudnn: a ConvMixer training step with cuDNN on and off", "[cuda][cudnn]") {
    if (!have_cudnn()) return;
    auto build = [] {
        nn::ConvMixerConfig c;
        c.dim = 8;
        c.depth = 2;
        c.kernel = 5;
        c.patch = 2;
        engine::manual_seed(42);
        auto m = std::make_shared<nn::ConvMixer>(c);
        m->to(Device::CUDA);
        return m;
    };
    Tensor x = randn({3, 3, 9, 9}, false, 31).to(Device::CUDA);
    Tensor labels = Tensor::empty({3}, engine::DType::I32);
    for (int i = 0; i < 3; i++) labels.data_i32()[i] = (i * 7) % 10;
    labels = labels.to(Device::CUDA);

    struct Result {
        std::shared_ptr<nn::ConvMixer> model;
        Tensor loss;
    };
    auto step = [&](bool cudnn) {
        CudnnSwitch sw(cudnn);
        Result r{build(), Tensor()};
        nn::Adam opt(nn::param_groups(*r.model, 0.05f), 1e-2f);
        r.loss = engine::cross_entropy(r.model->forward(x), labels);
        r.loss.backward();
        opt.step();
        return r;
    };
    const int64_t before = engine::cuda::cudnn_calls();
    Result on = step(true);
    // Every conv (the stem, each block's depthwise and pointwise: 5) and every batch norm (the
    // stem's, two per block: 5) through cuDNN, once forward and once backward.
    REQUIRE(engine::cuda::cudnn_calls() == before + 2 * 5 + 2 * 5);
    Result off = step(false);
    test::require_close("ConvMixer loss", off.loss, on.loss, kModelTol);
    auto pon = on.model->named_parameters(), poff = off.model->named_parameters();
    REQUIRE(pon.size() == poff.size());
    for (size_t i = 0; i < pon.size(); i++) {
        INFO(pon[i].name);
        test::require_close("gradient " + pon[i].name, poff[i].tensor->grad(), pon[i].tensor->grad(), kModelTol);
        test::require_close("after one Adam step " + pon[i].name, *poff[i].tensor, *pon[i].tensor, kModelTol);
    }
    auto bon = on.model->named_buffers(), boff = off.model->named_buffers();
    REQUIRE(bon.size() == boff.size());
    for (size_t i = 0; i < bon.size(); i++)
        test::require_close("buffer " + bon[i].name, *boff[i].tensor, *bon[i].tensor, kModelTol);
}

TEST_CASE("cuda cudnn: deterministic algorithms only (the same bits twice)", "[cuda][cudnn]") {
    if (!have_cudnn()) return;
    CudnnSwitch on(true);
    Tensor x = randn({2, 3, 9, 9}, false, 1).to(Device::CUDA).requires_grad_(true);
    Tensor w = randn({6, 3, 3, 3}, false, 2).to(Device::CUDA).requires_grad_(true);
    Tensor wd = randn({6, 1, 5, 5}, false, 3).to(Device::CUDA).requires_grad_(true);
    Tensor bn_w = randn({6}, false, 4).to(Device::CUDA).requires_grad_(true);
    Tensor none;
    test::require_same_bits_twice({x, w, wd, bn_w}, [&] {
        Tensor y = engine::batch_norm(engine::depthwise_conv2d(engine::conv2d(x, w, Tensor(), 1, 1), wd), bn_w,
                                      Tensor(), none, none, true);
        engine::sum(engine::mul(y, y)).backward();
        return y;
    }, "y, dx, dw, d depthwise w, d bn weight");
}

TEST_CASE("cuda cudnn: a bad descriptor throws engine::Error naming the op", "[cuda][cudnn]") {
    if (!have_cudnn()) return;
    CudnnSwitch on(true);
    test::DeviceFloats x(2 * 3 * 8 * 8), w(4 * 3 * 3 * 3), y(2 * 4 * 8 * 8);
    // Stride 0 (the op itself refuses it; here the cuDNN path is called directly).
    engine::cuda::CudnnConv g{2, 3, 8, 8, 4, 3, 3, 0, 1, 1, 8, 8};
    REQUIRE_THROWS_AS(engine::cuda::cudnn_conv_forward("conv2d", x.p, w.p, nullptr, y.p, g), engine::Error);
    REQUIRE_THROWS_WITH(engine::cuda::cudnn_conv_forward("conv2d", x.p, w.p, nullptr, y.p, g),
                        Contains("conv2d (cuDNN") && Contains("cudnnSetConvolution2dDescriptor") &&
                            Contains("CUDNN_STATUS_BAD_PARAM") && Contains("stride 0"));
    // Negative padding for a depthwise conv.
    engine::cuda::CudnnConv d{2, 3, 8, 8, 3, 3, 3, 1, -1, 3, 8, 8};
    REQUIRE_THROWS_WITH(engine::cuda::cudnn_conv_backward("depthwise_conv2d", x.p, w.p, y.p, x.p, nullptr, nullptr, d),
                        Contains("depthwise_conv2d (cuDNN") && Contains("CUDNN_STATUS_BAD_PARAM"));
    // An output size that is not the convolution's (the engine's and cuDNN's formulas must agree).
    engine::cuda::CudnnConv wrong{2, 3, 8, 8, 4, 3, 3, 1, 1, 1, 7, 8};
    REQUIRE_THROWS_WITH(engine::cuda::cudnn_conv_forward("conv2d", x.p, w.p, nullptr, y.p, wrong),
                        Contains("conv2d (cuDNN") && Contains("not the engine's"));
}

// The emulator's stand-in itself: the device-memory checks, alpha/beta blending, the variation of a
// non-deterministic algorithm that the engine must never pick, and the statuses of bad parameters.
TEST_CASE("cuda cudnn: the emulator's stand-in", "[cuda][cudnn]") {
    if (!engine::cuda::emulated()) return;
    CudnnSwitch on(true);
    test::DeviceFloats w(4 * 3 * 3 * 3), y(2 * 4 * 8 * 8);
    std::vector<float> host(2 * 3 * 8 * 8, 1.f);
    engine::cuda::CudnnConv g{2, 3, 8, 8, 4, 3, 3, 1, 1, 1, 8, 8};
    REQUIRE_THROWS_WITH(engine::cuda::cudnn_conv_forward("conv2d", host.data(), w.p, nullptr, y.p, g),
                        Contains("cudnnConvolutionForward") && Contains("not (all) in device memory"));

    // conv2d with bias: y = conv(x, w) + b, where the bias is added by cudnnAddTensor with beta = 1
    // (accumulating onto the convolution): x = w = 0.5 everywhere, so an interior pixel is
    // 27·0.25 + b and a corner 12·0.25 + b.
    test::DeviceFloats x(2 * 3 * 8 * 8), b(4);
    REQUIRE(engine::cuda::cudnn_conv_forward("conv2d", x.p, w.p, b.p, y.p, g));
    std::vector<float> out(2 * 4 * 8 * 8);
    engine::cuda::copy_to_host(out.data(), y.p, sizeof(float) * out.size());
    REQUIRE(out[0] == Approx(12 * 0.25 + 0.5));       // corner: 2x2 taps of 3 channels
    REQUIRE(out[9] == Approx(27 * 0.25 + 0.5));       // (1, 1): all 3x3 taps
#ifdef ENGINE_CUDA_EMU
    // The filter gradient of a 2x3x8x8 input: ALGO_0 (non-deterministic) gives other bits on the next
    // call, ALGO_1 (deterministic) the same; so an engine that picked ALGO_0 would fail the
    // same-bits test above.
    Tensor xr = randn({2, 3, 8, 8}, false, 1).to(Device::CUDA), dyr = randn({2, 4, 8, 8}, false, 2).to(Device::CUDA);
    cudnnHandle_t h;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    REQUIRE(cudnnCreate(&h) == CUDNN_STATUS_SUCCESS);
    cudnnCreateTensorDescriptor(&xd);
    cudnnCreateTensorDescriptor(&yd);
    cudnnCreateFilterDescriptor(&wd);
    cudnnCreateConvolutionDescriptor(&cd);
    REQUIRE(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 3, 8, 8) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 4, 8, 8) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, 3, 3, 3) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
            CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetConvolutionMathType(cd, CUDNN_FMA_MATH) == CUDNN_STATUS_SUCCESS);
    auto filter_grad = [&](cudnnConvolutionBwdFilterAlgo_t algo) {
        size_t bytes = 0;
        REQUIRE(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, xd, yd, cd, wd, algo, &bytes) ==
                CUDNN_STATUS_SUCCESS);
        test::DeviceFloats ws(bytes / 4 + 1);
        const float one = 1.f, zero = 0.f;
        REQUIRE(cudnnConvolutionBackwardFilter(h, &one, xd, xr.raw_f32(), yd, dyr.raw_f32(), cd, algo, ws.p, bytes,
                                               &zero, wd, w.p) == CUDNN_STATUS_SUCCESS);
        std::vector<float> dw(4 * 3 * 3 * 3);
        engine::cuda::copy_to_host(dw.data(), w.p, sizeof(float) * dw.size());
        return dw;
    };
    REQUIRE(filter_grad(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0) != filter_grad(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0));
    REQUIRE(filter_grad(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1) == filter_grad(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1));
    // A workspace smaller than the algorithm needs is a bad parameter.
    const float one = 1.f, zero = 0.f;
    REQUIRE(cudnnConvolutionBackwardFilter(h, &one, xd, xr.raw_f32(), yd, dyr.raw_f32(), cd,
                                           CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, nullptr, 0, &zero, wd,
                                           w.p) == CUDNN_STATUS_BAD_PARAM);

    // Blending: y = alpha·conv + beta·y. beta = 0 must not read y (NaN there stays out); beta = 1
    // accumulates. x = 0.5 (DeviceFloats), w = 0.5, so pixel (1, 1) of image 0 is 27·0.25.
    test::DeviceFloats half_w(4 * 3 * 3 * 3), half_x(2 * 3 * 8 * 8);
    std::vector<float> nan_y(2 * 4 * 8 * 8, std::nanf("")), got(2 * 4 * 8 * 8);
    engine::cuda::copy_to_device(y.p, nan_y.data(), sizeof(float) * nan_y.size());
    size_t fwd_bytes = 0;
    REQUIRE(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, &fwd_bytes) ==
            CUDNN_STATUS_SUCCESS);
    test::DeviceFloats fwd_ws(fwd_bytes / 4 + 1);
    auto forward = [&](float alpha, float beta) {
        REQUIRE(cudnnConvolutionForward(h, &alpha, xd, half_x.p, wd, half_w.p, cd, CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
                                        fwd_ws.p, fwd_bytes, &beta, yd, y.p) == CUDNN_STATUS_SUCCESS);
        engine::cuda::copy_to_host(got.data(), y.p, sizeof(float) * got.size());
        return got[9];
    };
    REQUIRE(forward(1.f, 0.f) == Approx(27 * 0.25));
    REQUIRE(forward(2.f, 1.f) == Approx(27 * 0.25 * 3));  // 2·conv + the previous conv
    REQUIRE(forward(1.f, 0.5f) == Approx(27 * 0.25 * 2.5));

    // Bad parameters: the status cuDNN documents.
    cudnnTensorDescriptor_t bad;
    cudnnCreateTensorDescriptor(&bad);
    REQUIRE(cudnnSetTensor4dDescriptor(bad, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 0, 8, 8) == CUDNN_STATUS_BAD_PARAM);
    REQUIRE(cudnnSetTensor4dDescriptor(bad, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 5, 8, 8) == CUDNN_STATUS_SUCCESS);
    // x with 5 channels against a filter for 3: the channel counts do not match.
    REQUIRE(cudnnConvolutionForward(h, &one, bad, half_x.p, wd, half_w.p, cd, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, fwd_ws.p,
                                    fwd_bytes, &zero, yd, y.p) == CUDNN_STATUS_BAD_PARAM);
    REQUIRE(cudnnSetConvolutionGroupCount(cd, 0) == CUDNN_STATUS_BAD_PARAM);
    // cudnnAddTensor: A's dims must be 1 or C's.
    REQUIRE(cudnnAddTensor(h, &one, bad, half_x.p, &one, yd, y.p) == CUDNN_STATUS_BAD_PARAM);
    // Batch norm: epsilon below CUDNN_BN_MIN_EPSILON; parameters not 1xCx1x1.
    cudnnTensorDescriptor_t param;
    cudnnCreateTensorDescriptor(&param);
    REQUIRE(cudnnSetTensor4dDescriptor(param, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 3, 1, 1) == CUDNN_STATUS_SUCCESS);
    test::DeviceFloats bn_y(2 * 3 * 8 * 8), scale(3), shift(3);
    REQUIRE(cudnnBatchNormalizationForwardTraining(h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd, half_x.p, xd, bn_y.p,
                                                   param, scale.p, shift.p, 0.1, nullptr, nullptr, -1e-3, nullptr,
                                                   nullptr) == CUDNN_STATUS_BAD_PARAM);
    REQUIRE(cudnnBatchNormalizationForwardTraining(h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd, half_x.p, xd, bn_y.p,
                                                   bad, scale.p, shift.p, 0.1, nullptr, nullptr, 1e-5, nullptr,
                                                   nullptr) == CUDNN_STATUS_BAD_PARAM);
    REQUIRE(cudnnBatchNormalizationForwardTraining(h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd, half_x.p, xd, bn_y.p,
                                                   param, scale.p, shift.p, 0.1, nullptr, nullptr, 1e-5, nullptr,
                                                   nullptr) == CUDNN_STATUS_SUCCESS);
    cudnnDestroyTensorDescriptor(param);
    cudnnDestroyTensorDescriptor(bad);
    cudnnDestroyConvolutionDescriptor(cd);
    cudnnDestroyFilterDescriptor(wd);
    cudnnDestroyTensorDescriptor(yd);
    cudnnDestroyTensorDescriptor(xd);
    cudnnDestroy(h);
#endif
}

// cuDNN's work goes on the stream like kernels, so a CUDA graph captures it: conv2d (forward with
// its bias, backward data, filter and bias) and batch norm (training forward with the running
// statistics, backward; then an eval-mode forward on the moved statistics), captured and launched
// on new inputs copied in, give the bits of the same ops run eagerly on the same state. Without the
// capture of the cuDNN calls a launch would leave their outputs as whatever the graph's memory held.
TEST_CASE("cuda cudnn: captured into a CUDA graph, conv2d and batch norm replay to the eager bits",
          "[cuda][graph][cudnn]") {
    if (!have_cudnn()) return;
    CudnnSwitch on(true);
    auto leaf = [](engine::Shape s, uint64_t seed) {
        return randn(s, false, seed).to(Device::CUDA).requires_grad_(true);
    };
    Tensor x = leaf({2, 3, 9, 9}, 1), w = leaf({6, 3, 3, 3}, 2), b = leaf({6}, 3);
    Tensor bn_w = leaf({6}, 4), bn_b = leaf({6}, 5);
    Tensor rm = randn({6}, false, 6).to(Device::CUDA);
    Tensor rv = test::rand_uniform({6}, 0.5f, 2.f, false, 7).to(Device::CUDA);
    Tensor loss_weights = randn({2, 6, 5, 5}, false, 8).to(Device::CUDA);
    // What the step writes, in memory that outlives the graph's temporaries.
    Tensor y_out = Tensor::zeros({2, 6, 5, 5}, engine::DType::F32, Device::CUDA);
    Tensor eval_out = Tensor::zeros({2, 6, 5, 5}, engine::DType::F32, Device::CUDA);
    auto copy_into = [](const Tensor& dst, const Tensor& src) {
        REQUIRE(dst.shape() == src.shape());
        engine::cuda::copy_on_device(dst.raw_f32(), src.raw_f32(), src.numel() * sizeof(float));
    };
    const std::vector<Tensor*> leaves{&x, &w, &b, &bn_w, &bn_b};
    // The gradients are zeroed in place (their memory is the graph's), then accumulated into.
    auto step = [&] {
        for (Tensor* t : leaves) engine::cuda::memset_zero(t->grad().raw_f32(), t->numel() * sizeof(float));
        Tensor c = engine::conv2d(x, w, b, 2, 1);
        Tensor y = engine::batch_norm(c, bn_w, bn_b, rm, rv, true, 0.1f, 1e-5f);
        engine::sum(engine::mul(y, loss_weights)).backward();
        copy_into(y_out, y);
        copy_into(eval_out, engine::batch_norm(c.detach(), bn_w.detach(), bn_b.detach(), rm, rv, false, 0.1f, 1e-5f));
    };
    // Everything the step writes, as host copies.
    auto state = [&] {
        std::vector<std::vector<float>> s{y_out.to_vector(), eval_out.to_vector(), rm.to_vector(), rv.to_vector()};
        for (Tensor* t : leaves) s.push_back(t->grad().to_vector());
        return s;
    };
    // A warm-up that makes the gradients (an eager step with none would allocate them anew).
    engine::sum(engine::mul(engine::batch_norm(engine::conv2d(x, w, b, 2, 1), bn_w, bn_b, rm, rv, true, 0.1f, 1e-5f),
                            loss_weights))
        .backward();

    const int64_t calls = engine::cuda::cudnn_calls();
    engine::cuda::CudaGraph g = engine::cuda::capture(step);
    REQUIRE(engine::cuda::cudnn_calls() >= calls + 5);  // conv forward, backward; batch norm forward, backward, eval
    for (uint64_t seed : {11, 12}) {
        INFO("new input, seed " << seed);
        copy_into(x, randn({2, 3, 9, 9}, false, seed).to(Device::CUDA));  // the graph reads x's memory when it runs
        Tensor rm0 = rm.clone(), rv0 = rv.clone();
        g.launch();
        std::vector<std::vector<float>> replayed = state();
        copy_into(rm, rm0);  // the same state for the eager step
        copy_into(rv, rv0);
        step();
        std::vector<std::vector<float>> eager = state();
        REQUIRE(eager[2] != rm0.to_vector());  // the running statistics moved
        for (size_t i = 0; i < eager.size(); i++) {
            INFO("tensor " << i << " (y, eval-mode y, running mean, running var, then the gradients of x, w, b, "
                                   "bn weight, bn bias)");
            for (float v : eager[i]) REQUIRE(std::isfinite(v));
            REQUIRE(replayed[i].size() == eager[i].size());
            CHECK(std::memcmp(replayed[i].data(), eager[i].data(), eager[i].size() * sizeof(float)) == 0);
        }
    }
#ifdef ENGINE_CUDA_EMU
    // The stand-in checks its pointers again when the graph runs: memory freed since the capture is
    // an illegal address on a GPU, an error naming the cuDNN call here.
    Tensor in = randn({2, 3, 9, 9}, false, 13).to(Device::CUDA);
    engine::cuda::CudaGraph g2 =
        engine::cuda::capture([&] { copy_into(y_out, engine::conv2d(in, w.detach(), Tensor(), 2, 1)); });
    g2.launch();
    in = Tensor();
    REQUIRE_THROWS_WITH(g2.launch(), Contains("cudnnConvolutionForward") && Contains("not (all) in device memory") &&
                                          Contains("cudaGraphLaunch"));
#endif
}
