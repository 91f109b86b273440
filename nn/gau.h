// nn/gau.h: the Gated Attention Unit (FLASH, Hua et al. 2022) and a GAU language model.
//
//   [U | V | Z] = silu(x·W + b),  U, V ∈ n×e, Z ∈ n×s
//   Q = Z⊙γ_q + β_q,  K = Z⊙γ_k + β_k   (γ = 1, β = 0 at init), RoPE on Q and K
//   A = relu²(Q·Kᵀ) / (n·s)  with the causal mask (zeros above the diagonal)
//   O = (U ⊙ A·V)·W_o
// Defaults e = 2d, s = 128, one head. Su's analysis (seed 001): with x ~ N(0,1), LeCun-normal
// weights and this A, |O| ≈ s·ν⁶/n·|x| at init (ν² = 0.3557), and scaling every weight by λ
// scales O by λ⁷; so a Post-Norm stack starts near the identity and trains without warmup.
#pragma once
#include "nn/layers.h"

namespace nn {

class GAU : public Module {
public:
    GAU(int64_t dim, int64_t expansion, int64_t s, bool causal = true, bool rope = true, bool bias = true);
    std::string type_name() const override { return "GAU"; }
    // [B, n, dim] -> [B, n, dim]: the branch, plus `residual` where one is given (added by out's GEMM,
    // Linear::forward_plus).
    Tensor forward(const Tensor& x, const Tensor& residual = Tensor()) const;
    std::shared_ptr<Linear> hidden;         // dim -> 2e + s
    std::shared_ptr<Linear> out;            // e -> dim
    Tensor gamma_q, beta_q, gamma_k, beta_k;
    int64_t dim, e, s;
    bool causal, use_rope;
};

struct GAUConfig {
    int64_t vocab = 50, dim = 128, depth = 2, expansion = 256, s = 128;
    bool post_norm = true;  // x ← LN(x + GAU(x)); false: x ← x + GAU(LN(x)) with a final LN
    bool tie_weights = true, rope = true;
    float dropout = 0.f;
};

class GAULM : public Module {
public:
    explicit GAULM(const GAUConfig& c);
    std::string type_name() const override { return "GAULM"; }
    Tensor forward(const Tensor& ids) const;  // [B, T] -> logits [B, T, vocab]
    // cross_entropy(forward(ids), targets) without the logits (engine::linear_cross_entropy) where
    // output_loss_fused.
    Tensor loss(const Tensor& ids, const Tensor& targets) const;
    GAUConfig cfg;
    std::shared_ptr<Embedding> tok_emb;
    std::shared_ptr<ModuleList<GAU>> layers;
    std::shared_ptr<ModuleList<LayerNorm>> norms;
    std::shared_ptr<LayerNorm> final_norm;  // Pre-Norm only
    std::shared_ptr<Dropout> drop;
    std::shared_ptr<Linear> head;           // null when tied
    // The output layer's input [B, T, dim]: the last block's output (Pre-Norm: after the final
    // norm). train_lm's tok_cos reads it.
    Tensor trunk(const Tensor& ids) const;
};

}  // namespace nn
