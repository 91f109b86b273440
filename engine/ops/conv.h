// engine/ops/conv.h: convolution and batch norm, NCHW layout.
#pragma once
#include "engine/tensor.h"

namespace engine {

// x [N, Cin, H, W], w [Cout, Cin, kh, kw], b [Cout] optional. im2col + GEMM.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), int stride = 1, int padding = 0);
// Depthwise: x [N, C, H, W], w [C, 1, k, k], b [C] optional, stride 1, 'same' padding (k odd).
Tensor depthwise_conv2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());
// Batch norm over N, H, W per channel of x [N, C, H, W] (or [N, C]). In training it uses the
// batch statistics and updates running_mean/var in place (momentum as PyTorch: new = (1-m)·old +
// m·batch, unbiased variance); in eval it uses the running statistics. weight/bias optional.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                  Tensor& running_var, bool training, float momentum = 0.1f, float eps = 1e-5f);

}  // namespace engine
