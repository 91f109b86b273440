// apps/common/attention_distance.h: how far attention looks, the "mean attention distance" of
// Dosovitskiy et al. 2021 (ViT, Fig. 7): per query, the distance to each key weighted by the
// attention paid to it, averaged over the queries. apps/inspect_init reports it per block, in
// tokens for a language model and in patches for a ViT (docs/RESULTS.md section 2 uses it to ask
// where mimetic init's attention goes with each position embedding).
//
// Reference values for a causal map over T tokens: 0 when every query attends to itself; (T−1)/4
// for uniform attention over the visible keys (query i sees i + 1 keys at mean distance i/2).
#pragma once
#include <vector>
#include "engine/tensor.h"

namespace apps {

// Where each token sits: one coordinate per token for a sequence, (row, column) for an image
// patch. A token without a place (the ViT's class token) has an empty vector.
using TokenPlaces = std::vector<std::vector<double>>;

TokenPlaces sequence_places(int64_t T);                         // {0}, {1}, ..., {T−1}
TokenPlaces patch_places(int64_t grid, bool class_token_first);  // {r, c} row by row, after {} if class token

// map [T, T] (any device): row i is query i's attention over the keys, summing to 1. Returns the
// mean over queries of Σ_j map[i][j]·|place_i − place_j| (Euclidean). Keys and queries without a
// place are left out, and a query's weights are renormalized over the keys that remain, as they
// are with `skip_self`, which leaves out each query's own key: then the figure says how far a
// query looks when it looks away from itself. A query with no weight left is not counted.
double mean_attention_distance(const engine::Tensor& map, const TokenPlaces& places, bool skip_self = false);

}  // namespace apps
