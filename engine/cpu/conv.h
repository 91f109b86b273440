// engine/cpu/conv.h: CPU kernels for convolution (im2col + GEMM, depthwise direct loops) and
// batch norm, NCHW layout, on raw contiguous float arrays. The ops around them (shape checks,
// autograd) are in engine/ops/conv.cpp; a CUDA backend can offer the same signatures.
#pragma once
#include <cstdint>

namespace engine::cpu {

// Geometry of one conv2d call: x [N, Cin, H, W], w [Cout, Cin, kh, kw], y [N, Cout, OH, OW].
struct ConvGeometry {
    int64_t N, Cin, H, W;
    int64_t Cout, kh, kw;
    int64_t stride, pad;
    int64_t OH, OW;

    int64_t patch() const { return Cin * kh * kw; }  // rows of an image's column matrix (K)
    int64_t out_pixels() const { return OH * OW; }   // columns of an image's column matrix (P)
    // A 1×1, stride 1, unpadded conv: the column matrix of an image is the image itself.
    bool pointwise() const { return kh == 1 && kw == 1 && stride == 1 && pad == 0; }
};

// One image [Cin, H, W] to its column matrix [Cin·kh·kw, OH·OW] (zeros where the window hangs
// over the padding), and back: col2im adds each column entry into the pixel it came from, so
// dx_image must be zeroed first.
void im2col(const float* image, float* cols, const ConvGeometry& g);
void col2im(const float* cols, float* dx_image, const ConvGeometry& g);

// y = conv(x, w) + b; b may be null.
void conv2d_forward(const float* x, const float* w, const float* b, float* y, const ConvGeometry& g);
// Gradients of conv2d_forward; pass null for any of dx, dw, db that is not needed.
void conv2d_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db,
                     const ConvGeometry& g);

// Depthwise conv, stride 1, zero padding k/2 on each side (k odd): x, y [N, C, H, W], w [C, k, k],
// b [C] or null.
void depthwise_conv2d_forward(const float* x, const float* w, const float* b, float* y, int64_t N, int64_t C,
                              int64_t H, int64_t W, int64_t k);
// Pass null for any of dx, dw, db that is not needed; x is read only for dw (may be null without it).
void depthwise_conv2d_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db,
                               int64_t N, int64_t C, int64_t H, int64_t W, int64_t k);

// Batch norm on x viewed as [N, C, S] (S = H·W, or 1 for [N, C]), statistics per channel over N·S.
// Per-channel mean and biased variance of x.
void batch_norm_stats(const float* x, float* mean, float* var, int64_t N, int64_t C, int64_t S);
// rstd = 1/sqrt(var + eps), per channel.
void batch_norm_rstd(const float* var, float eps, float* rstd, int64_t C);
// y = (x − mean)·rstd·weight + bias; weight and bias may be null (1 and 0).
void batch_norm_forward(const float* x, const float* mean, const float* rstd, const float* weight,
                        const float* bias, float* y, int64_t N, int64_t C, int64_t S);
// With x̂ = (x − mean)·rstd and g = dy·weight:
//   batch_stats: dx = rstd·(g − mean(g) − x̂·mean(g·x̂))   (mean and rstd were computed from x)
//   otherwise:   dx = rstd·g                              (mean and rstd are constants)
//   dweight = Σ dy·x̂,  dbias = Σ dy.
// weight may be null (1); pass null for any of dx, dweight, dbias that is not needed.
void batch_norm_backward(const float* x, const float* dy, const float* mean, const float* rstd, const float* weight,
                         float* dx, float* dweight, float* dbias, int64_t N, int64_t C, int64_t S,
                         bool batch_stats);
// running = (1 − momentum)·running + momentum·batch, with the variance made unbiased (·count/(count−1)).
void batch_norm_update_running(float* running_mean, float* running_var, const float* batch_mean,
                               const float* batch_var, int64_t C, int64_t count, float momentum);

}  // namespace engine::cpu
