// engine/cuda/cudnn.cu: conv2d, depthwise conv2d and batch norm through cuDNN's legacy API
// (engine/cuda/cudnn.h). Built with the real cuDNN 9 in the nvcc build when the Makefile finds it
// (ENGINE_CUDNN), against the emulator's stand-in (engine/cuda/emu/cudnn.cpp) in the emulated build;
// without ENGINE_CUDNN every path answers false and the own kernels run.
//
// cuDNN 9 marks this API deprecated (in favour of its graph API) but ships and supports it; the
// deprecation warnings are off unless CUDNN_WARN_DEPRECATED is defined, so none are silenced here.
//
// - One cudnnHandle_t for the process, created on first use, bound to the backend's stream (so cuDNN
//   work is ordered with the kernels), never destroyed (as the cuBLAS handle). One mutex serializes
//   the handle, the caches and the calls.
// - Descriptors and the chosen algorithms are cached per geometry (and math type): the training
//   loop sees a handful of shapes. Workspaces come from the backend's stream-ordered allocator and
//   are freed right after the call is queued.
// - Determinism (the project promises bit-for-bit --resume): the algorithms come from the
//   cudnnGet*Algorithm_v7 heuristics, and the first (fastest expected) one that reports
//   CUDNN_STATUS_SUCCESS, CUDNN_DETERMINISTIC, the math we allow and a workspace of at most 1 GiB is
//   taken. That rules out CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 and CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0
//   and _3 (atomics). With none left, the own kernels run. Batch norm uses CUDNN_BATCHNORM_SPATIAL,
//   not _PERSISTENT (faster, but cuDNN documents limits on the range of values it handles); cuDNN
//   does not list its batch norm among the non-deterministic routines (PyTorch's deterministic
//   mode allows it). None of this has run on a GPU yet: the [cuda][cudnn] tests' same-bits case is
//   the check to run there.
// - Precision follows the GEMM precision of the own path (engine/cuda/matmul.h): fp32 sets
//   CUDNN_FMA_MATH (no TF32 tensor cores, which CUDNN_DEFAULT_MATH would allow on Ampere and later);
//   tf32 sets CUDNN_DEFAULT_MATH; bf16 leaves conv2d to the own kernels. Depthwise convolutions use
//   FMA math always: the own depthwise kernels are fp32 whatever the GEMM precision.
// - Batch norm semantics match the engine's (engine/ops/conv.cpp): exponentialAverageFactor is the
//   engine's momentum (running = (1 − m)·running + m·batch); the running variance is moved with the
//   unbiased batch variance, as the engine does (cuDNN's reference does not spell this out; it is
//   the convention PyTorch relies on when it hands its running_var to cuDNN, and the running-
//   statistics comparison of the [cuda][cudnn] tests checks it on a GPU); the normalization uses the
//   biased one; cuDNN's saved mean and inverse variance (1/sqrt(var + eps)) are the engine's mean
//   and rstd, so either backward can follow either forward. cuDNN needs a scale and a bias (ones and
//   zeros stand in for an absent weight or bias) and writes dx, dscale and dbias (scratch takes the
//   ones not wanted).
#include "engine/cuda/cudnn.h"

#include <atomic>
#include <cstdlib>
#include "engine/cuda/kernel.h"

#ifdef ENGINE_CUDNN
#include <array>
#include <climits>
#include <map>
#include <mutex>
#include <string>
#include "engine/cuda/cudnn_internal.h"
#include "engine/cuda/matmul.h"
#endif

