// engine/cuda/emu/cudnn.cpp: the emulator's cuDNN (see include/cudnn.h for what is modelled): the
// checks cuDNN documents, then plain loops over NCHW floats. Written from cuDNN's definitions, not
// from the engine's kernels (engine/cpu/conv.cpp, engine/cuda/conv.cu), so that the [cuda][cudnn]
// parity tests compare two independent implementations.
//
// Every call that touches device memory puts its work on the handle's stream, as the cuBLAS
// stand-in does (enqueue below): the descriptors, arguments and pointers are checked and alpha and
// beta (host pointers) read at the call, which returns the status then; the computation, with all
// it needs held by value, runs now, or is recorded while the stream is captured and runs when the
// graph does (it reads the device memory then, and checks the pointers again).
#include "cudnn.h"
#include "cudnn_internal.h"
#include "internal.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

struct cudnnFilterStruct {
    bool set = false;
    int k = 0, c = 0, h = 0, w = 0;
};
struct cudnnConvolutionStruct {
    bool set = false;
    int pad_h = 0, pad_w = 0, u = 1, v = 1, dil_h = 1, dil_w = 1;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    int groups = 1;
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;  // cuDNN's default for a new descriptor
};

size_t cudnnGetVersion(void) { return CUDNN_VERSION; }

