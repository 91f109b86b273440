// engine/attention_layout.h: where attention's heads lie in q, k, v and out (and their gradients),
// for the CPU and CUDA attention kernels (engine/cpu/nn.h, engine/cuda/nn.h).
//
//   head-major, heads = 0:      [BH, rows, D]; head i is the i-th [rows, D] block.
//   token-major, heads = H > 0: [B, rows, ld] with ld >= H·D, as the linears write them; head
//                               i = b·H + h is the columns [h·D, (h+1)·D) of batch b's block, its
//                               rows ld elements apart. No permute to head-major and back. ld is
//                               H·D for one tensor a projection ([B, T, H·D]), 3·H·D for q, k
//                               and v as column blocks of one [B, T, 3·H·D] projection (each
//                               then starts at its block's first column).
#pragma once
#include <cstdint>
#include "engine/host_device.h"

namespace engine {

struct AttentionHeads {
    int64_t heads = 0;  // 0: head-major
    int64_t D = 0;      // head dim
    int64_t ld = 0;     // token-major: elements between a head's rows (0: H·D)

    static AttentionHeads head_major(int64_t D) { return {0, D, D}; }
    static AttentionHeads token_major(int64_t heads, int64_t D, int64_t ld = 0) {
        return {heads, D, ld > 0 ? ld : heads * D};
    }
    // Where head i's first row is, in a tensor of `rows` rows a head (its rows are ld apart).
    ENGINE_HD int64_t offset(int64_t i, int64_t rows) const {
        return heads ? (i / heads) * rows * ld + (i % heads) * D : i * rows * D;
    }
};

// How many keys query i of T sees, of S (the first ones): all of them, or with causal the keys
// j <= i + S − T, so that the last query sees every key; between 0 and S. The one causal convention
// of attention (CPU and CUDA) and masked_relu2.
ENGINE_HD int64_t visible_keys(int64_t i, int64_t T, int64_t S, bool causal) {
    if (!causal) return S;
    int64_t v = i + S - T + 1;
    return v < 0 ? 0 : (v > S ? S : v);
}

}  // namespace engine
