// engine/cuda/cudnn_rnn.cu: one LSTM layer through cuDNN's RNN API (cudnnRNNForward,
// cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8); engine/cuda/cudnn_rnn.h says what each
// entry point computes and when it is taken. Built against the real cuDNN 9 in the nvcc build, the
// emulator's stand-in (engine/cuda/emu/cudnn_rnn.cpp) in the emulated build.
//
// - The layer is cuDNN's CUDNN_LSTM cell, one unidirectional layer with a linear input, two biases
//   (CUDNN_RNN_DOUBLE_BIAS: b_ih and b_hh, as PyTorch and the own path), no projection, no
//   clipping, CUDNN_RNN_ALGO_STANDARD. Data is SEQ_MAJOR_PACKED with every sequence T long: x, y as
//   the engine's contiguous [T, B, ·]; hx, cx, cy as [1, B, H]. hy is not asked for: it is y's last
//   step, and its gradient arrives through dy.
// - The descriptors and space sizes are cached per (T, B, in, H, math type), under the handle's
//   mutex (engine/cuda/cudnn_internal.h). The work space comes from the stream-ordered allocator
//   per call; the weight and reserve spaces are the caller's (kept between forward and backward).
// - cuDNN wants the sequence lengths in device memory too (devSeqLengths, read by its kernels
//   after the call returns): filled by a kernel per call, so a CUDA graph records it.
// - The backward calls cudnnRNNBackwardData_v8 (dx, dhx, dcx; it also leaves in the reserve space
//   what the weight gradient needs) and then cudnnRNNBackwardWeights_v8, which only adds
//   (CUDNN_WGRAD_MODE_ADD) into a zeroed gradient weight space.
// - None of this has run on a GPU yet: the [cuda][cudnn] LSTM tests against the own path are the
//   check to run there.
#include "engine/cuda/cudnn_rnn.h"

#include "engine/cuda/cudnn.h"
#include "engine/cuda/kernel.h"

#ifdef ENGINE_CUDNN
#include <array>
#include <map>
#include <mutex>
#include <string>
#include <vector>
#include "engine/cuda/cudnn_internal.h"
#include "engine/cuda/matmul.h"
#endif

