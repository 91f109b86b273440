// tests/cuda/test_cuda_cudnn_lstm.cpp: engine::lstm_layer through cuDNN's RNN API
// (engine/cuda/cudnn_rnn.cu) against the own path (cuDNN off: one GEMM for the input projections,
// then lstm_sequence's cell kernels and cuBLAS) and against the CPU, forward (every h_t and the last
// c) and the gradient of every input (x, h0, c0, the four parameters); TF32; bf16 left to the own
// path; an LSTM LM training step with cuDNN on and off; the same bits twice; a CUDA graph replaying
// to the eager bits; in the emulated build, the stand-in's own checks. Each comparison also checks
// that cuDNN ran (cudnn_calls()), so a path that silently declined cannot pass. In a build without
// cuDNN the tests say so and pass.
//
// Tolerances: fp32 (CUDNN_FMA_MATH) atol 1e-4, rtol 1e-4: the same math summed in other orders
// (the stand-in in double), over a few steps of recurrence. TF32: both sides round their GEMM
// inputs to 10 mantissa bits but not the same operands at the same points (the own path rounds x_proj's
// inputs and each step's h·W_hhᵀ inputs; cuDNN's cell does the same sums in its own grouping), so
// they differ by about 2^-10 of the values' rms per GEMM: the bound is 4e-3·rms (as the TF32 conv
// test), and a wrong gate or time step is off by the rms itself.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include "engine/cuda/cudnn_rnn.h"
#include "engine/cuda/runtime.h"
#include "nn/lstm.h"
#include "nn/optim.h"
#include "tests/cuda/cudnn_helpers.h"
#include "tests/cuda/parity.h"
#ifdef ENGINE_CUDA_EMU
#include <cudnn.h>  // the stand-in, for the test of the stand-in itself
#endif

using engine::Device;
using engine::Tensor;
using test::CudnnLstmSwitch;
using test::CudnnSwitch;
using test::Fn;
using test::have_cudnn;
using test::PrecisionScope;
using test::randn;

namespace {

const test::Tol kTol{1e-4f, 1e-4f};

// The inputs of one layer: x [T, B, in], h0, c0 [B, H], w_ih, b_ih, w_hh, b_hh (the recurrent
// matrix scaled down so the gates do not saturate and every gradient is alive). h0 and c0 with or
// without gradients.
std::vector<Tensor> layer_inputs(int64_t T, int64_t B, int64_t in, int64_t H, bool state_grad) {
    auto scaled = [](Tensor t, float s) { return engine::mul(t, s).detach().requires_grad_(true); };
    return {randn({T, B, in}, true, 21),
            randn({B, H}, state_grad, 22),
            randn({B, H}, state_grad, 23),
            scaled(randn({4 * H, in}, false, 24), 0.4f),
            randn({4 * H}, true, 25),
            scaled(randn({4 * H, H}, false, 26), 0.3f),
            randn({4 * H}, true, 27)};
}

const Fn kLayer = [](const std::vector<Tensor>& x) {
    return engine::lstm_layer(x[0], x[1], x[2], x[3], x[4], x[5], x[6]);
};

}  // namespace

TEST_CASE("cuda cudnn lstm: lstm_layer against the own path and the CPU, forward and every gradient",
          "[cuda][cudnn]") {
    if (!have_cudnn()) return;
    CudnnLstmSwitch lstm_on(true);  // the LSTM's cuDNN path is off by default
    for (auto [T, B, in, H, state_grad] : {std::tuple<int64_t, int64_t, int64_t, int64_t, bool>{5, 3, 4, 6, true},
                                           {1, 1, 3, 2, true},
                                           {7, 2, 8, 8, false},
                                           {3, 4, 1, 5, true}}) {
        INFO("T " << T << " B " << B << " in " << in << " H " << H << " state gradients " << state_grad);
        test::check_three_ways("lstm_layer", kLayer, layer_inputs(T, B, in, H, state_grad), kTol, kTol);
    }
}

