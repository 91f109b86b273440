// engine/cuda/emu/cudnn_rnn.cpp: the cuDNN stand-in's RNN API, for the one cell the engine uses
// (engine/cuda/cudnn_rnn.cu): CUDNN_LSTM, one unidirectional layer, linear input, no projection,
// float data, every sequence maxSeqLength long. Written from cuDNN's definition of the cell, not
// from the engine's kernels (engine/cuda/rnn.cu) or its CPU twin, so the [cuda][cudnn] LSTM tests
// compare two implementations:
//   i = σ(W_i·x + R_i·h + bW_i + bR_i)     f = σ(W_f·x + R_f·h + bW_f + bR_f)
//   g = tanh(W_g·x + R_g·h + bW_g + bR_g)  o = σ(W_o·x + R_o·h + bW_o + bR_o)
//   c' = f·c + i·g                          h' = o·tanh(c')
// with linear layers 0-3 (W: i, f, g, o) and 4-7 (R: the same gates); bias modes NO_BIAS,
// SINGLE_INP_BIAS (bW only), SINGLE_REC_BIAS (bR only) and DOUBLE_BIAS.
//
// What a GPU would punish, checked here: descriptors that do not match each other, spaces smaller
// than the size queries say, data, spaces and devSeqLengths that are not device memory,
// devSeqLengths that differ from the data descriptor's lengths, CUDNN_WGRAD_MODE_SET (cuDNN 9 has
// only ADD). The weight space layout is the stand-in's own, gate by gate [W_k | R_k | bW_k | bR_k]
// (so code that assumes cuDNN's packing instead of asking cudnnGetRNNWeightParams reads the wrong
// floats). The reserve space holds the forward's activated gates and cell states, then the gate
// gradients that cudnnRNNBackwardData_v8 leaves for cudnnRNNBackwardWeights_v8; the forward
// poisons that last part, so a weight gradient without the data pass before it comes out NaN. The
// work space is poisoned by every call (scratch).
//
// Sums are in double, in a fixed order (cuDNN's standard algorithm is deterministic). Under
// CUDNN_DEFAULT_MATH and the tensor-op math types the GEMM inputs (x, h, the matrices, and in the
// backward the gate gradients) are rounded to TF32 first, as Ampere and later GPUs may.
#include "cudnn.h"
#include "cudnn_internal.h"
#include "internal.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace emu::cudnn_standin;

struct cudnnDropoutStruct {
    bool set = false;
    float dropout = 0.f;
};
struct cudnnRNNStruct {
    bool set = false;
    cudnnRNNBiasMode_t bias = CUDNN_RNN_DOUBLE_BIAS;
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    int in = 0, H = 0;
};
struct cudnnRNNDataStruct {
    bool set = false;
    int T = 0, B = 0, vec = 0;
    std::vector<int> lengths;
};

