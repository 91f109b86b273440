// engine/cuda/philox.h: Philox4x32-10 as a __host__ __device__ function, bit for bit the generator
// of engine/rng.cpp (Philox4x32::block), so a kernel draws the same stream as the CPU: block c of
// the stream is philox(key = seed, counter = c). Plain header (no CUDA types): under nvcc the
// function is __host__ __device__, elsewhere (g++, the emulator, host tests) a plain inline one.
//
// The layout of the draws on top of it is engine/rng.h's: value i of a uniform draw whose first
// block is `base` is word (i % 4) of block base + i/4, as (w >> 8) * 2^-24 in [0, 1).
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define ENGINE_PHILOX_HD __host__ __device__ __forceinline__
#else
#define ENGINE_PHILOX_HD inline
#endif

namespace engine::cuda {

// 10 rounds of two 32x32->64 multiplies, with the Weyl-sequence key schedule (rng.cpp's loop).
ENGINE_PHILOX_HD void philox4x32_10(uint64_t seed, uint64_t counter, uint32_t out[4]) {
    const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)M0 * c0, p1 = (uint64_t)M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += W0;
        k1 += W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

// A word as a float in [0, 1): its top 24 bits times 2^-24 (exact in float), as rng.cpp's to_unit.
ENGINE_PHILOX_HD float philox_unit(uint32_t w) { return (float)(w >> 8) * (1.0f / 16777216.0f); }

}  // namespace engine::cuda