namespace engine::cuda {

// On unless INITLAB_CUDNN=0 at start.
static std::atomic<bool> g_cudnn_on{[] {
    const char* s = std::getenv("INITLAB_CUDNN");
    return !(s && std::string(s) == "0");
}()};

bool cudnn_built() {
#ifdef ENGINE_CUDNN
    return true;
#else
    return false;
#endif
}
bool set_cudnn(bool on) { return g_cudnn_on.exchange(on); }
bool cudnn_enabled() { return cudnn_built() && g_cudnn_on.load(); }

// Off unless INITLAB_CUDNN_LSTM=1 at start.
static std::atomic<bool> g_cudnn_lstm_on{[] {
    const char* s = std::getenv("INITLAB_CUDNN_LSTM");
    return s && std::string(s) == "1";
}()};
bool set_cudnn_lstm(bool on) { return g_cudnn_lstm_on.exchange(on); }
bool cudnn_lstm_enabled() { return cudnn_enabled() && g_cudnn_lstm_on.load(); }

static std::atomic<int64_t> g_calls{0};
int64_t cudnn_calls() { return g_calls.load(); }

CudnnConv cudnn_conv2d_geometry(const cpu::ConvGeometry& g) {
    return {g.N, g.Cin, g.H, g.W, g.Cout, g.kh, g.kw, g.stride, g.pad, 1, g.OH, g.OW};
}
CudnnConv cudnn_depthwise_geometry(int64_t N, int64_t C, int64_t H, int64_t W, int64_t k) {
    return {N, C, H, W, C, k, k, 1, k / 2, C, H, W};
}

#ifndef ENGINE_CUDNN

bool cudnn_conv_forward(const char*, const float*, const float*, const float*, float*, const CudnnConv&) {
    return false;
}
bool cudnn_conv_backward(const char*, const float*, const float*, const float*, float*, float*, float*,
                         const CudnnConv&) {
    return false;
}
bool cudnn_batch_norm_training(const float*, const float*, const float*, float*, float*, float*, float*, float*,
                               int64_t, int64_t, int64_t, float, float) {
    return false;
}
bool cudnn_batch_norm_inference(const float*, const float*, const float*, const float*, const float*, float*,
                                int64_t, int64_t, int64_t, float) {
    return false;
}
bool cudnn_batch_norm_backward(const float*, const float*, const float*, const float*, const float*, float*, float*,
                               float*, int64_t, int64_t, int64_t, float) {
    return false;
}

#else

namespace cudnn_detail {

void check_cudnn(cudnnStatus_t st, const char* call, const std::string& where) {
    if (st != CUDNN_STATUS_SUCCESS) fail(where + ": " + call + " failed: " + cudnnGetErrorString(st));
}

std::mutex& mutex() {
    static std::mutex mu;
    return mu;
}

cudnnHandle_t handle(const std::string& where) {
    static cudnnHandle_t h = nullptr;
    if (!h) {
        cudnnHandle_t created = nullptr;
        check_cudnn(cudnnCreate(&created), "cudnnCreate", where);
        check_cudnn(cudnnSetStream(created, stream()), "cudnnSetStream", where);
        h = created;
    }
    return h;
}

void count_call() { g_calls++; }

bool fits_int(std::initializer_list<int64_t> values) {
    for (int64_t v : values)
        if (v <= 0 || v > INT_MAX) return false;
    return true;
}

}  // namespace cudnn_detail

namespace {

using namespace cudnn_detail;
constexpr size_t kMaxWorkspace = size_t(1) << 30;
const float kOne = 1.f, kZero = 0.f;

std::string conv_where(const char* op, const CudnnConv& g) {
    auto s = [](int64_t v) { return std::to_string(v); };
    return std::string(op) + " (cuDNN; input [" + s(g.N) + ", " + s(g.Cin) + ", " + s(g.H) + ", " + s(g.W) +
           "], weight [" + s(g.Cout) + ", " + s(g.groups > 0 ? g.Cin / g.groups : g.Cin) + ", " + s(g.kh) + ", " +
           s(g.kw) + "], stride " + s(g.stride) + ", padding " + s(g.pad) + ", groups " + s(g.groups) + ")";
}

// ---------------------------------------------------------------------------------------------
// Convolutions

struct ConvPlan {
    cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
    cudnnFilterDescriptor_t w = nullptr;
    cudnnConvolutionDescriptor_t conv = nullptr;
    cudnnMathType_t math;
    // Chosen on first use of each direction; ok = false: no deterministic algorithm was offered.
    bool fwd_chosen = false, fwd_ok = false, data_chosen = false, data_ok = false, filter_chosen = false,
         filter_ok = false;
    cudnnConvolutionFwdAlgo_t fwd{};
    cudnnConvolutionBwdDataAlgo_t data{};
    cudnnConvolutionBwdFilterAlgo_t filter{};
    size_t fwd_ws = 0, data_ws = 0, filter_ws = 0;
};

// The descriptors of geometry g (created into p, which the caller destroys if this throws).
void describe(ConvPlan& p, const CudnnConv& g, cudnnMathType_t math, const std::string& where) {
    p.math = math;
    check_cudnn(cudnnCreateTensorDescriptor(&p.x), "cudnnCreateTensorDescriptor", where);
    check_cudnn(cudnnCreateTensorDescriptor(&p.y), "cudnnCreateTensorDescriptor", where);
    check_cudnn(cudnnCreateTensorDescriptor(&p.bias), "cudnnCreateTensorDescriptor", where);
    check_cudnn(cudnnCreateFilterDescriptor(&p.w), "cudnnCreateFilterDescriptor", where);
    check_cudnn(cudnnCreateConvolutionDescriptor(&p.conv), "cudnnCreateConvolutionDescriptor", where);
    check_cudnn(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)g.N, (int)g.Cin, (int)g.H,
                                           (int)g.W),
                "cudnnSetTensor4dDescriptor(x)", where);
    check_cudnn(cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)g.N, (int)g.Cout, (int)g.OH,
                                           (int)g.OW),
                "cudnnSetTensor4dDescriptor(y)", where);
    check_cudnn(cudnnSetTensor4dDescriptor(p.bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, (int)g.Cout, 1, 1),
                "cudnnSetTensor4dDescriptor(bias)", where);
    const int64_t cin_per_group = g.groups > 0 ? g.Cin / g.groups : g.Cin;
    check_cudnn(cudnnSetFilter4dDescriptor(p.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, (int)g.Cout, (int)cin_per_group,
                                           (int)g.kh, (int)g.kw),
                "cudnnSetFilter4dDescriptor", where);
    check_cudnn(cudnnSetConvolution2dDescriptor(p.conv, (int)g.pad, (int)g.pad, (int)g.stride, (int)g.stride, 1, 1,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                "cudnnSetConvolution2dDescriptor", where);
    check_cudnn(cudnnSetConvolutionGroupCount(p.conv, (int)g.groups), "cudnnSetConvolutionGroupCount", where);
    check_cudnn(cudnnSetConvolutionMathType(p.conv, math), "cudnnSetConvolutionMathType", where);
    // cuDNN's own output size must be the engine's (same formula; a mismatch is a bug here).
    int n, c, h, w;
    check_cudnn(cudnnGetConvolution2dForwardOutputDim(p.conv, p.x, p.w, &n, &c, &h, &w),
                "cudnnGetConvolution2dForwardOutputDim", where);
    if (n != g.N || c != g.Cout || h != g.OH || w != g.OW)
        fail(where + ": cuDNN's output [" + std::to_string(n) + ", " + std::to_string(c) + ", " + std::to_string(h) +
             ", " + std::to_string(w) + "] is not the engine's");
}

