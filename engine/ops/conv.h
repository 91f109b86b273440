// engine/ops/conv.h: convolution and batch norm, NCHW layout (forward and backward in
// engine/ops/conv.cpp, CPU kernels in engine/cpu/conv.cpp). Used by ViT patch embedding
// (kernel = stride = patch) and ConvMixer (patch conv, depthwise k×k, 1×1 convs, batch norm).
// Bad shapes throw engine::Error naming the op and the shapes.
#pragma once
#include "engine/tensor.h"

namespace engine {

// x [N, Cin, H, W], w [Cout, Cin, kh, kw], b [Cout] optional -> [N, Cout, OH, OW] with
// OH = (H + 2·padding − kh)/stride + 1 (and OW alike), zero padding. im2col + GEMM per image;
// a 1×1, stride 1, unpadded conv uses the image itself as the column matrix.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), int stride = 1, int padding = 0);
// Depthwise: x [N, C, H, W], w [C, 1, k, k], b [C] optional, stride 1, 'same' zero padding k/2
// (k odd) -> [N, C, H, W].
Tensor depthwise_conv2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());
// Batch norm per channel over N, H, W of x [N, C, H, W] (or over N of [N, C], over N, L of
// [N, C, L]): y = (x − mean)/sqrt(var + eps)·weight + bias; weight, bias [C] optional.
// Training: the batch mean and biased variance; running_mean/var [C] are updated in place, outside
// autograd, as PyTorch does: new = (1 − momentum)·old + momentum·batch, with the batch variance
// made unbiased for running_var. They may both be undefined in training (no tracking). Eval: the
// running statistics normalize (required). The backward of training mode includes the gradient
// through the batch statistics.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                  Tensor& running_var, bool training, float momentum = 0.1f, float eps = 1e-5f);

}  // namespace engine
