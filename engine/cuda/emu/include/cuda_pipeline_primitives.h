// engine/cuda/emu/include/cuda_pipeline_primitives.h: the CUDA emulator's stand-in for
// <cuda_pipeline_primitives.h>, the asynchronous global-to-shared copies (cp.async on sm_80 and
// newer) as CUDA documents them:
//   __pipeline_memcpy_async(dst_shared, src_global, size_and_align, zfill = 0): copies
//       size_and_align − zfill bytes from src and writes zfill zero bytes after them; size_and_align
//       is 4, 8 or 16 and both pointers are aligned to it;
//   __pipeline_commit(): closes the thread's current batch of copies;
//   __pipeline_wait_prior(n): waits until at most the n most recently committed batches of the
//       calling thread are still in flight.
// Here a copy happens when the issuing thread's wait that covers it returns (engine/cuda/emu/
// emu.cpp), never earlier, so a kernel that reads a destination before the thread that copied it
// has waited (no wait, or no __syncthreads() between every thread's wait and the reads) reads what
// was there, the poison pattern at first, in the random thread orders: its tests fail. Checked: the size and alignment, zfill <= size, dst inside the block's shared memory,
// src inside device memory (when bytes are read), and that no thread ends with copies not waited
// for.
#pragma once
#include <cstddef>

#include "cuda_runtime.h"

namespace emu {
void pipeline_memcpy_async(void* dst, const void* src, size_t size_and_align, size_t zfill);
void pipeline_commit();
void pipeline_wait_prior(size_t n);
}  // namespace emu

inline void __pipeline_memcpy_async(void* dst_shared, const void* src_global, size_t size_and_align,
                                    size_t zfill = 0) {
    emu::pipeline_memcpy_async(dst_shared, src_global, size_and_align, zfill);
}
inline void __pipeline_commit() { emu::pipeline_commit(); }
inline void __pipeline_wait_prior(size_t n) { emu::pipeline_wait_prior(n); }
