// engine/cuda/cudnn_rnn.h: one LSTM layer through cuDNN's RNN API (engine/cuda/cudnn_rnn.cu), in
// plain C++ so engine/ops/rnn.cpp can call it. engine/ops/rnn.cpp's `lstm_layer` takes this path
// for a CUDA tensor when cudnn_lstm_sizes() accepts the call; otherwise it runs the own path (one
// GEMM for the input projections, then `lstm_sequence`: engine/cuda/rnn.cu's cell kernels and
// cuBLAS), which stays the reference the [cuda][cudnn] tests compare this one with.
//
// The weights stay the nn LSTM's own tensors, PyTorch's layout: w_ih [4H, in], w_hh [4H, H],
// b_ih and b_hh [4H], gate order i, f, g, o. cuDNN keeps its parameters in one opaque "weight
// space"; the forward copies the eight matrices and eight biases into it at the addresses
// cudnnGetRNNWeightParams gives (linear layers 0-3 the input gates i, f, g, o; 4-7 the recurrent
// ones, which is the same order), and the backward copies the gradients out of cuDNN's gradient
// weight space the same way. Those copies are a few microseconds against the recurrence itself.
#pragma once
#include <cstddef>
#include <cstdint>

namespace engine::cuda {

// One layer, time-major: x [T, B, in], h0 and c0 [B, H].
struct CudnnLstm {
    int64_t T, B, in, H;
};

// Device memory the caller keeps from the forward to the backward: the weight space (the packed
// weights the backward reads again) and the reserve space (cuDNN's saved activations; the backward
// overwrites it, so each forward's may be used by one backward only).
struct CudnnLstmSizes {
    size_t weight_bytes = 0, reserve_bytes = 0;
};

// Whether cuDNN takes this layer, and its sizes. False (the own path runs) when the build has no
// cuDNN or the LSTM's switch is off (cudnn_lstm_enabled(): off by default, as the own kernels were
// the faster on the H200; INITLAB_CUDNN_LSTM=1 turns it on), under bf16 GEMM precision (cuDNN would
// need bf16 tensors), or when a size is zero or beyond int. Precision otherwise follows the GEMM
// precision: fp32 sets CUDNN_FMA_MATH, tf32 CUDNN_DEFAULT_MATH (TF32 tensor cores allowed).
bool cudnn_lstm_sizes(const CudnnLstm& g, CudnnLstmSizes& sizes);

// out [T+1, B, H] gets h_1 … h_T and then the last cell state c_T (the layout of lstm_sequence's
// result); weight_space and reserve are the caller's buffers of the sizes above. h0 and c0 may be
// null (zeros).
void cudnn_lstm_forward(const CudnnLstm& g, const float* x, const float* h0, const float* c0, const float* w_ih,
                        const float* b_ih, const float* w_hh, const float* b_hh, void* weight_space, float* out,
                        void* reserve);

// From the forward's x, h0, c0, weight space, out and reserve, and dout [T+1, B, H] (the gradient
// of each h_t and, last, of c_T): every gradient whose pointer is not null (dx [T, B, in], dh0 and
// dc0 [B, H], dw_ih, db_ih, dw_hh, db_hh in the weights' layout), each overwritten.
void cudnn_lstm_backward(const CudnnLstm& g, const float* x, const float* h0, const float* c0,
                         const void* weight_space, const float* out, const float* dout, void* reserve, float* dx,
                         float* dh0, float* dc0, float* dw_ih, float* db_ih, float* dw_hh, float* db_hh);

}  // namespace engine::cuda