TEST_CASE("cuda cudnn lstm: TF32, and bf16 left to the own path", "[cuda][cudnn]") {
    if (!have_cudnn()) return;
    CudnnLstmSwitch lstm_on(true);  // the LSTM's cuDNN path is off by default
    const std::vector<Tensor> inputs = layer_inputs(4, 3, 8, 8, true);
    Tensor weights = randn({5, 3, 8}, false, 31);
    {
        PrecisionScope tf32(engine::cuda::GemmPrecision::tf32);
        const int64_t before = engine::cuda::cudnn_calls();
        std::vector<Tensor> with = test::run(kLayer, inputs, Device::CUDA, true, weights);
        REQUIRE(engine::cuda::cudnn_calls() == before + 2);  // forward and backward
        std::vector<Tensor> own = test::run(kLayer, inputs, Device::CUDA, false, weights);
        for (size_t i = 0; i < with.size(); i++) {
            INFO("output " << i << " (the layer's output, then the gradients of x, h0, c0, w_ih, b_ih, w_hh, b_hh)");
            test::require_close("tf32 lstm_layer: cuDNN against the own path", own[i], with[i],
                                test::Tol{std::max(2e-3f, 4e-3f * (float)test::rms(own[i])), 1e-3f});
        }
    }
    {
        PrecisionScope bf16(engine::cuda::GemmPrecision::bf16);
        CudnnSwitch on(true);
        const int64_t before = engine::cuda::cudnn_calls();
        std::vector<Tensor> in;
        for (const Tensor& t : inputs) in.push_back(t.detach().to(Device::CUDA));
        Tensor y = kLayer(in);
        REQUIRE(engine::cuda::cudnn_calls() == before);  // declined: the own bf16 GEMM path ran
        REQUIRE(y.shape() == engine::Shape({5, 3, 8}));
    }
}

TEST_CASE("cuda cudnn lstm: an LSTM LM training step with cuDNN on and off", "[cuda][cudnn]") {
    if (!have_cudnn()) return;
    CudnnLstmSwitch lstm_on(true);  // the LSTM's cuDNN path is off by default
    nn::LSTMConfig c{50, 8, 2, 0.f, false};
    Tensor ids = Tensor::empty({3, 6}, engine::DType::I32), targets = Tensor::empty({3, 6}, engine::DType::I32);
    for (int i = 0; i < 18; i++) ids.data_i32()[i] = (i * 7) % 50, targets.data_i32()[i] = (i * 11 + 3) % 50;
    ids = ids.to(Device::CUDA);
    targets = targets.to(Device::CUDA);
    struct Result {
        std::shared_ptr<nn::LSTMLM> model;
        Tensor loss;
    };
    auto step = [&](bool cudnn) {
        CudnnSwitch sw(cudnn);
        engine::manual_seed(42);
        Result r{std::make_shared<nn::LSTMLM>(c), Tensor()};
        r.model->to(Device::CUDA);
        nn::Adam opt(nn::param_groups(*r.model, 0.f), 1e-2f);
        std::vector<nn::LSTMState> state;
        // Two windows, the state carried over (detached) as in training: the second starts from a
        // non-zero h0 and c0.
        for (int window = 0; window < 2; window++) {
            nn::LSTMLM::detach(state);
            opt.zero_grad();
            r.loss = engine::cross_entropy(r.model->forward(ids, state).reshape({18, 50}), targets.reshape({18}));
            r.loss.backward();
            opt.step();
        }
        return r;
    };
    const int64_t before = engine::cuda::cudnn_calls();
    Result on = step(true);
    REQUIRE(engine::cuda::cudnn_calls() == before + 8);  // 2 layers, 2 windows, forward and backward
    Result off = step(false);
    const test::Tol tol{1e-4f, 1e-3f};
    test::require_close("LSTM LM loss", off.loss, on.loss, tol);
    auto pon = on.model->named_parameters(), poff = off.model->named_parameters();
    REQUIRE(pon.size() == poff.size());
    for (size_t i = 0; i < pon.size(); i++) {
        INFO(pon[i].name);
        test::require_close("gradient " + pon[i].name, poff[i].tensor->grad(), pon[i].tensor->grad(), tol);
        test::require_close("after two Adam steps " + pon[i].name, *poff[i].tensor, *pon[i].tensor, tol);
    }
}

