// engine/ops/pointwise.h: the math of every unary pointwise op, forward f(x) and derivative
// df(x, y) = dy/dx (y = f(x) given, so ops like tanh and sigmoid reuse it), side by side. Each
// says which of x and y its df reads (kReadsX, kReadsY): the op keeps only those for the backward
// (engine/ops/elementwise.cpp), and the kernels pass 0 for the other.
// Shared by the CPU loops (engine/cpu/elementwise.cpp) and the CUDA kernels (engine/cuda/elementwise.cu).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include "engine/host_device.h"

namespace engine::pointwise {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

template <bool kX, bool kY>
struct Reads {
    static constexpr bool kReadsX = kX, kReadsY = kY;
};
using ReadsNone = Reads<false, false>;
using ReadsX = Reads<true, false>;
using ReadsY = Reads<false, true>;
using ReadsXY = Reads<true, true>;

struct Neg : ReadsNone { ENGINE_HD static float f(float x) { return -x; }
    ENGINE_HD static float df(float, float) { return -1.f; } };
struct Exp : ReadsY { ENGINE_HD static float f(float x) { return expf(x); }
    ENGINE_HD static float df(float, float y) { return y; } };
struct Log : ReadsX { ENGINE_HD static float f(float x) { return logf(x); }
    ENGINE_HD static float df(float x, float) { return 1.f / x; } };
struct Sqrt : ReadsY { ENGINE_HD static float f(float x) { return sqrtf(x); }
    ENGINE_HD static float df(float, float y) { return 0.5f / y; } };
struct Rsqrt : ReadsXY { ENGINE_HD static float f(float x) { return 1.f / sqrtf(x); }
    ENGINE_HD static float df(float x, float y) { return -0.5f * y / x; } };
struct Abs : ReadsX { ENGINE_HD static float f(float x) { return fabsf(x); }
    ENGINE_HD static float df(float x, float) { return (float)(x > 0) - (float)(x < 0); } };
struct Tanh : ReadsY { ENGINE_HD static float f(float x) { return tanhf(x); }
    ENGINE_HD static float df(float, float y) { return 1.f - y * y; } };
struct Relu : ReadsX { ENGINE_HD static float f(float x) { return x > 0.f ? x : 0.f; }
    ENGINE_HD static float df(float x, float) { return x > 0.f ? 1.f : 0.f; } };
struct Relu2 : ReadsX { ENGINE_HD static float f(float x) { return x > 0.f ? x * x : 0.f; }
    ENGINE_HD static float df(float x, float) { return x > 0.f ? 2.f * x : 0.f; } };
// exp and erf for the CPU loops, written so that the compiler vectorizes them (libm's expf and
// erff are calls it cannot: the exact GELU ran at ~1 GB/s and took 18 % of a ViT-Tiny step;
// docs/BENCHMARKS.md). Branch-free arithmetic only; engine/cpu/elementwise.cpp is compiled with
// -fno-trapping-math so that the clamps become vector min/max. A GPU has fast erff and expf.
//
// exp: x = k·ln2 + r with k = round(x/ln2) (the 1.5·2^23 trick rounds to nearest), ln2 split in
// two for an exact k·ln2 (Cody–Waite), e^r by its degree-7 Taylor polynomial (|r| ≤ ln2/2), 2^k
// built in the exponent bits. Max relative error 8e-8 on [−87, 88]; clamped outside.
ENGINE_HD float exp_vectorizable(float x) {
    x = x < -87.f ? -87.f : x;  // not fmaxf/fminf: their NaN rules keep them library calls
    x = x > 88.f ? 88.f : x;
    float k = (x * 1.44269504088896341f + 12582912.f) - 12582912.f;
    float r = fmaf(k, -0.693145751953125f, x);
    r = fmaf(k, -1.428606765330187e-06f, r);
    float p = 1.f / 5040.f;
    p = fmaf(p, r, 1.f / 720.f);
    p = fmaf(p, r, 1.f / 120.f);
    p = fmaf(p, r, 1.f / 24.f);
    p = fmaf(p, r, 1.f / 6.f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.f);
    p = fmaf(p, r, 1.f);
    int32_t bits = ((int32_t)k + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}
// erf: Abramowitz & Stegun 7.1.26, erf(|x|) = 1 − t·(a1 + t(a2 + t(a3 + t(a4 + t·a5))))·e^(−x²),
// t = 1/(1 + p|x|); max absolute error 5e-7 in float (at |x| ≈ 0.03, where GELU multiplies it by
// x/2: GELU's own error stays below 3e-7 relative).
// *gauss gets the e^(−x²) the formula computes on the way, which GELU's derivative needs as well.
ENGINE_HD float erf_vectorizable(float x, float* gauss) {
    float ax = fabsf(x);
    float t = 1.f / fmaf(0.3275911f, ax, 1.f);
    float q = fmaf(t, 1.061405429f, -1.453152027f);
    q = fmaf(q, t, 1.421413741f);
    q = fmaf(q, t, -0.284496736f);
    q = fmaf(q, t, 0.254829592f);
    float e = exp_vectorizable(-ax * ax);
    *gauss = e;
    return copysignf(1.f - q * t * e, x);
}
ENGINE_HD float erf_vectorizable(float x) {
    float gauss;
    return erf_vectorizable(x, &gauss);
}
// The erf and exp of the activation functors below: the GPU's own, the vectorizable ones on the CPU.
// tanh(x) = 1 − 2/(e^{2x} + 1) is the LSTM cell's (engine/cpu/rnn.cpp): absolute error ≤ 2e-7.
#ifdef __CUDA_ARCH__
ENGINE_HD float act_erf(float x) { return erff(x); }
ENGINE_HD float act_erf(float x, float* gauss) { *gauss = expf(-x * x); return erff(x); }
ENGINE_HD float act_exp(float x) { return expf(x); }
ENGINE_HD float act_tanh(float x) { return tanhf(x); }
#else
ENGINE_HD float act_erf(float x) { return erf_vectorizable(x); }
ENGINE_HD float act_erf(float x, float* gauss) { return erf_vectorizable(x, gauss); }
ENGINE_HD float act_exp(float x) { return exp_vectorizable(x); }
ENGINE_HD float act_tanh(float x) { return 1.f - 2.f / (exp_vectorizable(2.f * x) + 1.f); }
#endif

// GELU, exact: x·Φ(x); derivative Φ(x) + x·φ(x). Φ's erf at x/√2 computes e^(−x²/2) on the way,
// which is φ(x)·√(2π): one exp for both.
struct Gelu : ReadsX { ENGINE_HD static float f(float x) { return 0.5f * x * (1.f + act_erf(x * kInvSqrt2)); }
    ENGINE_HD static float df(float x, float) {
        float gauss, erf_v = act_erf(x * kInvSqrt2, &gauss);
        return 0.5f * (1.f + erf_v) + x * kInvSqrt2Pi * gauss; } };
// GELU, tanh approximation (GPT-2's): 0.5x(1 + tanh(u)), u = √(2/π)(x + 0.044715x³).
struct GeluTanh : ReadsX {
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
struct Silu : ReadsX { ENGINE_HD static float f(float x) { return x / (1.f + act_exp(-x)); }
    ENGINE_HD static float df(float x, float) {
        float s = 1.f / (1.f + act_exp(-x)); return s * (1.f + x * (1.f - s)); } };
struct Sigmoid : ReadsY { ENGINE_HD static float f(float x) { return 1.f / (1.f + act_exp(-x)); }
    ENGINE_HD static float df(float, float y) { return y * (1.f - y); } };

// The activations of the fused bias + activation kernels (bias_act_* of engine/cpu/elementwise.h
// and engine/cuda/elementwise.h); each one's derivative reads its input only.
enum class BiasAct { Gelu, GeluTanh, Silu };
// fn(F{}) for act's functor F: one place that maps the enum to the functors for both backends.
template <typename Fn>
decltype(auto) with_bias_act(BiasAct act, Fn&& fn) {
    switch (act) {
        case BiasAct::GeluTanh: return fn(GeluTanh{});
        case BiasAct::Silu: return fn(Silu{});
        case BiasAct::Gelu: break;
    }
    return fn(Gelu{});
}

}  // namespace engine::pointwise
