// engine/cuda/cudnn.h: the cuDNN switch, and conv2d, depthwise conv2d and batch norm through cuDNN
// (engine/cuda/cudnn.cu), in plain C++ so engine/ops/conv.cpp can call it. (The LSTM's cuDNN path is
// engine/cuda/cudnn_rnn.h.) The own kernels of engine/cuda/conv.cu stay as
// the fallback and the reference: conv.cu's conv2d_* and depthwise_conv2d_* try the cuDNN path
// first when it is switched on; batch norm, whose cuDNN calls have another shape (statistics,
// normalization and running update in one call), is chosen by engine/ops/conv.cpp.
//
// Each cuDNN path returns false where cuDNN cannot give the engine's semantics for that call, and
// the caller then runs its own kernel: empty tensors (cuDNN refuses zero sizes), sizes beyond int
// (cuDNN's legacy API takes int), bf16 GEMM precision for conv2d (the own path rounds GEMM inputs
// to bf16; cuDNN would need bf16 tensors), a batch-norm eps below CUDNN_BN_MIN_EPSILON, and no
// deterministic algorithm offered for a convolution. A cuDNN error otherwise throws engine::Error
// naming the op, the cuDNN call, its status and the geometry.
#pragma once
#include <cstdint>
#include "engine/cpu/conv.h"  // ConvGeometry (plain C++)

namespace engine::cuda {

// The switch. cudnn_built(): the build has cuDNN (the nvcc build when the Makefile found the library;
// the emulated build always has the emulator's stand-in). The switch starts on unless the
// environment says INITLAB_CUDNN=0; set_cudnn(false) selects the own kernels. Returns the previous
// setting. cudnn_enabled() = built and switched on.
bool cudnn_built();
bool set_cudnn(bool on);
bool cudnn_enabled();
// The LSTM's own switch, off unless the environment says INITLAB_CUDNN_LSTM=1: on the H200 (session
// 10, 512 hidden, 8 layers, batch 32, 256 steps) the own kernels took 61.7 ms a step and cuDNN's
// LSTM 82.9. The LSTM goes through cuDNN when both switches are on (cudnn_lstm_enabled()).
bool set_cudnn_lstm(bool on);
bool cudnn_lstm_enabled();
// Calls that went through cuDNN since the start (each path that returned true): lets tests see that
// the cuDNN path ran rather than declined.
int64_t cudnn_calls();

// conv2d (groups = 1) and depthwise (groups = Cin = Cout, stride 1, padding k/2) in one geometry.
struct CudnnConv {
    int64_t N, Cin, H, W, Cout, kh, kw, stride, pad, groups, OH, OW;
};
CudnnConv cudnn_conv2d_geometry(const cpu::ConvGeometry& g);
CudnnConv cudnn_depthwise_geometry(int64_t N, int64_t C, int64_t H, int64_t W, int64_t k);

// y = conv(x, w) (+ b); dx, dw, db where not null. `op` names the engine op in errors.
bool cudnn_conv_forward(const char* op, const float* x, const float* w, const float* b, float* y,
                        const CudnnConv& g);
bool cudnn_conv_backward(const char* op, const float* x, const float* w, const float* dy, float* dx, float* dw,
                         float* db, const CudnnConv& g);

// Batch norm on x viewed as [N, C, S] (cuDNN's spatial mode on [N, C, S, 1]). weight and bias may be
// null (1 and 0). Training: y, the batch mean and 1/sqrt(biased var + eps) into save_mean /
// save_rstd, and the running statistics (null: not tracked) moved by `momentum` with the unbiased
// batch variance, as the engine's kernels do. Inference: y from the running statistics. Backward
// (batch statistics only: cuDNN has no backward for the eval-mode formula): dx, dweight, dbias
// where not null, from the saved mean and rstd.
bool cudnn_batch_norm_training(const float* x, const float* weight, const float* bias, float* y,
                               float* running_mean, float* running_var, float* save_mean, float* save_rstd,
                               int64_t N, int64_t C, int64_t S, float momentum, float eps);
bool cudnn_batch_norm_inference(const float* x, const float* weight, const float* bias, const float* running_mean,
                                const float* running_var, float* y, int64_t N, int64_t C, int64_t S, float eps);
bool cudnn_batch_norm_backward(const float* x, const float* dy, const float* save_mean, const float* save_rstd,
                               const float* weight, float* dx, float* dweight, float* dbias, int64_t N, int64_t C,
                               int64_t S, float eps);

}  // namespace engine::cuda