const char* cudnnGetErrorString(cudnnStatus_t s) {
    switch (s) {
        case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
        case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
        case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
        case CUDNN_STATUS_BAD_PARAM_NULL_POINTER: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
        case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
        case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
        case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    }
    return "CUDNN_STATUS_UNKNOWN";
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
    if (!handle) return CUDNN_STATUS_BAD_PARAM;
    *handle = new cudnnContext;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
    delete handle;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
    if (!h) return CUDNN_STATUS_BAD_PARAM;
    h->stream = s;
    return CUDNN_STATUS_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Descriptors

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d) {
    return emu::cudnn_standin::create_descriptor(d);
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
    return emu::cudnn_standin::destroy_descriptor(d);
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w) {
    if (!d || n <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
    if (format != CUDNN_TENSOR_NCHW || type != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
    *d = {true, n, c, h, w, 4, {n, c, h, w}, {c * h * w, h * w, w, 1}};
    return CUDNN_STATUS_SUCCESS;
}
// Any strides are recorded (cudnnGetTensorNdDescriptor gives them back); the 4-D calls above take
// a 4-D one only when it is fully packed.
cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t d, cudnnDataType_t type, int nd, const int dims[],
                                         const int strides[]) {
    if (!d || !dims || !strides || nd < 1 || nd > CUDNN_DIM_MAX) return CUDNN_STATUS_BAD_PARAM;
    for (int i = 0; i < nd; i++)
        if (dims[i] <= 0 || strides[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
    if (type != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
    *d = {};
    d->nd = nd;
    bool packed = true;
    for (int i = nd - 1, expect = 1; i >= 0; expect *= dims[i], i--) {
        d->dims[i] = dims[i], d->strides[i] = strides[i];
        packed = packed && strides[i] == expect;
    }
    if (nd == 4 && packed) d->set = true, d->n = dims[0], d->c = dims[1], d->h = dims[2], d->w = dims[3];
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetTensorNdDescriptor(const cudnnTensorDescriptor_t d, int requested, cudnnDataType_t* type,
                                         int* nd, int dims[], int strides[]) {
    if (!d || d->nd == 0 || !type || !nd || requested < 0 || (requested > 0 && (!dims || !strides)))
        return CUDNN_STATUS_BAD_PARAM;
    *type = CUDNN_DATA_FLOAT;
    *nd = d->nd;
    for (int i = 0; i < d->nd && i < requested; i++) dims[i] = d->dims[i], strides[i] = d->strides[i];
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* d) {
    return emu::cudnn_standin::create_descriptor(d);
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) {
    return emu::cudnn_standin::destroy_descriptor(d);
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type, cudnnTensorFormat_t format,
                                         int k, int c, int h, int w) {
    if (!d || k <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
    if (format != CUDNN_TENSOR_NCHW || type != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
    *d = {true, k, c, h, w};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* d) {
    return emu::cudnn_standin::create_descriptor(d);
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
    return emu::cudnn_standin::destroy_descriptor(d);
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w, int u, int v,
                                              int dil_h, int dil_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
    if (!d || pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dil_h <= 0 || dil_w <= 0) return CUDNN_STATUS_BAD_PARAM;
    if (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION) return CUDNN_STATUS_BAD_PARAM;
    if (compute != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
    d->set = true;
    d->pad_h = pad_h, d->pad_w = pad_w, d->u = u, d->v = v, d->dil_h = dil_h, d->dil_w = dil_w, d->mode = mode;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groups) {
    if (!d || groups < 1) return CUDNN_STATUS_BAD_PARAM;
    d->groups = groups;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t math) {
    if (!d || math < CUDNN_DEFAULT_MATH || math > CUDNN_FMA_MATH) return CUDNN_STATUS_BAD_PARAM;
    d->math = math;
    return CUDNN_STATUS_SUCCESS;
}

namespace emu::cudnn_standin {

void check_device(const char* call, const char* name, const void* p, size_t floats) {
    if (floats == 0) return;
    const float* first = static_cast<const float*>(p);
    if (!emu::is_device_pointer(first) || !emu::is_device_pointer(first + floats - 1))
        throw emu::Error(std::string("CUDA emulator: ") + call + ": " + name + " (" + std::to_string(floats) +
                         " floats) is not (all) in device memory");
}

cudnnStatus_t enqueue(cudnnHandle_t h, const char* call, std::function<void()> work) {
    cudaError_t e = emu::on_stream(h->stream, call, std::move(work));
    return e == cudaSuccess ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
}

std::vector<float> input(const void* p, size_t n, bool tf32) {
    const float* f = static_cast<const float*>(p);
    std::vector<float> v(f, f + n);
    if (tf32)
        for (float& e : v) e = emu::to_tf32(e);
    return v;
}

}  // namespace emu::cudnn_standin

using namespace emu::cudnn_standin;

namespace {

// The extent covered by a filter of `taps` taps with dilation `dil`, and the output size along one axis.
int out_size(int in, int pad, int taps, int dil, int stride) {
    int span = in + 2 * pad - ((taps - 1) * dil + 1);
    return span < 0 ? 0 : span / stride + 1;
}

// One convolution's sizes, from its four descriptors (y may be absent: the output-dim query).
struct Conv {
    int N, C, H, W;      // x
    int K, Cg, R, S;     // filter: K outputs, Cg = C / groups input channels each
    int OH, OW, groups;  // y is [N, K, OH, OW]
    int pad_h, pad_w, u, v, dil_h, dil_w;
    bool flip, tf32;
    int Kg() const { return K / groups; }
    size_t x_size() const { return (size_t)N * C * H * W; }
    size_t w_size() const { return (size_t)K * Cg * R * S; }
    size_t y_size() const { return (size_t)N * K * OH * OW; }
    // Filter element (k, c, r, s), with CUDNN_CONVOLUTION's flip.
    size_t w_at(int k, int c, int r, int s) const {
        if (flip) r = R - 1 - r, s = S - 1 - s;
        return (((size_t)k * Cg + c) * R + r) * S + s;
    }
    size_t x_at(int n, int ch, int h, int w) const { return (((size_t)n * C + ch) * H + h) * W + w; }
    size_t y_at(int n, int k, int h, int w) const { return (((size_t)n * K + k) * OH + h) * OW + w; }
};

cudnnStatus_t conv_of(const cudnnTensorStruct* x, const cudnnFilterStruct* w, const cudnnConvolutionStruct* cd,
                      const cudnnTensorStruct* y, Conv& g) {
    if (!x || !w || !cd || !x->set || !w->set || !cd->set) return CUDNN_STATUS_BAD_PARAM;
    if (x->c != w->c * cd->groups || w->k % cd->groups != 0) return CUDNN_STATUS_BAD_PARAM;
    g = {x->n, x->c, x->h, x->w, w->k, w->c, w->h, w->w, 0, 0, cd->groups, cd->pad_h, cd->pad_w, cd->u, cd->v,
         cd->dil_h, cd->dil_w, cd->mode == CUDNN_CONVOLUTION, cd->math != CUDNN_FMA_MATH};
    g.OH = out_size(g.H, g.pad_h, g.R, g.dil_h, g.u);
    g.OW = out_size(g.W, g.pad_w, g.S, g.dil_w, g.v);
    if (g.OH <= 0 || g.OW <= 0) return CUDNN_STATUS_BAD_PARAM;
    if (y && (!y->set || y->n != g.N || y->c != g.K || y->h != g.OH || y->w != g.OW)) return CUDNN_STATUS_BAD_PARAM;
    return CUDNN_STATUS_SUCCESS;
}



// out = alpha·result + beta·out; beta = 0 never reads out. alpha and beta are host pointers read at
// the call (a graph replays the values of its capture).
struct Blend {
    float a, b;
    Blend(const void* alpha, const void* beta)
        : a(*static_cast<const float*>(alpha)), b(*static_cast<const float*>(beta)) {}
    void operator()(float* out, size_t i, double result) const {
        out[i] = b == 0.f ? (float)(a * result) : (float)(a * result + (double)b * out[i]);
    }
};


// The terms of one output element, summed: in double (deterministic algorithms), or in float
// starting at a term that moves on every call and wrapping around (non-deterministic ones: atomics
// make the order of the additions vary from run to run on a GPU; a graph's replays vary too).
struct Sum {
    bool nondeterministic;
    size_t start;  // a call counter: the first term is terms[start mod size]
    std::vector<float> terms;
    double total() const {
        if (!nondeterministic) {
            double s = 0;
            for (float t : terms) s += t;
            return s;
        }
        float s = 0.f;
        for (size_t i = 0; i < terms.size(); i++) s += terms[(start + i) % terms.size()];
        return s;
    }
};
size_t next_start() {
    static std::atomic<size_t> calls{0};
    return ++calls;
}

// The algorithms offered: (algo, deterministic, workspace bytes), the non-deterministic first. The
// workspaces stand for the index tables and column buffers the real ones use.
template <typename Algo>
struct Offer {
    Algo algo;
    bool deterministic;
    size_t workspace;
};
size_t column_bytes(const Conv& g) { return sizeof(float) * (size_t)g.Cg * g.R * g.S * g.OH * g.OW; }
std::vector<Offer<cudnnConvolutionFwdAlgo_t>> forward_algos(const Conv& g) {
    return {{CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, true, sizeof(int) * (size_t)g.R * g.S * g.Cg},
            {CUDNN_CONVOLUTION_FWD_ALGO_GEMM, true, column_bytes(g)},
            {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, true, 0}};
}
std::vector<Offer<cudnnConvolutionBwdDataAlgo_t>> data_algos(const Conv& g) {
    return {{CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, false, 0}, {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, true, column_bytes(g)}};
}
std::vector<Offer<cudnnConvolutionBwdFilterAlgo_t>> filter_algos(const Conv& g) {
    return {{CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, false, 0},
            {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, false, sizeof(float) * (size_t)g.K},
            {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, true, column_bytes(g)}};
}

template <typename Algo>
const Offer<Algo>* find_offer(const std::vector<Offer<Algo>>& offers, Algo a) {
    for (const auto& o : offers)
        if (o.algo == a) return &o;
    return nullptr;
}

template <typename Perf, typename Algo>
cudnnStatus_t list_algos(const std::vector<Offer<Algo>>& offers, const Conv& g, cudnnMathType_t math, int requested,
                         int* returned, Perf* perf) {
    if (requested < 1 || !returned || !perf) return CUDNN_STATUS_BAD_PARAM;
    int n = 0;
    for (const auto& o : offers) {
        if (n == requested) break;
        Perf p{};
        p.algo = o.algo;
        p.status = CUDNN_STATUS_SUCCESS;
        p.time = -1.f;  // heuristics, not measured
        p.memory = o.workspace;
        p.determinism = o.deterministic ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
        p.mathType = math;
        perf[n++] = p;
    }
    *returned = n;
    return CUDNN_STATUS_SUCCESS;
}

// The algorithm must be one offered for this convolution, with at least its workspace (which must
// be device memory: check_workspace).
template <typename Algo>
cudnnStatus_t check_algo(const std::vector<Offer<Algo>>& offers, Algo a, const void* workspace, size_t bytes,
                         Offer<Algo>& chosen) {
    const Offer<Algo>* o = find_offer(offers, a);
    if (!o) return CUDNN_STATUS_NOT_SUPPORTED;
    if (bytes < o->workspace || (o->workspace > 0 && !workspace)) return CUDNN_STATUS_BAD_PARAM;
    chosen = *o;
    return CUDNN_STATUS_SUCCESS;
}
void check_workspace(const char* call, const void* workspace, size_t bytes) {
    check_device(call, "workSpace", workspace, (bytes + 3) / 4);
}

}  // namespace

cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t cd,
                                                    const cudnnTensorDescriptor_t xd, const cudnnFilterDescriptor_t wd,
                                                    int* n, int* c, int* h, int* w) {
    Conv g;
    if (cudnnStatus_t s = conv_of(xd, wd, cd, nullptr, g); s != CUDNN_STATUS_SUCCESS) return s;
    *n = g.N, *c = g.K, *h = g.OH, *w = g.OW;
    return CUDNN_STATUS_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Algorithm and workspace queries

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                     const cudnnFilterDescriptor_t wd,
                                                     const cudnnConvolutionDescriptor_t cd,
                                                     const cudnnTensorDescriptor_t yd, const int requested,
                                                     int* returned, cudnnConvolutionFwdAlgoPerf_t* perf) {
    Conv g;
    if (!h) return CUDNN_STATUS_BAD_PARAM;
    if (cudnnStatus_t s = conv_of(xd, wd, cd, yd, g); s != CUDNN_STATUS_SUCCESS) return s;
    return list_algos(forward_algos(g), g, cd->math, requested, returned, perf);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t h, const cudnnFilterDescriptor_t wd,
                                                          const cudnnTensorDescriptor_t dyd,
                                                          const cudnnConvolutionDescriptor_t cd,
                                                          const cudnnTensorDescriptor_t dxd, const int requested,
                                                          int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
    Conv g;
    if (!h) return CUDNN_STATUS_BAD_PARAM;
    if (cudnnStatus_t s = conv_of(dxd, wd, cd, dyd, g); s != CUDNN_STATUS_SUCCESS) return s;
    return list_algos(data_algos(g), g, cd->math, requested, returned, perf);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                            const cudnnTensorDescriptor_t dyd,
                                                            const cudnnConvolutionDescriptor_t cd,
                                                            const cudnnFilterDescriptor_t dwd, const int requested,
                                                            int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
    Conv g;
    if (!h) return CUDNN_STATUS_BAD_PARAM;
    if (cudnnStatus_t s = conv_of(xd, dwd, cd, dyd, g); s != CUDNN_STATUS_SUCCESS) return s;
    return list_algos(filter_algos(g), g, cd->math, requested, returned, perf);
}

template <typename Algo>
static cudnnStatus_t workspace_of(const std::vector<Offer<Algo>>& offers, Algo a, size_t* bytes) {
    const Offer<Algo>* o = find_offer(offers, a);
    if (!o) return CUDNN_STATUS_NOT_SUPPORTED;
    if (!bytes) return CUDNN_STATUS_BAD_PARAM;
    *bytes = o->workspace;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                      const cudnnFilterDescriptor_t wd,
                                                      const cudnnConvolutionDescriptor_t cd,
                                                      const cudnnTensorDescriptor_t yd, cudnnConvolutionFwdAlgo_t a,
                                                      size_t* bytes) {
    Conv g;
    if (!h) return CUDNN_STATUS_BAD_PARAM;
    if (cudnnStatus_t s = conv_of(xd, wd, cd, yd, g); s != CUDNN_STATUS_SUCCESS) return s;
    return workspace_of(forward_algos(g), a, bytes);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t h, const cudnnFilterDescriptor_t wd,
                                                           const cudnnTensorDescriptor_t dyd,
                                                           const cudnnConvolutionDescriptor_t cd,
                                                           const cudnnTensorDescriptor_t dxd,
                                                           cudnnConvolutionBwdDataAlgo_t a, size_t* bytes) {
    Conv g;
    if (!h) return CUDNN_STATUS_BAD_PARAM;
    if (cudnnStatus_t s = conv_of(dxd, wd, cd, dyd, g); s != CUDNN_STATUS_SUCCESS) return s;
    return workspace_of(data_algos(g), a, bytes);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                             const cudnnTensorDescriptor_t dyd,
                                                             const cudnnConvolutionDescriptor_t cd,
                                                             const cudnnFilterDescriptor_t dwd,
                                                             cudnnConvolutionBwdFilterAlgo_t a, size_t* bytes) {
    Conv g;
    if (!h) return CUDNN_STATUS_BAD_PARAM;
    if (cudnnStatus_t s = conv_of(xd, dwd, cd, dyd, g); s != CUDNN_STATUS_SUCCESS) return s;
    return workspace_of(filter_algos(g), a, bytes);
}

// ---------------------------------------------------------------------------------------------
// Convolutions. For output pixel (oh, ow) and tap (r, s), the input pixel read is
// (oh·u − pad_h + r·dil_h, ow·v − pad_w + s·dil_w); taps that land in the padding read zero.

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t xd,
                                      const void* x, const cudnnFilterDescriptor_t wd, const void* w,
                                      const cudnnConvolutionDescriptor_t cd, cudnnConvolutionFwdAlgo_t algo,
                                      void* workspace, size_t workspace_bytes, const void* beta,
                                      const cudnnTensorDescriptor_t yd, void* y) {
    const char* call = "cudnnConvolutionForward";
    Conv g;
    if (!h || !alpha || !beta || !x || !w || !y) return CUDNN_STATUS_BAD_PARAM;
    if (cudnnStatus_t s = conv_of(xd, wd, cd, yd, g); s != CUDNN_STATUS_SUCCESS) return s;
    Offer<cudnnConvolutionFwdAlgo_t> offer;
    if (cudnnStatus_t s = check_algo(forward_algos(g), algo, workspace, workspace_bytes, offer);
        s != CUDNN_STATUS_SUCCESS)
        return s;
    auto checks = [=] {
        check_workspace(call, workspace, offer.workspace);
        check_device(call, "x", x, g.x_size());
        check_device(call, "w", w, g.w_size());
        check_device(call, "y", y, g.y_size());
    };
    checks();
    const Blend blend(alpha, beta);
    return enqueue(h, call, [=] {
        checks();
        emu::fill_poison(workspace, offer.workspace);  // scratch: whatever was there is gone
        std::vector<float> xv = input(x, g.x_size(), g.tf32), wv = input(w, g.w_size(), g.tf32);
        float* out = static_cast<float*>(y);
        for (int n = 0; n < g.N; n++)
            for (int k = 0; k < g.K; k++) {
                const int group = k / g.Kg();
                for (int oh = 0; oh < g.OH; oh++)
                    for (int ow = 0; ow < g.OW; ow++) {
                        double acc = 0;
                        for (int c = 0; c < g.Cg; c++)
                            for (int r = 0; r < g.R; r++) {
                                const int ih = oh * g.u - g.pad_h + r * g.dil_h;
                                if (ih < 0 || ih >= g.H) continue;
                                for (int s = 0; s < g.S; s++) {
                                    const int iw = ow * g.v - g.pad_w + s * g.dil_w;
                                    if (iw < 0 || iw >= g.W) continue;
                                    acc += (double)xv[g.x_at(n, group * g.Cg + c, ih, iw)] * wv[g.w_at(k, c, r, s)];
                                }
                            }
                        blend(out, g.y_at(n, k, oh, ow), acc);
                    }
            }
    });
}

// dx(n, ch, ih, iw) = Σ over the outputs k of ch's group and the taps (r, s) whose window at some
// output pixel (oh, ow) reads (ih, iw): dy(n, k, oh, ow)·w(k, ch mod Cg, r, s).
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void* alpha, const cudnnFilterDescriptor_t wd,
                                           const void* w, const cudnnTensorDescriptor_t dyd, const void* dy,
                                           const cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdDataAlgo_t algo,
                                           void* workspace, size_t workspace_bytes, const void* beta,
                                           const cudnnTensorDescriptor_t dxd, void* dx) {
    const char* call = "cudnnConvolutionBackwardData";
    Conv g;
    if (!h || !alpha || !beta || !w || !dy || !dx) return CUDNN_STATUS_BAD_PARAM;
    if (cudnnStatus_t s = conv_of(dxd, wd, cd, dyd, g); s != CUDNN_STATUS_SUCCESS) return s;
    Offer<cudnnConvolutionBwdDataAlgo_t> offer;
    if (cudnnStatus_t s = check_algo(data_algos(g), algo, workspace, workspace_bytes, offer);
        s != CUDNN_STATUS_SUCCESS)
        return s;
    auto checks = [=] {
        check_workspace(call, workspace, offer.workspace);
        check_device(call, "w", w, g.w_size());
        check_device(call, "dy", dy, g.y_size());
        check_device(call, "dx", dx, g.x_size());
    };
    checks();
    const Blend blend(alpha, beta);
    return enqueue(h, call, [=] {
        checks();
        emu::fill_poison(workspace, offer.workspace);
        std::vector<float> wv = input(w, g.w_size(), g.tf32), dyv = input(dy, g.y_size(), g.tf32);
        float* out = static_cast<float*>(dx);
        Sum sum{!offer.deterministic, next_start(), {}};
        for (int n = 0; n < g.N; n++)
            for (int ch = 0; ch < g.C; ch++) {
                const int group = ch / g.Cg, c = ch % g.Cg;
                for (int ih = 0; ih < g.H; ih++)
                    for (int iw = 0; iw < g.W; iw++) {
                        sum.terms.clear();
                        for (int k = group * g.Kg(); k < (group + 1) * g.Kg(); k++)
                            for (int r = 0; r < g.R; r++) {
                                const int th = ih + g.pad_h - r * g.dil_h;  // = oh·u
                                if (th < 0 || th % g.u != 0 || th / g.u >= g.OH) continue;
                                for (int s = 0; s < g.S; s++) {
                                    const int tw = iw + g.pad_w - s * g.dil_w;
                                    if (tw < 0 || tw % g.v != 0 || tw / g.v >= g.OW) continue;
                                    sum.terms.push_back(dyv[g.y_at(n, k, th / g.u, tw / g.v)] *
                                                        wv[g.w_at(k, c, r, s)]);
                                }
                            }
                        blend(out, g.x_at(n, ch, ih, iw), sum.total());
                    }
            }
    });
}

// dw(k, c, r, s) = Σ over images and output pixels of dy(n, k, oh, ow)·x(n, group·Cg + c, ih, iw).
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t xd,
                                             const void* x, const cudnnTensorDescriptor_t dyd, const void* dy,
                                             const cudnnConvolutionDescriptor_t cd,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workspace,
                                             size_t workspace_bytes, const void* beta,
                                             const cudnnFilterDescriptor_t dwd, void* dw) {
    const char* call = "cudnnConvolutionBackwardFilter";
    Conv g;
    if (!h || !alpha || !beta || !x || !dy || !dw) return CUDNN_STATUS_BAD_PARAM;
    if (cudnnStatus_t s = conv_of(xd, dwd, cd, dyd, g); s != CUDNN_STATUS_SUCCESS) return s;
    Offer<cudnnConvolutionBwdFilterAlgo_t> offer;
    if (cudnnStatus_t s = check_algo(filter_algos(g), algo, workspace, workspace_bytes, offer);
        s != CUDNN_STATUS_SUCCESS)
        return s;
    auto checks = [=] {
        check_workspace(call, workspace, offer.workspace);
        check_device(call, "x", x, g.x_size());
        check_device(call, "dy", dy, g.y_size());
        check_device(call, "dw", dw, g.w_size());
    };
    checks();
    const Blend blend(alpha, beta);
    return enqueue(h, call, [=] {
        checks();
        emu::fill_poison(workspace, offer.workspace);
        std::vector<float> xv = input(x, g.x_size(), g.tf32), dyv = input(dy, g.y_size(), g.tf32);
        float* out = static_cast<float*>(dw);
        Sum sum{!offer.deterministic, next_start(), {}};
        for (int k = 0; k < g.K; k++) {
            const int group = k / g.Kg();
            for (int c = 0; c < g.Cg; c++)
                for (int r = 0; r < g.R; r++)
                    for (int s = 0; s < g.S; s++) {
                        sum.terms.clear();
                        for (int n = 0; n < g.N; n++)
                            for (int oh = 0; oh < g.OH; oh++) {
                                const int ih = oh * g.u - g.pad_h + r * g.dil_h;
                                if (ih < 0 || ih >= g.H) continue;
                                for (int ow = 0; ow < g.OW; ow++) {
                                    const int iw = ow * g.v - g.pad_w + s * g.dil_w;
                                    if (iw < 0 || iw >= g.W) continue;
                                    sum.terms.push_back(dyv[g.y_at(n, k, oh, ow)] *
                                                        xv[g.x_at(n, group * g.Cg + c, ih, iw)]);
                                }
                            }
                        // The flip of CUDNN_CONVOLUTION applies to the stored gradient as to the filter.
                        blend(out, g.w_at(k, c, r, s), sum.total());
                    }
        }
    });
}

// db[k] = Σ dy over images and pixels; db is 1×K×1×1.
cudnnStatus_t cudnnConvolutionBackwardBias(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t dyd,
                                           const void* dy, const void* beta, const cudnnTensorDescriptor_t dbd,
                                           void* db) {
    const char* call = "cudnnConvolutionBackwardBias";
    if (!h || !alpha || !beta || !dy || !db || !dyd || !dbd || !dyd->set || !dbd->set) return CUDNN_STATUS_BAD_PARAM;
    if (dbd->n != 1 || dbd->c != dyd->c || dbd->h != 1 || dbd->w != 1) return CUDNN_STATUS_BAD_PARAM;
    const size_t N = dyd->n, K = dyd->c, P = (size_t)dyd->h * dyd->w;
    auto checks = [=] {
        check_device(call, "dy", dy, N * K * P);
        check_device(call, "db", db, K);
    };
    checks();
    const Blend blend(alpha, beta);
    return enqueue(h, call, [=] {
        checks();
        const float* g = static_cast<const float*>(dy);
        for (size_t k = 0; k < K; k++) {
            double acc = 0;
            for (size_t n = 0; n < N; n++)
                for (size_t p = 0; p < P; p++) acc += g[(n * K + k) * P + p];
            blend(static_cast<float*>(db), k, acc);
        }
    });
}

cudnnStatus_t cudnnAddTensor(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t ad, const void* A,
                             const void* beta, const cudnnTensorDescriptor_t cd, void* C) {
    const char* call = "cudnnAddTensor";
    if (!h || !alpha || !beta || !A || !C || !ad || !cd || !ad->set || !cd->set) return CUDNN_STATUS_BAD_PARAM;
    const cudnnTensorStruct a = *ad, c = *cd;  // the descriptors as they are at the call
    const int a_dims[4] = {a.n, a.c, a.h, a.w}, c_dims[4] = {c.n, c.c, c.h, c.w};
    for (int d = 0; d < 4; d++)
        if (a_dims[d] != 1 && a_dims[d] != c_dims[d]) return CUDNN_STATUS_BAD_PARAM;
    auto checks = [=] {
        check_device(call, "A", A, (size_t)a.n * a.c * a.h * a.w);
        check_device(call, "C", C, (size_t)c.n * c.c * c.h * c.w);
    };
    checks();
    const Blend blend(alpha, beta);
    return enqueue(h, call, [=] {
        checks();
        const float* in = static_cast<const float*>(A);
        float* out = static_cast<float*>(C);
        size_t i = 0;
        for (int n = 0; n < c.n; n++)
            for (int ch = 0; ch < c.c; ch++)
                for (int y = 0; y < c.h; y++)
                    for (int x = 0; x < c.w; x++, i++) {
                        // A's index with its size-1 dimensions pinned to 0.
                        size_t ai = (((size_t)(a.n == 1 ? 0 : n) * a.c + (a.c == 1 ? 0 : ch)) * a.h +
                                     (a.h == 1 ? 0 : y)) * a.w + (a.w == 1 ? 0 : x);
                        blend(out, i, in[ai]);
                    }
    });
}

// ---------------------------------------------------------------------------------------------
// Batch normalization (spatial): channel c's M = N·H·W values of x are normalized together.

namespace {

struct Bn {
    size_t N, C, S;  // x as [N, C, S], S = H·W
    size_t size() const { return N * C * S; }
    size_t M() const { return N * S; }
    template <typename F>
    void for_channel(size_t c, F f) const {
        for (size_t n = 0; n < N; n++)
            for (size_t s = 0; s < S; s++) f((n * C + c) * S + s);
    }
};

// x and y (and dy) share dims; the parameter descriptor is 1×C×1×1.
cudnnStatus_t bn_of(cudnnBatchNormMode_t mode, const cudnnTensorStruct* x, const cudnnTensorStruct* y,
                    const cudnnTensorStruct* p, double epsilon, Bn& b) {
    if (!x || !y || !p || !x->set || !y->set || !p->set) return CUDNN_STATUS_BAD_PARAM;
    if (mode == CUDNN_BATCHNORM_PER_ACTIVATION) return CUDNN_STATUS_NOT_SUPPORTED;
    if (mode != CUDNN_BATCHNORM_SPATIAL && mode != CUDNN_BATCHNORM_SPATIAL_PERSISTENT) return CUDNN_STATUS_BAD_PARAM;
    if (x->n != y->n || x->c != y->c || x->h != y->h || x->w != y->w) return CUDNN_STATUS_BAD_PARAM;
    if (p->n != 1 || p->c != x->c || p->h != 1 || p->w != 1) return CUDNN_STATUS_BAD_PARAM;
    if (!(epsilon >= CUDNN_BN_MIN_EPSILON)) return CUDNN_STATUS_BAD_PARAM;
    b = {(size_t)x->n, (size_t)x->c, (size_t)x->h * x->w};
    if (b.M() < 2) return CUDNN_STATUS_NOT_SUPPORTED;  // not modelled (see cudnn.h)
    return CUDNN_STATUS_SUCCESS;
}

// The batch mean and biased variance of channel c (two passes, in double).
void batch_stats(const Bn& b, const float* x, size_t c, double& mean, double& var) {
    double s = 0, sq = 0;
    b.for_channel(c, [&](size_t i) { s += x[i]; });
    mean = s / b.M();
    b.for_channel(c, [&](size_t i) { sq += (x[i] - mean) * (x[i] - mean); });
    var = sq / b.M();
}

}  // namespace

cudnnStatus_t cudnnBatchNormalizationForwardTraining(cudnnHandle_t h, cudnnBatchNormMode_t mode, const void* alpha,
                                                     const void* beta, const cudnnTensorDescriptor_t xd, const void* x,
                                                     const cudnnTensorDescriptor_t yd, void* y,
                                                     const cudnnTensorDescriptor_t pd, const void* scale,
                                                     const void* bias, double factor, void* running_mean,
                                                     void* running_var, double epsilon, void* save_mean,
                                                     void* save_inv_var) {
    const char* call = "cudnnBatchNormalizationForwardTraining";
    Bn b;
    if (!h || !alpha || !beta || !x || !y || !scale || !bias) return CUDNN_STATUS_BAD_PARAM;
    if ((running_mean == nullptr) != (running_var == nullptr)) return CUDNN_STATUS_BAD_PARAM;
    if ((save_mean == nullptr) != (save_inv_var == nullptr)) return CUDNN_STATUS_BAD_PARAM;
    if (cudnnStatus_t s = bn_of(mode, xd, yd, pd, epsilon, b); s != CUDNN_STATUS_SUCCESS) return s;
    auto checks = [=] {
        check_device(call, "x", x, b.size());
        check_device(call, "y", y, b.size());
        for (const void* p : {scale, bias, (const void*)running_mean, (const void*)running_var,
                              (const void*)save_mean, (const void*)save_inv_var})
            if (p) check_device(call, "a per-channel parameter", p, b.C);
    };
    checks();
    const Blend blend(alpha, beta);
    return enqueue(h, call, [=] {
        checks();
        const float* in = static_cast<const float*>(x);
        float* out = static_cast<float*>(y);
        for (size_t c = 0; c < b.C; c++) {
            double mean, var;
            batch_stats(b, in, c, mean, var);
            const double inv_std = 1.0 / std::sqrt(var + epsilon);
            const double g = static_cast<const float*>(scale)[c], bb = static_cast<const float*>(bias)[c];
            b.for_channel(c, [&](size_t i) { blend(out, i, g * (in[i] - mean) * inv_std + bb); });
            if (running_mean) {
                float& rm = static_cast<float*>(running_mean)[c];
                float& rv = static_cast<float*>(running_var)[c];
                rm = (float)((1 - factor) * rm + factor * mean);
                rv = (float)((1 - factor) * rv + factor * var * b.M() / (b.M() - 1));
            }
            if (save_mean) {
                static_cast<float*>(save_mean)[c] = (float)mean;
                static_cast<float*>(save_inv_var)[c] = (float)inv_std;
            }
        }
    });
}

cudnnStatus_t cudnnBatchNormalizationForwardInference(cudnnHandle_t h, cudnnBatchNormMode_t mode, const void* alpha,
                                                      const void* beta, const cudnnTensorDescriptor_t xd,
                                                      const void* x, const cudnnTensorDescriptor_t yd, void* y,
                                                      const cudnnTensorDescriptor_t pd, const void* scale,
                                                      const void* bias, const void* mean, const void* var,
                                                      double epsilon) {
    const char* call = "cudnnBatchNormalizationForwardInference";
    Bn b;
    if (!h || !alpha || !beta || !x || !y || !scale || !bias || !mean || !var) return CUDNN_STATUS_BAD_PARAM;
    if (cudnnStatus_t s = bn_of(mode, xd, yd, pd, epsilon, b); s != CUDNN_STATUS_SUCCESS) return s;
    auto checks = [=] {
        check_device(call, "x", x, b.size());
        check_device(call, "y", y, b.size());
        for (const void* p : {scale, bias, mean, var}) check_device(call, "a per-channel parameter", p, b.C);
    };
    checks();
    const Blend blend(alpha, beta);
    return enqueue(h, call, [=] {
        checks();
        const float* in = static_cast<const float*>(x);
        float* out = static_cast<float*>(y);
        for (size_t c = 0; c < b.C; c++) {
            const double m = static_cast<const float*>(mean)[c];
            const double inv_std = 1.0 / std::sqrt((double)static_cast<const float*>(var)[c] + epsilon);
            const double g = static_cast<const float*>(scale)[c], bb = static_cast<const float*>(bias)[c];
            b.for_channel(c, [&](size_t i) { blend(out, i, g * (in[i] - m) * inv_std + bb); });
        }
    });
}

// With x̂ = (x − mean)·inv_std: dBias = Σ dy, dScale = Σ dy·x̂, and
// dx = scale·inv_std·(dy − dBias/M − x̂·dScale/M) (the batch statistics depend on x).
cudnnStatus_t cudnnBatchNormalizationBackward(cudnnHandle_t h, cudnnBatchNormMode_t mode, const void* alpha_data,
                                              const void* beta_data, const void* alpha_param, const void* beta_param,
                                              const cudnnTensorDescriptor_t xd, const void* x,
                                              const cudnnTensorDescriptor_t dyd, const void* dy,
                                              const cudnnTensorDescriptor_t dxd, void* dx,
                                              const cudnnTensorDescriptor_t pd, const void* scale, void* dscale,
                                              void* dbias, double epsilon, const void* saved_mean,
                                              const void* saved_inv_var) {
    const char* call = "cudnnBatchNormalizationBackward";
    Bn b, bdy;
    if (!h || !alpha_data || !beta_data || !alpha_param || !beta_param) return CUDNN_STATUS_BAD_PARAM;
    if (!x || !dy || !dx || !scale || !dscale || !dbias) return CUDNN_STATUS_BAD_PARAM;
    if ((saved_mean == nullptr) != (saved_inv_var == nullptr)) return CUDNN_STATUS_BAD_PARAM;
    if (cudnnStatus_t s = bn_of(mode, xd, dxd, pd, epsilon, b); s != CUDNN_STATUS_SUCCESS) return s;
    if (cudnnStatus_t s = bn_of(mode, xd, dyd, pd, epsilon, bdy); s != CUDNN_STATUS_SUCCESS) return s;
    auto checks = [=] {
        check_device(call, "x", x, b.size());
        check_device(call, "dy", dy, b.size());
        check_device(call, "dx", dx, b.size());
        for (const void* p : {scale, (const void*)dscale, (const void*)dbias, saved_mean, saved_inv_var})
            if (p) check_device(call, "a per-channel parameter", p, b.C);
    };
    checks();
    const Blend blend_data(alpha_data, beta_data), blend_param(alpha_param, beta_param);
    return enqueue(h, call, [=] {
        checks();
        const float* in = static_cast<const float*>(x);
        const float* g = static_cast<const float*>(dy);
        for (size_t c = 0; c < b.C; c++) {
            double mean, inv_std;
            if (saved_mean) {
                mean = static_cast<const float*>(saved_mean)[c];
                inv_std = static_cast<const float*>(saved_inv_var)[c];
            } else {
                double var;
                batch_stats(b, in, c, mean, var);
                inv_std = 1.0 / std::sqrt(var + epsilon);
            }
            double sum_dy = 0, sum_dy_xhat = 0;
            b.for_channel(c, [&](size_t i) {
                sum_dy += g[i];
                sum_dy_xhat += g[i] * (in[i] - mean) * inv_std;
            });
            const double k = static_cast<const float*>(scale)[c] * inv_std, M = (double)b.M();
            b.for_channel(c, [&](size_t i) {
                const double xhat = (in[i] - mean) * inv_std;
                blend_data(static_cast<float*>(dx), i, k * (g[i] - sum_dy / M - xhat * sum_dy_xhat / M));
            });
            blend_param(static_cast<float*>(dscale), c, sum_dy_xhat);
            blend_param(static_cast<float*>(dbias), c, sum_dy);
        }
    });
}