TEST_CASE("cuda cudnn lstm: the same bits twice", "[cuda][cudnn]") {
    if (!have_cudnn()) return;
    CudnnLstmSwitch lstm_on(true);  // the LSTM's cuDNN path is off by default
    CudnnSwitch on(true);
    std::vector<Tensor> in;
    for (const Tensor& t : layer_inputs(6, 3, 5, 7, true)) in.push_back(test::to_cuda(t));
    test::require_same_bits_twice(in, [&] {
        Tensor y = kLayer(in);
        engine::sum(engine::mul(y, y)).backward();
        return y;
    }, "y, then the gradients of x, h0, c0, w_ih, b_ih, w_hh, b_hh");
}

TEST_CASE("cuda cudnn lstm: captured into a CUDA graph, replays to the eager bits", "[cuda][graph][cudnn]") {
    if (!have_cudnn()) return;
    CudnnLstmSwitch lstm_on(true);  // the LSTM's cuDNN path is off by default
    CudnnSwitch on(true);
    std::vector<Tensor> in;
    for (const Tensor& t : layer_inputs(4, 2, 3, 5, true)) in.push_back(test::to_cuda(t));
    Tensor loss_weights = randn({5, 2, 5}, false, 41).to(Device::CUDA);
    Tensor y_out = Tensor::zeros({5, 2, 5}, engine::DType::F32, Device::CUDA);
    auto copy_into = [](const Tensor& dst, const Tensor& src) {
        REQUIRE(dst.shape() == src.shape());
        engine::cuda::copy_on_device(dst.raw_f32(), src.raw_f32(), src.numel() * sizeof(float));
    };
    auto step = [&] {
        for (Tensor& t : in) engine::cuda::memset_zero(t.grad().raw_f32(), t.numel() * sizeof(float));
        Tensor y = kLayer(in);
        engine::sum(engine::mul(y, loss_weights)).backward();
        copy_into(y_out, y);
    };
    auto state = [&] {
        std::vector<std::vector<float>> s{y_out.to_vector()};
        for (const Tensor& t : in) s.push_back(t.grad().to_vector());
        return s;
    };
    engine::sum(engine::mul(kLayer(in), loss_weights)).backward();  // warm-up: makes the gradients
    const int64_t calls = engine::cuda::cudnn_calls();
    engine::cuda::CudaGraph g = engine::cuda::capture(step);
    REQUIRE(engine::cuda::cudnn_calls() == calls + 2);
    for (uint64_t seed : {51, 52}) {
        INFO("new input, seed " << seed);
        copy_into(in[0], randn({4, 2, 3}, false, seed).to(Device::CUDA));
        g.launch();
        std::vector<std::vector<float>> replayed = state();
        step();
        std::vector<std::vector<float>> eager = state();
        for (size_t i = 0; i < eager.size(); i++) {
            INFO("tensor " << i << " (y, then the gradients of x, h0, c0, w_ih, b_ih, w_hh, b_hh)");
            for (float v : eager[i]) REQUIRE(std::isfinite(v));
            CHECK(std::memcmp(replayed[i].data(), eager[i].data(), eager[i].size() * sizeof(float)) == 0);
        }
    }
}

TEST_CASE("cuda cudnn lstm: bad shapes are refused before cuDNN, naming the op", "[cuda][cudnn]") {
    CudnnSwitch on(true);
    CudnnLstmSwitch lstm_on(true);
    std::vector<Tensor> in;
    for (const Tensor& t : layer_inputs(2, 3, 4, 5, true)) in.push_back(t.detach().to(Device::CUDA));
    const int64_t before = engine::cuda::cudnn_calls();
    REQUIRE_THROWS_WITH(engine::lstm_layer(in[0], in[1], in[2], in[3].narrow(0, 0, 16), in[4], in[5], in[6]),
                        Catch::Contains("lstm_layer") && Catch::Contains("w_ih"));
    REQUIRE_THROWS_WITH(engine::lstm_layer(in[0], in[1].narrow(0, 0, 2), in[2], in[3], in[4], in[5], in[6]),
                        Catch::Contains("lstm_layer") && Catch::Contains("h0"));
    REQUIRE_THROWS_WITH(engine::lstm_layer(in[0], in[1], in[2], in[3], in[4], in[5], in[6].detach().to(Device::CPU)),
                        Catch::Contains("lstm_layer"));
    REQUIRE(engine::cuda::cudnn_calls() == before);
}

