// engine/cuda/emu/include/cuda_bf16.h: the CUDA emulator's stand-in for <cuda_bf16.h>: only what
// the backend uses: the bf16 storage type, its two conversions and its raw bits.
//
// bf16 is the top half of an IEEE fp32 value: sign, the same 8-bit exponent, 7 mantissa bits. So
// widening is exact (the bits shifted up), and narrowing rounds away the low 16 bits. As CUDA
// documents __float2bfloat16, that rounding is to nearest, ties to even; finite values beyond the
// largest bf16 round to infinity, and a NaN stays a NaN (here the canonical quiet NaN 0x7FFF).
#pragma once
#include <cstdint>
#include <cstring>

// Two bytes of storage, like CUDA's (its raw bits are the member __x there too); no arithmetic:
// the backend only converts to and from fp32.
struct __nv_bfloat16 {
    unsigned short __x;
};
static_assert(sizeof(__nv_bfloat16) == 2, "bf16 is two bytes");

inline __nv_bfloat16 __float2bfloat16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {0x7fff};  // NaN: keep it a NaN (rounding could make it inf)
    // Round to nearest even on bit 16: add just under half an ulp, plus one when the kept part is
    // odd (so an exact half rounds up only from an odd value), then drop the low half.
    u += 0x7fffu + ((u >> 16) & 1u);
    return {(unsigned short)(u >> 16)};
}

inline float __bfloat162float(__nv_bfloat16 h) {
    uint32_t u = (uint32_t)h.__x << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// The raw bits (CUDA's __bfloat16_as_ushort), e.g. to pack two values into one 32-bit store.
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