cudnnStatus_t cudnnCreateDropoutDescriptor(cudnnDropoutDescriptor_t* d) { return create_descriptor(d); }
cudnnStatus_t cudnnDestroyDropoutDescriptor(cudnnDropoutDescriptor_t d) { return destroy_descriptor(d); }
cudnnStatus_t cudnnSetDropoutDescriptor(cudnnDropoutDescriptor_t d, cudnnHandle_t h, float dropout, void* states,
                                        size_t, unsigned long long) {
    if (!d || !h || dropout < 0.f || dropout > 1.f) return CUDNN_STATUS_BAD_PARAM;
    if (states) return CUDNN_STATUS_NOT_SUPPORTED;  // random states are not modelled
    *d = {true, dropout};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateRNNDescriptor(cudnnRNNDescriptor_t* d) { return create_descriptor(d); }
cudnnStatus_t cudnnDestroyRNNDescriptor(cudnnRNNDescriptor_t d) { return destroy_descriptor(d); }
cudnnStatus_t cudnnSetRNNDescriptor_v8(cudnnRNNDescriptor_t d, cudnnRNNAlgo_t algo, cudnnRNNMode_t cell,
                                       cudnnRNNBiasMode_t bias, cudnnDirectionMode_t dir,
                                       cudnnRNNInputMode_t input_mode, cudnnDataType_t type, cudnnDataType_t prec,
                                       cudnnMathType_t math, int32_t in, int32_t H, int32_t proj, int32_t layers,
                                       cudnnDropoutDescriptor_t dropout, uint32_t aux) {
    if (!d || in <= 0 || H <= 0 || layers <= 0 || proj <= 0 || proj > H) return CUDNN_STATUS_BAD_PARAM;
    if (math < CUDNN_DEFAULT_MATH || math > CUDNN_FMA_MATH || bias < CUDNN_RNN_NO_BIAS ||
        bias > CUDNN_RNN_SINGLE_REC_BIAS || (dropout && !dropout->set))
        return CUDNN_STATUS_BAD_PARAM;
    if (algo != CUDNN_RNN_ALGO_STANDARD || cell != CUDNN_LSTM || dir != CUDNN_UNIDIRECTIONAL ||
        input_mode != CUDNN_LINEAR_INPUT || type != CUDNN_DATA_FLOAT || prec != CUDNN_DATA_FLOAT || proj != H ||
        layers != 1 || aux != CUDNN_RNN_PADDED_IO_DISABLED)
        return CUDNN_STATUS_NOT_SUPPORTED;
    *d = {true, bias, math, in, H};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateRNNDataDescriptor(cudnnRNNDataDescriptor_t* d) { return create_descriptor(d); }
cudnnStatus_t cudnnDestroyRNNDataDescriptor(cudnnRNNDataDescriptor_t d) { return destroy_descriptor(d); }
cudnnStatus_t cudnnSetRNNDataDescriptor(cudnnRNNDataDescriptor_t d, cudnnDataType_t type, cudnnRNNDataLayout_t layout,
                                        int T, int B, int vec, const int lengths[], void*) {
    if (!d || !lengths || T <= 0 || B <= 0 || vec <= 0) return CUDNN_STATUS_BAD_PARAM;
    if (layout < CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED || layout > CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED)
        return CUDNN_STATUS_BAD_PARAM;
    for (int b = 0; b < B; b++)
        if (lengths[b] < 0 || lengths[b] > T) return CUDNN_STATUS_BAD_PARAM;
    // Packed data must have non-increasing lengths; with all lengths T (the only case modelled)
    // every sequence-major layout is the contiguous [T, B, vec].
    if (type != CUDNN_DATA_FLOAT || layout == CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED) return CUDNN_STATUS_NOT_SUPPORTED;
    for (int b = 0; b < B; b++)
        if (lengths[b] != T) return CUDNN_STATUS_NOT_SUPPORTED;
    *d = {true, T, B, vec, std::vector<int>(lengths, lengths + B)};
    return CUDNN_STATUS_SUCCESS;
}

namespace {

// The sizes of one LSTM layer, and where things are in its three spaces (in floats).
struct Lstm {
    int T = 0, B = 0, in = 0, H = 0;
    bool bW = true, bR = true, tf32 = false;
    size_t gate_block() const { return (size_t)H * in + (size_t)H * H + 2 * (size_t)H; }
    size_t weight_floats() const { return 4 * gate_block(); }
    size_t W(int k) const { return k * gate_block(); }                    // [H, in]
    size_t R(int k) const { return W(k) + (size_t)H * in; }               // [H, H]
    size_t bias_W(int k) const { return R(k) + (size_t)H * H; }           // [H]
    size_t bias_R(int k) const { return bias_W(k) + H; }                  // [H]
    size_t steps() const { return (size_t)T * B; }
    size_t acts() const { return 0; }                                     // [T, B, 4H] activated i, f, g, o
    size_t cells() const { return steps() * 4 * H; }                      // [T, B, H] c_t
    size_t dgates() const { return cells() + steps() * H; }               // [T, B, 4H] gate gradients
    size_t reserve_floats() const { return dgates() + steps() * 4 * H; }
    size_t work_floats() const { return (size_t)B * 4 * H; }
    size_t x_floats() const { return steps() * in; }
    size_t y_floats() const { return steps() * H; }
    size_t state_floats() const { return (size_t)B * H; }
};

size_t bytes(size_t floats) { return floats * sizeof(float); }

bool state_matches(const cudnnTensorStruct* d, const Lstm& g) {
    return d && d->nd == 3 && d->dims[0] == 1 && d->dims[1] == g.B && d->dims[2] == g.H &&
           d->strides[0] == g.B * g.H && d->strides[1] == g.H && d->strides[2] == 1;
}

// The layer of rnn with data x (and y, and the state descriptors, where given), checked against
// each other.
cudnnStatus_t lstm_of(const cudnnRNNStruct* rnn, const cudnnRNNDataStruct* x, const cudnnRNNDataStruct* y,
                      const cudnnTensorStruct* hd, const cudnnTensorStruct* cd, Lstm& g) {
    if (!rnn || !rnn->set || !x || !x->set || x->vec != rnn->in) return CUDNN_STATUS_BAD_PARAM;
    g.T = x->T, g.B = x->B, g.in = rnn->in, g.H = rnn->H;
    g.bW = rnn->bias == CUDNN_RNN_DOUBLE_BIAS || rnn->bias == CUDNN_RNN_SINGLE_INP_BIAS;
    g.bR = rnn->bias == CUDNN_RNN_DOUBLE_BIAS || rnn->bias == CUDNN_RNN_SINGLE_REC_BIAS;
    g.tf32 = rnn->math != CUDNN_FMA_MATH;
    if (y && (!y->set || y->T != g.T || y->B != g.B || y->vec != g.H)) return CUDNN_STATUS_BAD_PARAM;
    if ((hd && !state_matches(hd, g)) || (cd && !state_matches(cd, g))) return CUDNN_STATUS_BAD_PARAM;
    return CUDNN_STATUS_SUCCESS;
}

// devSeqLengths: device memory at the call and when the work runs (a graph replays it later), and
// then (not before: the kernel that fills it may be queued, or recorded, before this call) the
// descriptor's lengths, as cuDNN's kernels read it.
struct Args {
    const char* call;
    Lstm g;
    std::vector<int> lengths;
    const int32_t* dev_lengths;
    void check(bool running) const {
        check_device(call, "devSeqLengths", dev_lengths, g.B);  // 4-byte ints: as many words as floats
        for (int b = 0; running && b < g.B; b++)
            if (dev_lengths[b] != lengths[b])
                throw emu::Error(std::string("CUDA emulator: ") + call + ": devSeqLengths[" + std::to_string(b) +
                                 "] = " + std::to_string(dev_lengths[b]) + " but the data descriptor says " +
                                 std::to_string(lengths[b]));
    }
    // The weight space (named as the call names it), the work space and, when given, the reserve
    // space lie in device memory and are as large as the LSTM needs.
    void check_spaces(const char* weight_name, const void* weights, const void* work, const void* reserve) const {
        check_device(call, weight_name, weights, g.weight_floats());
        check_device(call, "workSpace", work, g.work_floats());
        if (reserve) check_device(call, "reserveSpace", reserve, g.reserve_floats());
    }
};

// The byte counts the caller gives for the three spaces are at least what the LSTM needs (the
// reserve space only when it is used).
bool spaces_fit(const Lstm& g, size_t weight_bytes, size_t work_bytes, size_t reserve_bytes, bool reserve_used) {
    return weight_bytes >= bytes(g.weight_floats()) && work_bytes >= bytes(g.work_floats()) &&
           (!reserve_used || reserve_bytes >= bytes(g.reserve_floats()));
}

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// A state input that may be null (zeros).
std::vector<float> state_or_zero(const void* p, const Lstm& g) {
    return p ? input(p, g.state_floats(), false) : std::vector<float>(g.state_floats(), 0.f);
}
float tf(float v, bool tf32) { return tf32 ? emu::to_tf32(v) : v; }

}  // namespace

cudnnStatus_t cudnnGetRNNWeightSpaceSize(cudnnHandle_t h, cudnnRNNDescriptor_t rnn, size_t* size) {
    if (!h || !rnn || !rnn->set || !size) return CUDNN_STATUS_BAD_PARAM;
    Lstm g;
    g.in = rnn->in, g.H = rnn->H;
    *size = bytes(g.weight_floats());
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetRNNTempSpaceSizes(cudnnHandle_t h, cudnnRNNDescriptor_t rnn, cudnnForwardMode_t mode,
                                        cudnnRNNDataDescriptor_t xd, size_t* work, size_t* reserve) {
    Lstm g;
    if (!h || !work || (mode != CUDNN_FWD_MODE_TRAINING && mode != CUDNN_FWD_MODE_INFERENCE))
        return CUDNN_STATUS_BAD_PARAM;
    if (cudnnStatus_t s = lstm_of(rnn, xd, nullptr, nullptr, nullptr, g); s != CUDNN_STATUS_SUCCESS) return s;
    *work = bytes(g.work_floats());
    if (reserve) *reserve = mode == CUDNN_FWD_MODE_TRAINING ? bytes(g.reserve_floats()) : 0;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetRNNWeightParams(cudnnHandle_t h, cudnnRNNDescriptor_t rnn, int32_t layer, size_t space_bytes,
                                      const void* space, int32_t id, cudnnTensorDescriptor_t md, void** m,
                                      cudnnTensorDescriptor_t bd, void** b) {
    if (!h || !rnn || !rnn->set || layer != 0 || id < 0 || id > 7 || !space) return CUDNN_STATUS_BAD_PARAM;
    Lstm g;
    g.in = rnn->in, g.H = rnn->H;
    if (space_bytes < bytes(g.weight_floats())) return CUDNN_STATUS_BAD_PARAM;
    const int k = id % 4, cols = id < 4 ? g.in : g.H;
    const bool has_bias = id < 4 ? rnn->bias == CUDNN_RNN_DOUBLE_BIAS || rnn->bias == CUDNN_RNN_SINGLE_INP_BIAS
                                 : rnn->bias == CUDNN_RNN_DOUBLE_BIAS || rnn->bias == CUDNN_RNN_SINGLE_REC_BIAS;
    float* base = static_cast<float*>(const_cast<void*>(space));
    if (m) *m = base + (id < 4 ? g.W(k) : g.R(k));
    if (md) {
        const int dims[3] = {1, g.H, cols}, strides[3] = {g.H * cols, cols, 1};
        cudnnSetTensorNdDescriptor(md, CUDNN_DATA_FLOAT, 3, dims, strides);
    }
    // A bias the mode does not have: a null address and an empty descriptor, as cuDNN documents.
    if (b) *b = has_bias ? base + (id < 4 ? g.bias_W(k) : g.bias_R(k)) : nullptr;
    if (bd) {
        if (has_bias) {
            const int dims[3] = {1, g.H, 1}, strides[3] = {g.H, 1, 1};
            cudnnSetTensorNdDescriptor(bd, CUDNN_DATA_FLOAT, 3, dims, strides);
        } else {
            *bd = {};
        }
    }
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnRNNForward(cudnnHandle_t h, cudnnRNNDescriptor_t rnn, cudnnForwardMode_t mode,
                              const int32_t dev_lengths[], cudnnRNNDataDescriptor_t xd, const void* x,
                              cudnnRNNDataDescriptor_t yd, void* y, cudnnTensorDescriptor_t hd, const void* hx,
                              void* hy, cudnnTensorDescriptor_t cd, const void* cx, void* cy, size_t weight_bytes,
                              const void* weights, size_t work_bytes, void* work, size_t reserve_bytes,
                              void* reserve) {
    const char* call = "cudnnRNNForward";
    Lstm g;
    if (!h || !x || !y || !weights || !dev_lengths) return CUDNN_STATUS_BAD_PARAM;
    if (mode != CUDNN_FWD_MODE_TRAINING && mode != CUDNN_FWD_MODE_INFERENCE) return CUDNN_STATUS_BAD_PARAM;
    if (cudnnStatus_t s = lstm_of(rnn, xd, yd, hd, cd, g); s != CUDNN_STATUS_SUCCESS) return s;
    const bool training = mode == CUDNN_FWD_MODE_TRAINING;
    if (!work || (training && !reserve) || !spaces_fit(g, weight_bytes, work_bytes, reserve_bytes, training))
        return CUDNN_STATUS_BAD_PARAM;
    const Args args{call, g, xd->lengths, dev_lengths};
    auto checks = [=](bool running) {
        args.check(running);
        check_device(call, "x", x, g.x_floats());
        check_device(call, "y", y, g.y_floats());
        for (const void* p : {(const void*)hx, (const void*)hy, (const void*)cx, (const void*)cy})
            if (p) check_device(call, "hx, hy, cx or cy", p, g.state_floats());
        args.check_spaces("weightSpace", weights, work, training ? reserve : nullptr);
    };
    checks(false);
    return enqueue(h, call, [=] {
        checks(true);
        emu::fill_poison(work, bytes(g.work_floats()));
        const float* w = static_cast<const float*>(weights);
        const std::vector<float> xv = input(x, g.x_floats(), g.tf32);
        auto matrices = [&](auto at, int cols) {  // the four matrices, rounded as the math type reads them
            std::vector<std::vector<float>> m;
            for (int k = 0; k < 4; k++) m.push_back(input(w + at(k), (size_t)g.H * cols, g.tf32));
            return m;
        };
        const auto W = matrices([&](int k) { return g.W(k); }, g.in);
        const auto R = matrices([&](int k) { return g.R(k); }, g.H);
        std::vector<float> hprev = state_or_zero(hx, g), c = state_or_zero(cx, g);
        float* yout = static_cast<float*>(y);
        float* res = static_cast<float*>(reserve);
        if (training) emu::fill_poison(res + g.dgates(), bytes(g.steps() * 4 * g.H));  // until the data pass
        std::vector<float> hnext(g.state_floats());
        for (int t = 0; t < g.T; t++) {
            for (int b = 0; b < g.B; b++)
                for (int j = 0; j < g.H; j++) {
                    double pre[4];
                    for (int k = 0; k < 4; k++) {
                        double s = (g.bW ? w[g.bias_W(k) + j] : 0.0) + (g.bR ? w[g.bias_R(k) + j] : 0.0);
                        for (int i = 0; i < g.in; i++)
                            s += (double)W[k][(size_t)j * g.in + i] * xv[((size_t)t * g.B + b) * g.in + i];
                        for (int i = 0; i < g.H; i++)
                            s += (double)R[k][(size_t)j * g.H + i] * tf(hprev[(size_t)b * g.H + i], g.tf32);
                        pre[k] = s;
                    }
                    const double ig = sigmoid(pre[0]), fg = sigmoid(pre[1]), gg = std::tanh(pre[2]),
                                 og = sigmoid(pre[3]);
                    const size_t e = (size_t)b * g.H + j, step = (size_t)t * g.B + b;
                    const double cn = fg * c[e] + ig * gg;
                    c[e] = (float)cn;
                    hnext[e] = (float)(og * std::tanh(cn));
                    yout[step * g.H + j] = hnext[e];
                    if (training) {
                        const double act[4] = {ig, fg, gg, og};
                        for (int k = 0; k < 4; k++) res[g.acts() + (step * 4 + k) * g.H + j] = (float)act[k];
                        res[g.cells() + step * g.H + j] = c[e];
                    }
                }
            hprev = hnext;
        }
        if (hy) std::memcpy(hy, hprev.data(), bytes(g.state_floats()));
        if (cy) std::memcpy(cy, c.data(), bytes(g.state_floats()));
    });
}

cudnnStatus_t cudnnRNNBackwardData_v8(cudnnHandle_t h, cudnnRNNDescriptor_t rnn, const int32_t dev_lengths[],
                                      cudnnRNNDataDescriptor_t yd, const void* y, const void* dy,
                                      cudnnRNNDataDescriptor_t xd, void* dx, cudnnTensorDescriptor_t hd,
                                      const void* hx, const void* dhy, void* dhx, cudnnTensorDescriptor_t cd,
                                      const void* cx, const void* dcy, void* dcx, size_t weight_bytes,
                                      const void* weights, size_t work_bytes, void* work, size_t reserve_bytes,
                                      void* reserve) {
    const char* call = "cudnnRNNBackwardData_v8";
    Lstm g;
    if (!h || !y || !dy || !dx || !weights || !dev_lengths || !work || !reserve) return CUDNN_STATUS_BAD_PARAM;
    if (cudnnStatus_t s = lstm_of(rnn, xd, yd, hd, cd, g); s != CUDNN_STATUS_SUCCESS) return s;
    if (!spaces_fit(g, weight_bytes, work_bytes, reserve_bytes, true)) return CUDNN_STATUS_BAD_PARAM;
    const Args args{call, g, xd->lengths, dev_lengths};
    auto checks = [=](bool running) {
        args.check(running);
        check_device(call, "y", y, g.y_floats());
        check_device(call, "dy", dy, g.y_floats());
        check_device(call, "dx", dx, g.x_floats());
        for (const void* p : {hx, dhy, (const void*)dhx, cx, dcy, (const void*)dcx})
            if (p) check_device(call, "hx, dhy, dhx, cx, dcy or dcx", p, g.state_floats());
        args.check_spaces("weightSpace", weights, work, reserve);
    };
    checks(false);
    return enqueue(h, call, [=] {
        checks(true);
        emu::fill_poison(work, bytes(g.work_floats()));
        const float* w = static_cast<const float*>(weights);
        const float* dyv = static_cast<const float*>(dy);
        float* res = static_cast<float*>(reserve);
        std::vector<std::vector<float>> W, R;
        for (int k = 0; k < 4; k++) {
            W.push_back(input(w + g.W(k), (size_t)g.H * g.in, g.tf32));
            R.push_back(input(w + g.R(k), (size_t)g.H * g.H, g.tf32));
        }
        const std::vector<float> c0 = state_or_zero(cx, g);
        std::vector<float> dh = state_or_zero(dhy, g), dc = state_or_zero(dcy, g);
        std::vector<float> dgate(4 * (size_t)g.H);  // one row's, rounded as the GEMMs read them
        float* dxv = static_cast<float*>(dx);
        for (int t = g.T - 1; t >= 0; t--) {
            std::vector<float> dh_prev(g.state_floats(), 0.f);
            for (int b = 0; b < g.B; b++) {
                const size_t step = (size_t)t * g.B + b;
                for (int j = 0; j < g.H; j++) {
                    const size_t e = (size_t)b * g.H + j;
                    const float* a = res + g.acts() + step * 4 * g.H;
                    const double ig = a[j], fg = a[g.H + j], gg = a[2 * g.H + j], og = a[3 * g.H + j];
                    const double cn = res[g.cells() + step * g.H + j];
                    const double cp = t ? res[g.cells() + (step - g.B) * g.H + j] : c0[e];
                    const double dht = (double)dyv[step * g.H + j] + dh[e], tc = std::tanh(cn);
                    const double dct = dc[e] + dht * og * (1 - tc * tc);
                    const double d[4] = {dct * gg * ig * (1 - ig), dct * cp * fg * (1 - fg), dct * ig * (1 - gg * gg),
                                         dht * tc * og * (1 - og)};
                    for (int k = 0; k < 4; k++) {
                        res[g.dgates() + (step * 4 + k) * g.H + j] = (float)d[k];
                        dgate[(size_t)k * g.H + j] = tf((float)d[k], g.tf32);
                    }
                    dc[e] = (float)(dct * fg);
                }
                // dx_t = Σ_k W_kᵀ·dgate_k, dh_{t-1} = Σ_k R_kᵀ·dgate_k.
                for (int i = 0; i < g.in; i++) {
                    double s = 0;
                    for (int k = 0; k < 4; k++)
                        for (int j = 0; j < g.H; j++) s += (double)W[k][(size_t)j * g.in + i] * dgate[(size_t)k * g.H + j];
                    dxv[step * g.in + i] = (float)s;
                }
                for (int i = 0; i < g.H; i++) {
                    double s = 0;
                    for (int k = 0; k < 4; k++)
                        for (int j = 0; j < g.H; j++) s += (double)R[k][(size_t)j * g.H + i] * dgate[(size_t)k * g.H + j];
                    dh_prev[(size_t)b * g.H + i] = (float)s;
                }
            }
            dh = dh_prev;
        }
        if (dhx) std::memcpy(dhx, dh.data(), bytes(g.state_floats()));
        if (dcx) std::memcpy(dcx, dc.data(), bytes(g.state_floats()));
    });
}

cudnnStatus_t cudnnRNNBackwardWeights_v8(cudnnHandle_t h, cudnnRNNDescriptor_t rnn, cudnnWgradMode_t mode,
                                         const int32_t dev_lengths[], cudnnRNNDataDescriptor_t xd, const void* x,
                                         cudnnTensorDescriptor_t hd, const void* hx, cudnnRNNDataDescriptor_t yd,
                                         const void* y, size_t weight_bytes, void* dweights, size_t work_bytes,
                                         void* work, size_t reserve_bytes, void* reserve) {
    const char* call = "cudnnRNNBackwardWeights_v8";
    Lstm g;
    if (mode == CUDNN_WGRAD_MODE_SET) return CUDNN_STATUS_NOT_SUPPORTED;
    if (mode != CUDNN_WGRAD_MODE_ADD) return CUDNN_STATUS_BAD_PARAM;
    if (!h || !x || !y || !dweights || !dev_lengths || !work || !reserve) return CUDNN_STATUS_BAD_PARAM;
    if (cudnnStatus_t s = lstm_of(rnn, xd, yd, hd, nullptr, g); s != CUDNN_STATUS_SUCCESS) return s;
    if (!spaces_fit(g, weight_bytes, work_bytes, reserve_bytes, true)) return CUDNN_STATUS_BAD_PARAM;
    const Args args{call, g, xd->lengths, dev_lengths};
    auto checks = [=](bool running) {
        args.check(running);
        check_device(call, "x", x, g.x_floats());
        check_device(call, "y", y, g.y_floats());
        if (hx) check_device(call, "hx", hx, g.state_floats());
        args.check_spaces("dweightSpace", dweights, work, reserve);
    };
    checks(false);
    return enqueue(h, call, [=] {
        checks(true);
        emu::fill_poison(work, bytes(g.work_floats()));
        const std::vector<float> xv = input(x, g.x_floats(), g.tf32), yv = input(y, g.y_floats(), g.tf32),
                                 h0 = state_or_zero(hx, g);
        const float* res = static_cast<const float*>(reserve);
        float* dw = static_cast<float*>(dweights);
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < g.H; j++) {
                // dW_k[j, :] += Σ_{t,b} dgate·x_t;  dR_k[j, :] += Σ dgate·h_{t-1};  dbW_k[j], dbR_k[j] += Σ dgate.
                std::vector<double> sw(g.in, 0.0), sr(g.H, 0.0);
                double sb = 0;
                for (int t = 0; t < g.T; t++)
                    for (int b = 0; b < g.B; b++) {
                        const size_t step = (size_t)t * g.B + b;
                        const float d = res[g.dgates() + (step * 4 + k) * g.H + j];
                        const double dt = tf(d, g.tf32);
                        sb += d;
                        for (int i = 0; i < g.in; i++) sw[i] += dt * xv[step * g.in + i];
                        for (int i = 0; i < g.H; i++)
                            sr[i] += dt * (t ? yv[(step - g.B) * g.H + i] : tf(h0[(size_t)b * g.H + i], g.tf32));
                    }
                for (int i = 0; i < g.in; i++) dw[g.W(k) + (size_t)j * g.in + i] += (float)sw[i];
                for (int i = 0; i < g.H; i++) dw[g.R(k) + (size_t)j * g.H + i] += (float)sr[i];
                if (g.bW) dw[g.bias_W(k) + j] += (float)sb;
                if (g.bR) dw[g.bias_R(k) + j] += (float)sb;
            }
    });
}