void destroy(ConvPlan& p) {
    for (cudnnTensorDescriptor_t t : {p.x, p.y, p.bias})
        if (t) cudnnDestroyTensorDescriptor(t);
    if (p.w) cudnnDestroyFilterDescriptor(p.w);
    if (p.conv) cudnnDestroyConvolutionDescriptor(p.conv);
}

ConvPlan& conv_plan(const CudnnConv& g, cudnnMathType_t math, const std::string& where) {
    static std::map<std::array<int64_t, 13>, ConvPlan> plans;
    std::array<int64_t, 13> key{g.N, g.Cin, g.H, g.W, g.Cout, g.kh, g.kw, g.stride, g.pad, g.groups, g.OH, g.OW, math};
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    ConvPlan p;
    try {
        describe(p, g, math, where);
    } catch (...) {  // a bad geometry: nothing cached, nothing leaked
        destroy(p);
        throw;
    }
    return plans.emplace(key, p).first->second;
}

// The first deterministic, successful algorithm of the heuristics' list with an allowed math type and
// workspace (see the top of the file); false if there is none.
template <typename Perf, typename Algo>
bool pick(const Perf* perf, int returned, cudnnMathType_t math, Algo& algo) {
    for (int i = 0; i < returned; i++) {
        const Perf& p = perf[i];
        const bool math_ok = math != CUDNN_FMA_MATH || p.mathType == CUDNN_FMA_MATH || p.mathType == CUDNN_DEFAULT_MATH;
        if (p.status == CUDNN_STATUS_SUCCESS && p.determinism == CUDNN_DETERMINISTIC && math_ok &&
            p.memory <= kMaxWorkspace) {
            algo = p.algo;
            return true;
        }
    }
    return false;
}