namespace engine::cuda {

#ifndef ENGINE_CUDNN

bool cudnn_lstm_sizes(const CudnnLstm&, CudnnLstmSizes&) { return false; }
void cudnn_lstm_forward(const CudnnLstm&, const float*, const float*, const float*, const float*, const float*,
                        const float*, const float*, void*, float*, void*) {
    fail("cudnn_lstm_forward: this build has no cuDNN");
}
void cudnn_lstm_backward(const CudnnLstm&, const float*, const float*, const float*, const void*, const float*,
                         const float*, void*, float*, float*, float*, float*, float*, float*, float*) {
    fail("cudnn_lstm_backward: this build has no cuDNN");
}

#else

namespace {

using namespace cudnn_detail;

std::string lstm_where(const char* call, const CudnnLstm& g) {
    auto s = [](int64_t v) { return std::to_string(v); };
    return std::string(call) + " (cuDNN LSTM; x [" + s(g.T) + ", " + s(g.B) + ", " + s(g.in) + "], hidden " + s(g.H) +
           ")";
}

struct LstmPlan {
    cudnnRNNDescriptor_t rnn = nullptr;
    cudnnDropoutDescriptor_t dropout = nullptr;
    cudnnRNNDataDescriptor_t x = nullptr, y = nullptr;
    cudnnTensorDescriptor_t state = nullptr;             // hx, cx, cy and their gradients: [1, B, H]
    cudnnTensorDescriptor_t matrix = nullptr, bias = nullptr;  // written by cudnnGetRNNWeightParams
    size_t weight_bytes = 0, work_bytes = 0, reserve_bytes = 0;
};

void destroy(LstmPlan& p) {
    if (p.rnn) cudnnDestroyRNNDescriptor(p.rnn);
    if (p.dropout) cudnnDestroyDropoutDescriptor(p.dropout);
    for (cudnnRNNDataDescriptor_t d : {p.x, p.y})
        if (d) cudnnDestroyRNNDataDescriptor(d);
    for (cudnnTensorDescriptor_t d : {p.state, p.matrix, p.bias})
        if (d) cudnnDestroyTensorDescriptor(d);
}

void describe(cudnnHandle_t h, LstmPlan& p, const CudnnLstm& g, cudnnMathType_t math, const std::string& where) {
    const int T = (int)g.T, B = (int)g.B, in = (int)g.in, H = (int)g.H;
    check_cudnn(cudnnCreateDropoutDescriptor(&p.dropout), "cudnnCreateDropoutDescriptor", where);
    // Dropout 0 and no random states: cuDNN applies dropout between layers, and there is one layer.
    check_cudnn(cudnnSetDropoutDescriptor(p.dropout, h, 0.f, nullptr, 0, 0), "cudnnSetDropoutDescriptor", where);
    check_cudnn(cudnnCreateRNNDescriptor(&p.rnn), "cudnnCreateRNNDescriptor", where);
    check_cudnn(cudnnSetRNNDescriptor_v8(p.rnn, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM, CUDNN_RNN_DOUBLE_BIAS,
                                         CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT,
                                         math, in, H, H, 1, p.dropout, CUDNN_RNN_PADDED_IO_DISABLED),
                "cudnnSetRNNDescriptor_v8", where);
    const std::vector<int> lengths(B, T);
    check_cudnn(cudnnCreateRNNDataDescriptor(&p.x), "cudnnCreateRNNDataDescriptor", where);
    check_cudnn(cudnnSetRNNDataDescriptor(p.x, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, T, B, in,
                                          lengths.data(), nullptr),
                "cudnnSetRNNDataDescriptor(x)", where);
    check_cudnn(cudnnCreateRNNDataDescriptor(&p.y), "cudnnCreateRNNDataDescriptor", where);
    check_cudnn(cudnnSetRNNDataDescriptor(p.y, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, T, B, H,
                                          lengths.data(), nullptr),
                "cudnnSetRNNDataDescriptor(y)", where);
    const int dims[3] = {1, B, H}, strides[3] = {B * H, H, 1};
    check_cudnn(cudnnCreateTensorDescriptor(&p.state), "cudnnCreateTensorDescriptor", where);
    check_cudnn(cudnnSetTensorNdDescriptor(p.state, CUDNN_DATA_FLOAT, 3, dims, strides),
                "cudnnSetTensorNdDescriptor(h, c)", where);
    check_cudnn(cudnnCreateTensorDescriptor(&p.matrix), "cudnnCreateTensorDescriptor", where);
    check_cudnn(cudnnCreateTensorDescriptor(&p.bias), "cudnnCreateTensorDescriptor", where);
    check_cudnn(cudnnGetRNNWeightSpaceSize(h, p.rnn, &p.weight_bytes), "cudnnGetRNNWeightSpaceSize", where);
    check_cudnn(cudnnGetRNNTempSpaceSizes(h, p.rnn, CUDNN_FWD_MODE_TRAINING, p.x, &p.work_bytes, &p.reserve_bytes),
                "cudnnGetRNNTempSpaceSizes", where);
}

// The plan of this geometry and math type (mutex held).
LstmPlan& lstm_plan(cudnnHandle_t h, const CudnnLstm& g, cudnnMathType_t math, const std::string& where) {
    static std::map<std::array<int64_t, 5>, LstmPlan> plans;
    std::array<int64_t, 5> key{g.T, g.B, g.in, g.H, math};
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    LstmPlan p;
    try {
        describe(h, p, g, math, where);
    } catch (...) {
        destroy(p);
        throw;
    }
    return plans.emplace(key, p).first->second;
}

// The math type the GEMM precision asks for; false under bf16 (the own path runs).
bool lstm_math(cudnnMathType_t& math) {
    switch (gemm_precision()) {
        case GemmPrecision::fp32: math = CUDNN_FMA_MATH; return true;
        case GemmPrecision::tf32: math = CUDNN_DEFAULT_MATH; return true;
        case GemmPrecision::bf16: return false;
    }
    return false;
}

// Where cuDNN keeps linear layer `id`'s matrix and bias inside the weight space at `base`, in
// floats from base, with their sizes checked against what the engine's tensors hold.
struct ParamAt {
    size_t matrix, bias;
};
ParamAt param_at(cudnnHandle_t h, LstmPlan& p, const CudnnLstm& g, const void* base, int id,
                 const std::string& where) {
    void *m = nullptr, *b = nullptr;
    check_cudnn(cudnnGetRNNWeightParams(h, p.rnn, 0, p.weight_bytes, base, id, p.matrix, &m, p.bias, &b),
                "cudnnGetRNNWeightParams", where);
    auto elements = [&](cudnnTensorDescriptor_t d) {
        cudnnDataType_t type;
        int nd = 0, dims[8], strides[8];
        check_cudnn(cudnnGetTensorNdDescriptor(d, 8, &type, &nd, dims, strides), "cudnnGetTensorNdDescriptor",
                    where);
        int64_t n = 1;
        for (int i = 0; i < nd; i++) n *= dims[i];
        return n;
    };
    const int64_t cols = id < 4 ? g.in : g.H;
    if (!m || !b || elements(p.matrix) != g.H * cols || elements(p.bias) != g.H)
        fail(where + ": cudnnGetRNNWeightParams gave linear layer " + std::to_string(id) +
             " a matrix or bias that is not [" + std::to_string(g.H) + ", " + std::to_string(cols) + "] and [" +
             std::to_string(g.H) + "]");
    auto offset = [&](void* q) { return (size_t)(static_cast<char*>(q) - static_cast<const char*>(base)) / sizeof(float); };
    return {offset(m), offset(b)};
}

// The engine's tensors and cuDNN's weight space, one linear layer at a time: to_space copies the
// engine's weights in (forward), otherwise cuDNN's gradients go out (backward). Gate k of w_ih is
// rows k·H … k·H + H − 1, which is cuDNN's matrix of linear layer k (of k + 4 for w_hh).
void copy_params(cudnnHandle_t h, LstmPlan& p, const CudnnLstm& g, const void* space, bool to_space, float* w_ih,
                 float* b_ih, float* w_hh, float* b_hh, const std::string& where) {
    float* base = static_cast<float*>(const_cast<void*>(space));
    for (int id = 0; id < 8; id++) {
        const ParamAt at = param_at(h, p, g, space, id, where);
        const int64_t gate = id % 4, cols = id < 4 ? g.in : g.H;
        float* w = id < 4 ? w_ih : w_hh;
        float* b = id < 4 ? b_ih : b_hh;
        const size_t wbytes = sizeof(float) * g.H * cols, bbytes = sizeof(float) * g.H;
        if (w) {
            float* mine = w + gate * g.H * cols;
            to_space ? copy_on_device(base + at.matrix, mine, wbytes) : copy_on_device(mine, base + at.matrix, wbytes);
        }
        if (b) {
            float* mine = b + gate * g.H;
            to_space ? copy_on_device(base + at.bias, mine, bbytes) : copy_on_device(mine, base + at.bias, bbytes);
        }
    }
}

// devSeqLengths: every sequence is T long.
struct SeqLengths {
    Buffer buffer;
    explicit SeqLengths(const CudnnLstm& g) : buffer(sizeof(int32_t) * g.B) {
        fill_i32(static_cast<int32_t*>(buffer.p), (int32_t)g.T, g.B);
    }
    const int32_t* data() const { return static_cast<const int32_t*>(buffer.p); }
};

}  // namespace

bool cudnn_lstm_sizes(const CudnnLstm& g, CudnnLstmSizes& sizes) {
    cudnnMathType_t math;
    if (!cudnn_lstm_enabled() || !lstm_math(math)) return false;
    if (!fits_int({g.T, g.B, g.in, g.H, g.T * g.B * g.in, g.T * g.B * g.H, 4 * g.H * (g.in + g.H)})) return false;
    const std::string where = lstm_where("lstm_layer", g);
    std::lock_guard<std::mutex> lock(mutex());
    cudnnHandle_t h = handle(where);
    LstmPlan& p = lstm_plan(h, g, math, where);
    sizes = {p.weight_bytes, p.reserve_bytes};
    return true;
}

void cudnn_lstm_forward(const CudnnLstm& g, const float* x, const float* h0, const float* c0, const float* w_ih,
                        const float* b_ih, const float* w_hh, const float* b_hh, void* weight_space, float* out,
                        void* reserve) {
    cudnnMathType_t math;
    const std::string where = lstm_where("lstm_layer forward", g);
    if (!lstm_math(math)) fail(where + ": cuDNN does not take bf16 GEMM precision (see cudnn_lstm_sizes)");
    std::lock_guard<std::mutex> lock(mutex());
    cudnnHandle_t h = handle(where);
    LstmPlan& p = lstm_plan(h, g, math, where);
    copy_params(h, p, g, weight_space, true, const_cast<float*>(w_ih), const_cast<float*>(b_ih),
                const_cast<float*>(w_hh), const_cast<float*>(b_hh), where);
    SeqLengths lengths(g);
    Buffer work(p.work_bytes);
    float* cy = out + g.T * g.B * g.H;
    check_cudnn(cudnnRNNForward(h, p.rnn, CUDNN_FWD_MODE_TRAINING, lengths.data(), p.x, x, p.y, out, p.state, h0,
                                nullptr, p.state, c0, cy, p.weight_bytes, weight_space, p.work_bytes, work.p,
                                p.reserve_bytes, reserve),
                "cudnnRNNForward", where);
    count_call();
}

void cudnn_lstm_backward(const CudnnLstm& g, const float* x, const float* h0, const float* c0,
                         const void* weight_space, const float* out, const float* dout, void* reserve, float* dx,
                         float* dh0, float* dc0, float* dw_ih, float* db_ih, float* dw_hh, float* db_hh) {
    cudnnMathType_t math;
    const std::string where = lstm_where("lstm_layer backward", g);
    if (!lstm_math(math)) fail(where + ": cuDNN does not take bf16 GEMM precision (see cudnn_lstm_sizes)");
    const bool weights = dw_ih || db_ih || dw_hh || db_hh;
    std::lock_guard<std::mutex> lock(mutex());
    cudnnHandle_t h = handle(where);
    LstmPlan& p = lstm_plan(h, g, math, where);
    SeqLengths lengths(g);
    Buffer work(p.work_bytes);
    // cuDNN always writes dx; the weight gradient needs the backward-data pass first in any case.
    Buffer spare_dx(dx ? 0 : sizeof(float) * g.T * g.B * g.in);
    const float* dcy = dout + g.T * g.B * g.H;
    check_cudnn(cudnnRNNBackwardData_v8(h, p.rnn, lengths.data(), p.y, out, dout, p.x, dx ? dx : spare_dx.f(), p.state,
                                        h0, nullptr, dh0, p.state, c0, dcy, dc0, p.weight_bytes, weight_space,
                                        p.work_bytes, work.p, p.reserve_bytes, reserve),
                "cudnnRNNBackwardData_v8", where);
    if (weights) {
        Buffer dspace(p.weight_bytes);
        memset_zero(dspace.p, p.weight_bytes);  // CUDNN_WGRAD_MODE_ADD: cuDNN adds into it
        check_cudnn(cudnnRNNBackwardWeights_v8(h, p.rnn, CUDNN_WGRAD_MODE_ADD, lengths.data(), p.x, x, p.state, h0,
                                               p.y, out, p.weight_bytes, dspace.p, p.work_bytes, work.p,
                                               p.reserve_bytes, reserve),
                    "cudnnRNNBackwardWeights_v8", where);
        copy_params(h, p, g, dspace.p, false, dw_ih, db_ih, dw_hh, db_hh, where);
    }
    count_call();
}

#endif  // ENGINE_CUDNN

}  // namespace engine::cuda
