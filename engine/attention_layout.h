// engine/attention_layout.h: where attention's heads lie in q, k, v and out (and their gradients),
// for the CPU and CUDA attention kernels (engine/cpu/nn.h, engine/cuda/nn.h).
//
//   head-major, heads = 0:     [BH, rows, D]; head i is the i-th [rows, D] block.
//   token-major, heads = H > 0: [B, rows, H·D], as the q, k and v linears write them; head
//                              i = b·H + h is the columns [h·D, (h+1)·D) of batch b's block, its
//                              rows H·D elements apart. No permute to head-major and back.
#pragma once
#include <cstdint>

namespace engine {

struct AttentionHeads {
    int64_t heads;  // 0: head-major
    int64_t D;      // head dim
    int64_t ld() const { return heads ? heads * D : D; }  // elements between a head's rows
    // Where head i's first row is, in a tensor of `rows` rows a head.
    int64_t offset(int64_t i, int64_t rows) const {
        return heads ? ((i / heads) * rows * heads + i % heads) * D : i * rows * D;
    }
};

}  // namespace engine
