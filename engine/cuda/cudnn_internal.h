// engine/cuda/cudnn_internal.h: what the cuDNN paths (engine/cuda/cudnn.cu: convolutions and batch
// norm; engine/cuda/cudnn_rnn.cu: the LSTM) share, defined in cudnn.cu: the process's one handle
// and the mutex that serializes it, the status check, device scratch, the int range check and the
// call counter. Only for .cu files built with ENGINE_CUDNN.
#pragma once
#ifdef ENGINE_CUDNN
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <string>
#include "engine/cuda/runtime.h"

namespace engine::cuda::cudnn_detail {

// Throws engine::Error "<where>: <call> failed: <cuDNN's status string>" unless st is success.
void check_cudnn(cudnnStatus_t st, const char* call, const std::string& where);

// The mutex every cuDNN call holds (one handle, one set of plan caches), and the handle (created on
// first use, bound to the backend's stream, never destroyed): call handle() with the mutex held.
std::mutex& mutex();
cudnnHandle_t handle(const std::string& where);

// One more call went through cuDNN (engine::cuda::cudnn_calls()).
void count_call();

// Every value in 1 .. INT_MAX (cuDNN's legacy and RNN APIs take int sizes).
bool fits_int(std::initializer_list<int64_t> values);

// Device scratch freed on scope exit (stream-ordered: after the work queued before it).
struct Buffer {
    void* p = nullptr;
    explicit Buffer(size_t bytes) {
        if (bytes > 0) p = alloc(bytes);
    }
    ~Buffer() {
        if (p) free(p);
    }
    float* f() const { return static_cast<float*>(p); }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
};

}  // namespace engine::cuda::cudnn_detail
#endif  // ENGINE_CUDNN
