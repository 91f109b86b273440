// engine/device.cpp: device queries; the CUDA build answers from engine/cuda/device.cu.
#include "engine/device.h"

#include "engine/error.h"

namespace engine {

#ifdef ENGINE_CUDA
namespace cuda {
int device_count();
std::string device_name(int device);
// Declared in engine/cuda/runtime.h; here because nvcc cannot compile fmt (engine/error.h).
[[noreturn]] void fail(const std::string& message) { throw Error(message); }
}  // namespace cuda
bool built_with_cuda() { return true; }
int cuda_device_count() { return cuda::device_count(); }
std::string cuda_device_name(int device) { return cuda::device_name(device); }
#else
bool built_with_cuda() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_device_name(int) { return ""; }
#endif

}  // namespace engine
