// init/impulse.h: structured ("impulse") initialization of attention, Zheng, Li & Lucey.
//
// impulse3 / impulse5 (ECCV'24, "Structured Initialization for Attention in Vision Transformers",
// seed 002, Algorithm 1): each head h gets a random offset (m, n) in an f×f window and the 0/1
// target T_h in which query token (a, b) attends to key (a+m, b+n) (an all-zero row when that key
// is off the grid: zero padding). On the pseudo input P̃ = LayerNorm(PE) (no affine), Q_h (d×k) and
// K_h (k×d) are fitted with Adam (lr 1e-4, 10,000 steps, this engine's autograd) to
//     min MSE( softmax(P̃·Q_h·K_h·P̃ᵀ/√k), T_h ),
// starting from U(±√(1/(k·heads))); every 100 steps (from step 0) Q's columns (over d) and K's
// per-channel vectors (over k) are rescaled to the initial mean column norm of Q. One fit serves
// every layer (opt.impulse_per_layer refits, with fresh offsets). V/proj keep the model default.
//
// impulse3-closed (NeurIPS'25, "Structured Initialization for ViTs", notes §2.5): per layer, head
// h uses offset index [4,1,5,3,7,0,2,6,8][h mod 9] of the 3×3 window (centre, up, right, left, ...);
// target logits L_h = 1000·mask + 3·ξ·(1−mask), ξ ~ trunc-normal(0, 0.6, [−2, 2]);
// P⁺ = the pseudo-inverse of P̃ truncated to rank k (= (P̃ᵀP̃)⁺_k·P̃ᵀ); M_h = P⁺·L_h·P⁺ᵀ = UΣVᵀ;
// Q_h = U_kΣ_k^½, K_h = (V_kΣ_k^½)ᵀ, each scaled to unit Frobenius norm × 7. Here P⁺ also drops
// singular values below 1e-5·s_max (float32 logits cannot resolve them), and M_h is factored in
// P̃'s SVD coordinates rather than formed (init/impulse.cpp). With LN(sin-cos PE), whose spectrum
// falls off fast (rank ~21 kept of 192 at 16×16), the argmax hits the target but the maps are
// almost uniform (mean target attention ≈ 1/N); with the authors' random learned PE they peak
// (ViT-Tiny, 2 layers: 0.69 on the target, 97.6% hits). V/proj mimetic:
// A₂ = α₂Z − β₂I (Z uniform with variance 1/d, as the authors' code), W_v = US^½, W_proj = S^½Vᵀ,
// so x·W_v·W_proj = x·A₂ (defaults α₂ = β₂ = 0.4).
//
// Both need a ViT with global average pooling (no class token) on a square grid; the pseudo input
// is the model's own position embedding (sincos2d in the papers' setting; LayerNorm makes its
// scale irrelevant). Layout: head h of q.weight ([out, in]) holds Q_hᵀ, head h of k.weight holds
// K_h, so the head's logits are x·Q_h·K_h·xᵀ/√k, as in the fit.
//
// Report figures: impulse.mse, impulse.hit_rate (share of non-border query rows whose attention
// argmax is the target key, over all heads), impulse.target_prob (mean attention on the target
// key over those rows), impulse.seconds.
#pragma once
#include <utility>
#include <vector>
#include "init/init.h"
#include "nn/transformer.h"

namespace init {

// Schemes (SchemeFn signature; filter_size is 3 or 5 for impulse3 / impulse5).
void impulse_init(nn::Module& model, const Options& opt, const InitData* data, Report& report, int filter_size);
void impulse_closed_init(nn::Module& model, const Options& opt, const InitData* data, Report& report);

// --- building blocks, public for tests, the benchmark and apps/inspect_init ----------------------

struct Offset {
    int dr, dc;  // key = (row + dr, col + dc)
};

// One offset per head drawn uniformly from the f×f window (global generator).
std::vector<Offset> random_offsets(int64_t heads, int filter_size);
// The deterministic offsets of the closed form: index [4,1,5,3,7,0,2,6,8][h mod 9] of the 3×3 window.
std::vector<Offset> closed_form_offsets(int64_t heads);
// 0/1 targets [heads, N, N], N = grid·grid, raster order; rows whose key is off the grid are zero.
engine::Tensor impulse_target(int64_t grid, const std::vector<Offset>& offsets);
// P̃ = LayerNorm(position embedding), no affine, [N, dim]. Throws (naming `scheme`) unless the
// model is a ViT with average pooling.
engine::Tensor impulse_pseudo_input(const nn::Module& model, const char* scheme);

struct ImpulseFit {
    engine::Tensor q_weight, k_weight;  // [heads·k, dim] each: rows of head h = Q_hᵀ and K_h
    double mse = 0, hit_rate = 0, target_prob = 0, seconds = 0;
};

// The Adam fit of Algorithm 1 for all heads at once, on one CPU thread. renorm_every <= 0 disables
// the renormalization.
ImpulseFit fit_impulse(const engine::Tensor& pseudo_input, const engine::Tensor& target, int64_t heads, int iters,
                       float lr, int renorm_every = 100);

// Attention maps softmax(P̃·Q_h·K_h·P̃ᵀ/√k) [heads, N, N] for weights in q/k layout [heads·k, dim].
engine::Tensor impulse_maps(const engine::Tensor& pseudo_input, const engine::Tensor& q_weight,
                            const engine::Tensor& k_weight, int64_t heads);
// The fit's loss, fused into one autograd node: the mean over all H·N·N entries of
//     (softmax(scale·U·q_h·k_hᵀ·Uᵀ) − target)²,
// q, k [H, r, k] (each head's queries/keys in the coordinates of `basis` U [N, r]), target
// [H, N, N]. Without a basis (undefined) r = N and q, k are the tokens' queries/keys. On the CPU
// one kernel does the softmax, the loss and their backward; elsewhere the engine's matmul/softmax/
// mse_loss compute the same. `buffers` (optional) keeps the large work arrays across calls.
struct MapBuffers {
    engine::Tensor maps, dscores, half, dhalf;
};
engine::Tensor impulse_map_mse(const engine::Tensor& q, const engine::Tensor& k, const engine::Tensor& basis,
                               const engine::Tensor& target, float scale, MapBuffers* buffers = nullptr);

// P̃ [N, d] = basis·coords with basis U [N, r] orthonormal and coords = S_r·V_rᵀ [r, d], keeping the
// singular values above rel_tol·s_max. When that rank exceeds max_rank, basis is undefined and
// coords = P̃ (token space).
struct PseudoBasis {
    engine::Tensor basis, coords;
};
PseudoBasis pseudo_input_basis(const engine::Tensor& P, int64_t max_rank, double rel_tol);

// Fills fit.mse, hit_rate and target_prob from the maps and the 0/1 target.
void score_impulse_maps(const engine::Tensor& maps, const engine::Tensor& target, ImpulseFit& fit);

}  // namespace init
