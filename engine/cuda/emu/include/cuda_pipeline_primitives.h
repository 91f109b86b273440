// engine/cuda/emu/include/cuda_pipeline_primitives.h: the CUDA emulator's stand-in for
// <cuda_pipeline_primitives.h>, the asynchronous global-to-shared copies (cp.async on sm_80 and
// newer) as CUDA documents them:
//   __pipeline_memcpy_async(dst_shared, src_global, size_and_align, zfill = 0): copies
//       size_and_align − zfill bytes from src and writes zfill zero bytes after them; size_and_align
//       is 4, 8 or 16 and both pointers are aligned to it;
//   __pipeline_commit(): closes the thread's current batch of copies;
//   __pipeline_wait_prior(n): waits until at most the n most recently committed batches of the
//       calling thread are still in flight.
// On a GPU a copy lands at some time between its issue and the wait that covers it. Here each copy
// lands at one of the two ends, picked at random (seeded; engine/cuda/emu/emu.cpp): at its issue,
// so a kernel that refills a buffer other warps may still be reading (no barrier before the
// refill) corrupts their reads; or when the issuing thread's covering wait returns, so a kernel
// that reads a destination before the copying thread has waited reads what was there (the poison
// pattern at first). Either way its tests fail for some seed. So does a kernel with only a warp op
// between every thread's wait and reads of other warps' copies (a warp may get past a warp op
// before another warp has run: engine/cuda/emu/emu.cpp).
// Checked: the size and alignment, zfill <= size, dst inside the block's shared memory, src inside
// device memory (when bytes are read), and that no thread ends with copies not waited for.
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
