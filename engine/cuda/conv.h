// engine/cuda/conv.h: convolution, depthwise convolution and batch norm on the GPU
// (engine/cuda/conv.cu), with the signatures of engine/cpu/conv.h (the same ConvGeometry) so
// ON_DEVICE can pick either. NCHW layout, contiguous device memory.
//
// Deterministic: no atomics; every sum is taken by a fixed tree that depends only on the shape, so
// the same inputs give the same bits on every run.
//
// cuDNN (engine/cuda/cudnn.h): when the build has it and engine::cuda::set_cudnn() has not turned it
// off (nor INITLAB_CUDNN=0), conv2d_forward/backward and depthwise_conv2d_forward/backward run
// through cuDNN (deterministic algorithms only) and these kernels are the fallback; batch norm's
// cuDNN path is chosen in engine/ops/conv.cpp.
#pragma once
#include <cstdint>
#include "engine/cpu/conv.h"  // ConvGeometry (plain C++)
#include "engine/cuda/cudnn.h"    // the cuDNN path and its switch, set_cudnn()

namespace engine::cuda {

using ConvGeometry = engine::cpu::ConvGeometry;

// One image: [Cin, H, W] -> its column matrix [Cin·kh·kw, OH·OW], and back (col2im ADDS into
// dx_image, as the CPU's does; each pixel gathers its taps, so no atomics are needed).
void im2col(const float* image, float* cols, const ConvGeometry& g);
void col2im(const float* cols, float* dx_image, const ConvGeometry& g);

// im2col over a chunk of images + cuBLAS GEMM (engine::cuda::gemm); 1x1 stride-1 unpadded convs
// skip im2col. The column matrices live in a scratch buffer of at most set_conv2d_scratch_limit()
// floats (images are processed in chunks that fit; at least one image at a time).
void conv2d_forward(const float* x, const float* w, const float* b, float* y, const ConvGeometry& g);
void conv2d_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db,
                     const ConvGeometry& g);
// Sets the scratch limit in floats (default 2^26 = 256 MiB) and returns the previous one; for
// tests of the chunked path.
int64_t set_conv2d_scratch_limit(int64_t floats);

void depthwise_conv2d_forward(const float* x, const float* w, const float* b, float* y, int64_t N, int64_t C,
                              int64_t H, int64_t W, int64_t k);
// Pass null for any of dx, dw, db that is not needed; x is read only for dw (may be null without it).
void depthwise_conv2d_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db,
                               int64_t N, int64_t C, int64_t H, int64_t W, int64_t k);

void batch_norm_stats(const float* x, float* mean, float* var, int64_t N, int64_t C, int64_t S);
void batch_norm_rstd(const float* var, float eps, float* rstd, int64_t C);
void batch_norm_forward(const float* x, const float* mean, const float* rstd, const float* weight,
                        const float* bias, float* y, int64_t N, int64_t C, int64_t S);
void batch_norm_backward(const float* x, const float* dy, const float* mean, const float* rstd, const float* weight,
                         float* dx, float* dweight, float* dbias, int64_t N, int64_t C, int64_t S,
                         bool batch_stats);
void batch_norm_update_running(float* running_mean, float* running_var, const float* batch_mean,
                               const float* batch_var, int64_t C, int64_t count, float momentum);

}  // namespace engine::cuda