void choose_forward(cudnnHandle_t h, ConvPlan& p, const std::string& where) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int returned = 0;
    check_cudnn(cudnnGetConvolutionForwardAlgorithm_v7(h, p.x, p.w, p.conv, p.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                       &returned, perf),
                "cudnnGetConvolutionForwardAlgorithm_v7", where);
    p.fwd_chosen = true;
    p.fwd_ok = pick(perf, returned, p.math, p.fwd);
    if (p.fwd_ok)
        check_cudnn(cudnnGetConvolutionForwardWorkspaceSize(h, p.x, p.w, p.conv, p.y, p.fwd, &p.fwd_ws),
                    "cudnnGetConvolutionForwardWorkspaceSize", where);
}

void choose_data(cudnnHandle_t h, ConvPlan& p, const std::string& where) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int returned = 0;
    check_cudnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w, p.y, p.conv, p.x,
                                                            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, perf),
                "cudnnGetConvolutionBackwardDataAlgorithm_v7", where);
    p.data_chosen = true;
    p.data_ok = pick(perf, returned, p.math, p.data);
    if (p.data_ok)
        check_cudnn(cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w, p.y, p.conv, p.x, p.data, &p.data_ws),
                    "cudnnGetConvolutionBackwardDataWorkspaceSize", where);
}

void choose_filter(cudnnHandle_t h, ConvPlan& p, const std::string& where) {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int returned = 0;
    check_cudnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.x, p.y, p.conv, p.w,
                                                              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, perf),
                "cudnnGetConvolutionBackwardFilterAlgorithm_v7", where);
    p.filter_chosen = true;
    p.filter_ok = pick(perf, returned, p.math, p.filter);
    if (p.filter_ok)
        check_cudnn(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x, p.y, p.conv, p.w, p.filter, &p.filter_ws),
                    "cudnnGetConvolutionBackwardFilterWorkspaceSize", where);
}

// Whether cuDNN takes this convolution, and with which math type (see the top of the file). Sizes
// are not validated here beyond what the int conversion needs: cuDNN validates the descriptors.
bool conv_math(const CudnnConv& g, cudnnMathType_t& math) {
    if (!fits_int({g.N, g.Cin, g.H, g.W, g.Cout, g.kh, g.kw, g.OH, g.OW}) ||
        !fits_int({g.N * g.Cin * g.H * g.W, g.N * g.Cout * g.OH * g.OW, g.Cout * g.Cin * g.kh * g.kw}))
        return false;
    if (g.groups > 1) {
        math = CUDNN_FMA_MATH;
        return true;
    }
    switch (gemm_precision()) {
        case GemmPrecision::fp32: math = CUDNN_FMA_MATH; return true;
        case GemmPrecision::tf32: math = CUDNN_DEFAULT_MATH; return true;
        case GemmPrecision::bf16: return false;
    }
    return false;
}

// ---------------------------------------------------------------------------------------------
// Batch norm: x as [N, C, S, 1], the per-channel tensors as [1, C, 1, 1].

