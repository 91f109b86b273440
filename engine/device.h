// engine/device.h: what accelerators this build and this machine have.
#pragma once
#include <string>

namespace engine {

bool built_with_cuda();       // compiled with nvcc (make CUDA=1, the default when nvcc is found)
int cuda_device_count();      // 0 without a CUDA build, a driver, or a GPU
std::string cuda_device_name(int device);  // "" when there is no such device

}  // namespace engine
