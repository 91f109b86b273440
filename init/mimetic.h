// init/mimetic.h: mimetic initialization of self-attention (Trockman & Kolter, "Mimetic
// Initialization of Self-Attention Layers", ICML 2023, arXiv 2305.09828; seed 000, notes §1.2).
//
// Pretrained ViTs have W_qW_kᵀ ≈ +identity and W_vW_proj ≈ −identity (plus noise); mimetic draws
// weights with those products directly. Row-vector notation, d = width, k = d/heads:
//   per layer and per head h, a fresh Z₁ ~ N(0, I/d) [d×d]:
//       A₁ = α₁Z₁ + β₁I = U S Vᵀ,   W_q⁽ʰ⁾ = U[:, :k]·S[:k]^½,   W_k⁽ʰ⁾ = V[:, :k]·S[:k]^½   (d×k)
//     so W_q⁽ʰ⁾W_k⁽ʰ⁾ᵀ is the best rank-k approximation of A₁ (the singular values split evenly);
//   per layer, one Z₂ shared by the heads:
//       A₂ = α₂Z₂ − β₂I = U S Vᵀ,   W_v = U·S^½,   W_proj = S^½·Vᵀ   (d×d)
//     so x·W_v·W_proj = x·A₂ exactly (the NeurIPS'25 code's transposed layout, notes §1.2).
// Defaults α₁ = β₁ = 0.7, α₂ = β₂ = 0.4 (Zheng et al.'s code; the paper's ViT setting). Noise
// "normal": Z ~ N(0, 1/d) (the paper); "uniform": U(±√(3/d)), the same variance (Zheng's timm
// code). The attention keeps its 1/√k logit scale. Biases and everything outside q/k/v/proj keep
// their current values (PyTorch defaults after construction, as in Zheng's runs; compose
// "timm+mimetic" for zero biases and a trunc-normal MLP). Ablations: Options::mimetic_qk = false
// leaves Q/K alone, mimetic_vo = false leaves V/proj alone.
//
// PyTorch layout (weight [out, in]): head h's rows of q.weight hold W_q⁽ʰ⁾ᵀ, k.weight likewise,
// v.weight = W_vᵀ and proj.weight = W_projᵀ. The paper uses sinusoidal position embeddings; a
// model with learned or no absolute position embedding gets a note in the report.
//
// Draw order (all from engine::global_generator()): attention layers in module order; within a
// layer Z₁ for heads 0..h−1 (when mimetic_qk), then Z₂ (when mimetic_vo).
#pragma once
#include <string>
#include <vector>
#include "engine/tensor.h"
#include "init/init.h"
#include "nn/attention.h"

namespace init {

void mimetic_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);

// Z [d, d] with variance 1/d per entry: kind "normal" (N(0, 1/d)) or "uniform" (U(±√(3/d))).
engine::Tensor mimetic_noise(int64_t d, const std::string& kind);

// The noise one attention layer drew: z_qk[h] for each head (empty when mimetic_qk is off), z_vo
// (undefined when mimetic_vo is off).
struct MimeticDraws {
    std::vector<engine::Tensor> z_qk;
    engine::Tensor z_vo;
};

// Initializes one attention layer as above and returns the Zs it drew (tests check the weights
// against them).
MimeticDraws mimetic_attention(nn::MultiHeadAttention& attn, const Options& opt);

}  // namespace init