struct BnPlan {
    cudnnTensorDescriptor_t x = nullptr, param = nullptr;
};

BnPlan& bn_plan(int64_t N, int64_t C, int64_t S, const std::string& where) {
    static std::map<std::array<int64_t, 3>, BnPlan> plans;
    std::array<int64_t, 3> key{N, C, S};
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    BnPlan p;
    check_cudnn(cudnnCreateTensorDescriptor(&p.x), "cudnnCreateTensorDescriptor", where);
    check_cudnn(cudnnCreateTensorDescriptor(&p.param), "cudnnCreateTensorDescriptor", where);
    check_cudnn(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)N, (int)C, (int)S, 1),
                "cudnnSetTensor4dDescriptor(x)", where);
    check_cudnn(cudnnSetTensor4dDescriptor(p.param, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, (int)C, 1, 1),
                "cudnnSetTensor4dDescriptor(scale, bias, mean, variance)", where);
    return plans.emplace(key, p).first->second;
}

bool bn_usable(int64_t N, int64_t C, int64_t S, float eps) {
    return fits_int({N, C, S, N * C * S}) && (double)eps >= CUDNN_BN_MIN_EPSILON;
}

std::string bn_where(int64_t N, int64_t C, int64_t S, float eps) {
    return "batch_norm (cuDNN; input [" + std::to_string(N) + ", " + std::to_string(C) + ", " + std::to_string(S) +
           "], eps " + std::to_string(eps) + ")";
}

// The weight, or ones (cuDNN needs a scale); the bias, or zeros.
const float* or_filled(const float* p, Buffer& spare, int64_t C, float value) {
    if (p) return p;
    fill_f32(spare.f(), value, C);
    return spare.f();
}

}  // namespace

bool cudnn_conv_forward(const char* op, const float* x, const float* w, const float* b, float* y, const CudnnConv& g) {
    cudnnMathType_t math;
    if (!conv_math(g, math)) return false;
    const std::string where = conv_where(op, g);
    std::lock_guard<std::mutex> lock(mutex());
    cudnnHandle_t h = handle(where);
    ConvPlan& p = conv_plan(g, math, where);
    if (!p.fwd_chosen) choose_forward(h, p, where);
    if (!p.fwd_ok) return false;
    Buffer ws(p.fwd_ws);
    check_cudnn(cudnnConvolutionForward(h, &kOne, p.x, x, p.w, w, p.conv, p.fwd, ws.p, p.fwd_ws, &kZero, p.y, y),
                "cudnnConvolutionForward", where);
    if (b) check_cudnn(cudnnAddTensor(h, &kOne, p.bias, b, &kOne, p.y, y), "cudnnAddTensor", where);
    count_call();
    return true;
}

bool cudnn_conv_backward(const char* op, const float* x, const float* w, const float* dy, float* dx, float* dw,
                         float* db, const CudnnConv& g) {
    cudnnMathType_t math;
    if (!conv_math(g, math)) return false;
    const std::string where = conv_where(op, g);
    std::lock_guard<std::mutex> lock(mutex());
    cudnnHandle_t h = handle(where);
    ConvPlan& p = conv_plan(g, math, where);
    if (dx && !p.data_chosen) choose_data(h, p, where);
    if (dw && !p.filter_chosen) choose_filter(h, p, where);
    if ((dx && !p.data_ok) || (dw && !p.filter_ok)) return false;  // the own kernels do all of it
    if (db)
        check_cudnn(cudnnConvolutionBackwardBias(h, &kOne, p.y, dy, &kZero, p.bias, db),
                    "cudnnConvolutionBackwardBias", where);
    if (dx) {
        Buffer ws(p.data_ws);
        check_cudnn(cudnnConvolutionBackwardData(h, &kOne, p.w, w, p.y, dy, p.conv, p.data, ws.p, p.data_ws, &kZero, p.x,
                                                 dx),
                    "cudnnConvolutionBackwardData", where);
    }
    if (dw) {
        Buffer ws(p.filter_ws);
        check_cudnn(cudnnConvolutionBackwardFilter(h, &kOne, p.x, x, p.y, dy, p.conv, p.filter, ws.p, p.filter_ws,
                                                   &kZero, p.w, dw),
                    "cudnnConvolutionBackwardFilter", where);
    }
    count_call();
    return true;
}

