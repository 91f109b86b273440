// engine/cuda/device.cu: CUDA device queries. A machine without a driver or GPU reports 0
// devices instead of failing, so the same binary runs everywhere.
#include <cuda_runtime.h>
#include <string>

namespace engine::cuda {

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no driver" error
        return 0;
    }
    return n;
}

std::string device_name(int device) {
    cudaDeviceProp prop;
    if (device < 0 || device >= device_count() || cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "";
    return prop.name;
}

}  // namespace engine::cuda