// The LSTM goes through cuDNN only with its own switch on (off by default: the own kernels were the
// faster on the H200) and cuDNN's: either off, the own path runs and gives the same values.
TEST_CASE("cuda cudnn lstm: the LSTM's switch, and cuDNN's, choose the path", "[cuda][cudnn]") {
    if (!have_cudnn()) return;
    const char* env = std::getenv("INITLAB_CUDNN_LSTM");
    const bool env_on = env && std::string(env) == "1";
    CHECK(engine::cuda::cudnn_lstm_enabled() == (env_on && engine::cuda::cudnn_enabled()));
    std::vector<Tensor> in;
    for (const Tensor& t : layer_inputs(3, 2, 4, 5, false)) in.push_back(t.detach().to(Device::CUDA));
    auto calls_and_output = [&](bool cudnn, bool lstm) {
        CudnnSwitch sw(cudnn);
        CudnnLstmSwitch lstm_sw(lstm);
        const int64_t before = engine::cuda::cudnn_calls();
        Tensor y = kLayer(in);
        return std::make_pair(engine::cuda::cudnn_calls() - before, y);
    };
    auto [calls_on, y_on] = calls_and_output(true, true);
    CHECK(calls_on == 1);
    for (auto [cudnn, lstm] : {std::pair<bool, bool>{true, false}, {false, true}, {false, false}}) {
        INFO("cuDNN " << cudnn << ", the LSTM's switch " << lstm);
        auto [calls, y] = calls_and_output(cudnn, lstm);
        CHECK(calls == 0);
        test::require_close("lstm_layer, own path against cuDNN", y, y_on, kTol);
    }
}

#ifdef ENGINE_CUDA_EMU
namespace {

// A single-layer LSTM's descriptors in the stand-in, made and destroyed in one scope.
struct StandIn {
    cudnnHandle_t h = nullptr;
    cudnnRNNDescriptor_t rnn = nullptr;
    cudnnDropoutDescriptor_t drop = nullptr;
    cudnnRNNDataDescriptor_t x = nullptr, y = nullptr;
    cudnnTensorDescriptor_t state = nullptr, m = nullptr, b = nullptr;
    int T, B, in, H;
    StandIn(int T_, int B_, int in_, int H_) : T(T_), B(B_), in(in_), H(H_) {
        REQUIRE(cudnnCreate(&h) == CUDNN_STATUS_SUCCESS);
        REQUIRE(cudnnCreateDropoutDescriptor(&drop) == CUDNN_STATUS_SUCCESS);
        REQUIRE(cudnnSetDropoutDescriptor(drop, h, 0.f, nullptr, 0, 0) == CUDNN_STATUS_SUCCESS);
        REQUIRE(cudnnCreateRNNDescriptor(&rnn) == CUDNN_STATUS_SUCCESS);
        REQUIRE(set_rnn(CUDNN_LSTM, CUDNN_FMA_MATH) == CUDNN_STATUS_SUCCESS);
        std::vector<int> lengths(B, T);
        REQUIRE(cudnnCreateRNNDataDescriptor(&x) == CUDNN_STATUS_SUCCESS);
        REQUIRE(cudnnCreateRNNDataDescriptor(&y) == CUDNN_STATUS_SUCCESS);
        REQUIRE(cudnnSetRNNDataDescriptor(x, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, T, B, in,
                                          lengths.data(), nullptr) == CUDNN_STATUS_SUCCESS);
        REQUIRE(cudnnSetRNNDataDescriptor(y, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, T, B, H,
                                          lengths.data(), nullptr) == CUDNN_STATUS_SUCCESS);
        for (cudnnTensorDescriptor_t* d : {&state, &m, &b}) REQUIRE(cudnnCreateTensorDescriptor(d) == CUDNN_STATUS_SUCCESS);
        const int dims[3] = {1, B, H}, strides[3] = {B * H, H, 1};
        REQUIRE(cudnnSetTensorNdDescriptor(state, CUDNN_DATA_FLOAT, 3, dims, strides) == CUDNN_STATUS_SUCCESS);
    }
    cudnnStatus_t set_rnn(cudnnRNNMode_t cell, cudnnMathType_t math) {
        return cudnnSetRNNDescriptor_v8(rnn, CUDNN_RNN_ALGO_STANDARD, cell, CUDNN_RNN_DOUBLE_BIAS, CUDNN_UNIDIRECTIONAL,
                                        CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, math, in, H, H, 1, drop,
                                        CUDNN_RNN_PADDED_IO_DISABLED);
    }
    ~StandIn() {
        cudnnDestroyRNNDescriptor(rnn);
        cudnnDestroyDropoutDescriptor(drop);
        cudnnDestroyRNNDataDescriptor(x);
        cudnnDestroyRNNDataDescriptor(y);
        for (cudnnTensorDescriptor_t d : {state, m, b}) cudnnDestroyTensorDescriptor(d);
        cudnnDestroy(h);
    }
};

}  // namespace

