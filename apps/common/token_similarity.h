// apps/common/token_similarity.h: how alike the tokens of one sequence are at some layer, the
// figure that shows "rank collapse" (Dong et al. 2021): deep attention stacks can map every token
// of a sequence to the same vector, and a language model whose last layer does so can only
// predict the unigram distribution. apps/inspect_init reports it per block; train_lm logs it for
// the last block at every evaluation (docs/RESULTS.md section 3).
#pragma once
#include "engine/tensor.h"

namespace apps {

// x [B, T, D] (any device): the mean over the batch of the mean cosine similarity between two
// different tokens of a sequence (all T(T−1) ordered pairs). 1 when every token of each sequence
// carries the same direction; about 0 for unrelated directions; never below −1/(T−1).
// A zero vector counts as orthogonal to every other.
double token_cosine(const engine::Tensor& x);

// x [B, T, D] (any device), B sequences whose positions line up (windows from random places of a
// text, or images): the share of x's variance that is the position's, the spread of the
// per-position means m_t = mean_b x[b, t] about their mean, over the spread of every token about
// that mean: (1/T)·Σ_t |m_t − m̄|² / (1/BT)·Σ_{b,t} |x[b, t] − m̄|². 1 when each token is its
// position's vector, 0 when the position adds nothing. Content that does not depend on the
// position still leaves about 1/B in the batch's means (0.03 for 32 windows). It says how much
// of an absolute position embedding a layer still carries.
double position_share(const engine::Tensor& x);

}  // namespace apps
