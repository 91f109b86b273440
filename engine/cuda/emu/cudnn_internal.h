// engine/cuda/emu/cudnn_internal.h: what the cuDNN stand-in's two files share (engine/cuda/emu/
// cudnn.cpp: handles, tensor descriptors, convolutions, batch norm; engine/cuda/emu/cudnn_rnn.cpp:
// the RNN API's LSTM): the handle and tensor-descriptor structs, the device-memory check, the
// stream hand-off and the math type's input rounding.
#pragma once
#include "cudnn.h"

#include <cstddef>
#include <functional>
#include <vector>

struct cudnnContext {
    cudaStream_t stream = nullptr;
};
// A tensor descriptor: set by cudnnSetTensor4dDescriptor (n, c, h, w, fully packed NCHW; `set`) or
// by cudnnSetTensorNdDescriptor (dims and strides; with 4 packed dims also n, c, h, w and `set`).
// Either fills nd, dims and strides, which cudnnGetTensorNdDescriptor reads.
struct cudnnTensorStruct {
    bool set = false;
    int n = 0, c = 0, h = 0, w = 0;
    int nd = 0;
    int dims[CUDNN_DIM_MAX] = {}, strides[CUDNN_DIM_MAX] = {};
};

namespace emu::cudnn_standin {

// `floats` floats from p on must lie in device memory: a GPU would fault on anything else. Throws
// emu::Error naming the call and the argument.
void check_device(const char* call, const char* name, const void* p, size_t floats);

// The work goes on the handle's stream: done now, or recorded while the stream is captured (`work`
// holds everything by value). A stream whose capture was invalidated takes nothing: the call failed
// to launch (CUDNN_STATUS_EXECUTION_FAILED).
cudnnStatus_t enqueue(cudnnHandle_t h, const char* call, std::function<void()> work);

// A GEMM or convolution input as the math type reads it: the data itself, or (tf32) its TF32
// rounding, as Ampere and later GPUs may under CUDNN_DEFAULT_MATH and the tensor-op math types.
std::vector<float> input(const void* p, size_t n, bool tf32);

// cudnnCreate*Descriptor and cudnnDestroy*Descriptor, for every descriptor struct.
template <typename Struct>
cudnnStatus_t create_descriptor(Struct** d) {
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    *d = new Struct;
    return CUDNN_STATUS_SUCCESS;
}
template <typename Struct>
cudnnStatus_t destroy_descriptor(Struct* d) {
    delete d;
    return CUDNN_STATUS_SUCCESS;
}

}  // namespace emu::cudnn_standin
