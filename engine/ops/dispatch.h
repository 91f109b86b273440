// engine/ops/dispatch.h: the one place an op picks the CPU or the CUDA kernel.
//
//     ON_DEVICE(x.device(), softmax_forward)(x.raw_f32(), y.raw_f32(), rows, n);
//
// calls engine::cuda::softmax_forward for a CUDA tensor and engine::cpu::softmax_forward otherwise:
// the two have the same signature (declared in engine/cuda/<family>.h and engine/cpu/<family>.h),
// so the kernels of a family are found by file name. A build without the CUDA backend has no CUDA
// tensors (Storage refuses them) and compiles only the CPU call.
#pragma once
#include "engine/tensor.h"

#ifdef ENGINE_CUDA
#define ON_DEVICE(dev, fn) ((dev) == ::engine::Device::CUDA ? &::engine::cuda::fn : &::engine::cpu::fn)
#else
// dev is still evaluated (so a variable kept only for it is not an unused one); the conditional
// gives the kernel's address a type to resolve to, which a comma expression would not.
#define ON_DEVICE(dev, fn) ((dev) == ::engine::Device::CUDA ? &::engine::cpu::fn : &::engine::cpu::fn)
#endif