bool cudnn_batch_norm_training(const float* x, const float* weight, const float* bias, float* y,
                               float* running_mean, float* running_var, float* save_mean, float* save_rstd,
                               int64_t N, int64_t C, int64_t S, float momentum, float eps) {
    if (!bn_usable(N, C, S, eps)) return false;
    const std::string where = bn_where(N, C, S, eps);
    Buffer ones(weight ? 0 : sizeof(float) * C), zeros(bias ? 0 : sizeof(float) * C);
    const float* scale = or_filled(weight, ones, C, 1.f);
    const float* shift = or_filled(bias, zeros, C, 0.f);
    std::lock_guard<std::mutex> lock(mutex());
    cudnnHandle_t h = handle(where);
    BnPlan& p = bn_plan(N, C, S, where);
    check_cudnn(cudnnBatchNormalizationForwardTraining(h, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, p.x, x, p.x, y,
                                                       p.param, scale, shift, (double)momentum, running_mean,
                                                       running_var, (double)eps, save_mean, save_rstd),
                "cudnnBatchNormalizationForwardTraining", where);
    count_call();
    return true;
}

bool cudnn_batch_norm_inference(const float* x, const float* weight, const float* bias, const float* running_mean,
                                const float* running_var, float* y, int64_t N, int64_t C, int64_t S, float eps) {
    if (!bn_usable(N, C, S, eps)) return false;
    const std::string where = bn_where(N, C, S, eps);
    Buffer ones(weight ? 0 : sizeof(float) * C), zeros(bias ? 0 : sizeof(float) * C);
    const float* scale = or_filled(weight, ones, C, 1.f);
    const float* shift = or_filled(bias, zeros, C, 0.f);
    std::lock_guard<std::mutex> lock(mutex());
    cudnnHandle_t h = handle(where);
    BnPlan& p = bn_plan(N, C, S, where);
    check_cudnn(cudnnBatchNormalizationForwardInference(h, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, p.x, x, p.x, y,
                                                        p.param, scale, shift, running_mean, running_var, (double)eps),
                "cudnnBatchNormalizationForwardInference", where);
    count_call();
    return true;
}

bool cudnn_batch_norm_backward(const float* x, const float* dy, const float* save_mean, const float* save_rstd,
                               const float* weight, float* dx, float* dweight, float* dbias, int64_t N, int64_t C,
                               int64_t S, float eps) {
    if (!bn_usable(N, C, S, eps)) return false;
    if (!dx && !dweight && !dbias) return true;  // nothing to compute (not counted)
    const std::string where = bn_where(N, C, S, eps);
    Buffer ones(weight ? 0 : sizeof(float) * C);
    const float* scale = or_filled(weight, ones, C, 1.f);
    // cuDNN writes all three gradients: scratch for those not wanted.
    Buffer spare_dx(dx ? 0 : sizeof(float) * N * C * S), spare_dw(dweight ? 0 : sizeof(float) * C),
        spare_db(dbias ? 0 : sizeof(float) * C);
    std::lock_guard<std::mutex> lock(mutex());
    cudnnHandle_t h = handle(where);
    BnPlan& p = bn_plan(N, C, S, where);
    check_cudnn(cudnnBatchNormalizationBackward(h, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, &kOne, &kZero, p.x, x, p.x,
                                                dy, p.x, dx ? dx : spare_dx.f(), p.param, scale,
                                                dweight ? dweight : spare_dw.f(), dbias ? dbias : spare_db.f(),
                                                (double)eps, save_mean, save_rstd),
                "cudnnBatchNormalizationBackward", where);
    count_call();
    return true;
}

#endif  // ENGINE_CUDNN

}  // namespace engine::cuda
