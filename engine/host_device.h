// engine/host_device.h: ENGINE_HD marks a small inline function that both the CPU code and the
// CUDA kernels call (__host__ __device__ under nvcc; a plain inline elsewhere, the emulator too).
#pragma once

#ifdef __CUDACC__
#define ENGINE_HD __host__ __device__ inline
#else
#define ENGINE_HD inline
#endif