TEST_CASE("cuda cudnn lstm: the emulator's stand-in", "[cuda][cudnn]") {
    StandIn s(3, 2, 4, 5);
    size_t weight_bytes = 0, work_bytes = 0, reserve_bytes = 0;
    REQUIRE(cudnnGetRNNWeightSpaceSize(s.h, s.rnn, &weight_bytes) == CUDNN_STATUS_SUCCESS);
    REQUIRE(weight_bytes == sizeof(float) * (4 * 5 * (4 + 5) + 8 * 5));
    REQUIRE(cudnnGetRNNTempSpaceSizes(s.h, s.rnn, CUDNN_FWD_MODE_TRAINING, s.x, &work_bytes, &reserve_bytes) ==
            CUDNN_STATUS_SUCCESS);
    REQUIRE(reserve_bytes > 0);

    SECTION("cudnnGetRNNWeightParams: sixteen disjoint pieces that tile the weight space") {
        test::DeviceFloats space(weight_bytes / sizeof(float));
        std::vector<std::pair<size_t, size_t>> pieces;  // [first, last) in floats
        for (int id = 0; id < 8; id++) {
            void *m = nullptr, *b = nullptr;
            REQUIRE(cudnnGetRNNWeightParams(s.h, s.rnn, 0, weight_bytes, space.p, id, s.m, &m, s.b, &b) ==
                    CUDNN_STATUS_SUCCESS);
            cudnnDataType_t type;
            int nd = 0, dims[8], strides[8];
            REQUIRE(cudnnGetTensorNdDescriptor(s.m, 8, &type, &nd, dims, strides) == CUDNN_STATUS_SUCCESS);
            REQUIRE(nd == 3);
            REQUIRE(dims[0] * dims[1] * dims[2] == 5 * (id < 4 ? 4 : 5));
            const size_t mf = (size_t)(static_cast<float*>(m) - space.p), bf = (size_t)(static_cast<float*>(b) - space.p);
            pieces.push_back({mf, mf + (size_t)dims[0] * dims[1] * dims[2]});
            pieces.push_back({bf, bf + 5});
        }
        std::sort(pieces.begin(), pieces.end());
        REQUIRE(pieces.front().first == 0);
        for (size_t i = 1; i < pieces.size(); i++) REQUIRE(pieces[i].first == pieces[i - 1].second);
        REQUIRE(pieces.back().second == weight_bytes / sizeof(float));
        // Gate 1's input matrix does not follow gate 0's: code that copies w_ih in one piece is wrong here.
        void *m0, *m1, *b0;
        cudnnGetRNNWeightParams(s.h, s.rnn, 0, weight_bytes, space.p, 0, s.m, &m0, s.b, &b0);
        cudnnGetRNNWeightParams(s.h, s.rnn, 0, weight_bytes, space.p, 1, s.m, &m1, s.b, &b0);
        REQUIRE(static_cast<float*>(m1) != static_cast<float*>(m0) + 5 * 4);
    }
    SECTION("what is not modelled, and bad descriptors") {
        REQUIRE(s.set_rnn(CUDNN_GRU, CUDNN_FMA_MATH) == CUDNN_STATUS_NOT_SUPPORTED);
        REQUIRE(cudnnSetRNNDescriptor_v8(s.rnn, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM, CUDNN_RNN_DOUBLE_BIAS,
                                         CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT,
                                         CUDNN_FMA_MATH, 4, 0, 0, 1, s.drop, 0) == CUDNN_STATUS_BAD_PARAM);
        const int ragged[2] = {3, 2};
        REQUIRE(cudnnSetRNNDataDescriptor(s.x, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, 3, 2, 4, ragged,
                                          nullptr) == CUDNN_STATUS_NOT_SUPPORTED);
        // x's width must be the descriptor's input size.
        REQUIRE(cudnnGetRNNTempSpaceSizes(s.h, s.rnn, CUDNN_FWD_MODE_TRAINING, s.y, &work_bytes, &reserve_bytes) ==
                CUDNN_STATUS_BAD_PARAM);
    }
    SECTION("forward and backward: device memory, devSeqLengths, spaces, the order of the passes") {
        test::DeviceFloats x(3 * 2 * 4), y(3 * 2 * 5), dy(3 * 2 * 5), dx(3 * 2 * 4), space(weight_bytes / 4),
            dspace(weight_bytes / 4), work(work_bytes / 4), reserve(reserve_bytes / 4);
        auto* lengths = static_cast<int32_t*>(engine::cuda::alloc(sizeof(int32_t) * 2));
        engine::cuda::fill_i32(lengths, 3, 2);
        auto forward = [&](const int32_t* len, size_t reserve_size) {
            return cudnnRNNForward(s.h, s.rnn, CUDNN_FWD_MODE_TRAINING, len, s.x, x.p, s.y, y.p, s.state, nullptr,
                                   nullptr, s.state, nullptr, nullptr, weight_bytes, space.p, work_bytes, work.p,
                                   reserve_size, reserve.p);
        };
        auto weights = [&](cudnnWgradMode_t mode) {
            return cudnnRNNBackwardWeights_v8(s.h, s.rnn, mode, lengths, s.x, x.p, s.state, nullptr, s.y, y.p,
                                              weight_bytes, dspace.p, work_bytes, work.p, reserve_bytes, reserve.p);
        };
        REQUIRE(forward(lengths, reserve_bytes - 4) == CUDNN_STATUS_BAD_PARAM);  // reserve too small
        engine::cuda::fill_i32(lengths, 2, 1);                                    // lengths {2, 3}: not the descriptor's
        REQUIRE_THROWS_WITH(forward(lengths, reserve_bytes), Catch::Contains("cudnnRNNForward") &&
                                                                 Catch::Contains("devSeqLengths[0] = 2"));
        engine::cuda::fill_i32(lengths, 3, 2);
        std::vector<float> host_lengths(2, 3.f);
        REQUIRE_THROWS_WITH(forward(reinterpret_cast<const int32_t*>(host_lengths.data()), reserve_bytes),
                            Catch::Contains("devSeqLengths") && Catch::Contains("not (all) in device memory"));
        REQUIRE(forward(lengths, reserve_bytes) == CUDNN_STATUS_SUCCESS);
        REQUIRE(weights(CUDNN_WGRAD_MODE_SET) == CUDNN_STATUS_NOT_SUPPORTED);  // cuDNN 9: ADD only
        // The weight gradient before the data pass reads gate gradients that are not there yet.
        engine::cuda::memset_zero(dspace.p, weight_bytes);
        REQUIRE(weights(CUDNN_WGRAD_MODE_ADD) == CUDNN_STATUS_SUCCESS);
        std::vector<float> dw(weight_bytes / 4);
        engine::cuda::copy_to_host(dw.data(), dspace.p, weight_bytes);
        REQUIRE(std::isnan(dw[0]));
        // In order, and ADD adds: twice from zero is twice once.
        REQUIRE(cudnnRNNBackwardData_v8(s.h, s.rnn, lengths, s.y, y.p, dy.p, s.x, dx.p, s.state, nullptr, nullptr,
                                        nullptr, s.state, nullptr, nullptr, nullptr, weight_bytes, space.p, work_bytes,
                                        work.p, reserve_bytes, reserve.p) == CUDNN_STATUS_SUCCESS);
        engine::cuda::memset_zero(dspace.p, weight_bytes);
        REQUIRE(weights(CUDNN_WGRAD_MODE_ADD) == CUDNN_STATUS_SUCCESS);
        std::vector<float> once(weight_bytes / 4), twice(weight_bytes / 4);
        engine::cuda::copy_to_host(once.data(), dspace.p, weight_bytes);
        REQUIRE(weights(CUDNN_WGRAD_MODE_ADD) == CUDNN_STATUS_SUCCESS);
        engine::cuda::copy_to_host(twice.data(), dspace.p, weight_bytes);
        for (size_t i = 0; i < once.size(); i++) {
            REQUIRE(std::isfinite(once[i]));
            REQUIRE(twice[i] == 2 * once[i]);
        }
        engine::cuda::free(lengths);
    }
}
#endif
