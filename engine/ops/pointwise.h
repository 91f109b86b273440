// engine/ops/pointwise.h: the math of every unary pointwise op, forward f(x) and derivative
// df(x, y) = dy/dx (y = f(x) given, so ops like tanh and sigmoid reuse it), side by side.
// Shared by the CPU loops (engine/cpu/elementwise.cpp) and the CUDA kernels (issue 3).
#pragma once
#include <cmath>

#ifdef __CUDACC__
#define ENGINE_HD __host__ __device__ inline
#else
#define ENGINE_HD inline
#endif

namespace engine::pointwise {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

struct Neg   { ENGINE_HD static float f(float x) { return -x; }
               ENGINE_HD static float df(float, float) { return -1.f; } };
struct Exp   { ENGINE_HD static float f(float x) { return expf(x); }
               ENGINE_HD static float df(float, float y) { return y; } };
struct Log   { ENGINE_HD static float f(float x) { return logf(x); }
               ENGINE_HD static float df(float x, float) { return 1.f / x; } };
struct Sqrt  { ENGINE_HD static float f(float x) { return sqrtf(x); }
               ENGINE_HD static float df(float, float y) { return 0.5f / y; } };
struct Rsqrt { ENGINE_HD static float f(float x) { return 1.f / sqrtf(x); }
               ENGINE_HD static float df(float x, float y) { return -0.5f * y / x; } };
struct Abs   { ENGINE_HD static float f(float x) { return fabsf(x); }
               ENGINE_HD static float df(float x, float) { return (float)(x > 0) - (float)(x < 0); } };
struct Tanh  { ENGINE_HD static float f(float x) { return tanhf(x); }
               ENGINE_HD static float df(float, float y) { return 1.f - y * y; } };
struct Sigmoid { ENGINE_HD static float f(float x) { return 1.f / (1.f + expf(-x)); }
                 ENGINE_HD static float df(float, float y) { return y * (1.f - y); } };
struct Relu  { ENGINE_HD static float f(float x) { return x > 0.f ? x : 0.f; }
               ENGINE_HD static float df(float x, float) { return x > 0.f ? 1.f : 0.f; } };
struct Relu2 { ENGINE_HD static float f(float x) { return x > 0.f ? x * x : 0.f; }
               ENGINE_HD static float df(float x, float) { return x > 0.f ? 2.f * x : 0.f; } };
// GELU, exact: x·Φ(x); derivative Φ(x) + x·φ(x).
struct Gelu  { ENGINE_HD static float f(float x) { return 0.5f * x * (1.f + erff(x * kInvSqrt2)); }
               ENGINE_HD static float df(float x, float) {
                   return 0.5f * (1.f + erff(x * kInvSqrt2)) + x * kInvSqrt2Pi * expf(-0.5f * x * x); } };
// GELU, tanh approximation (GPT-2's): 0.5x(1 + tanh(u)), u = √(2/π)(x + 0.044715x³).
struct GeluTanh {
    ENGINE_HD static float f(float x) {
        float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
        return 0.5f * x * (1.f + tanhf(u));
    }
    ENGINE_HD static float df(float x, float) {
        float u = kSqrt2OverPi * (x + 0.044715f * x * x * x), t = tanhf(u);
        return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * 0.044715f * x * x);
    }
};
// SiLU / Swish: x·σ(x); derivative σ(x)(1 + x(1 − σ(x))).
struct Silu  { ENGINE_HD static float f(float x) { return x / (1.f + expf(-x)); }
               ENGINE_HD static float df(float x, float) {
                   float s = 1.f / (1.f + expf(-x)); return s * (1.f + x * (1.f - s)); } };

}  // namespace engine::pointwise
