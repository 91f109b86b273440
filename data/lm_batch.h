// data/lm_batch.h: batches for language models from a token stream, in the two layouts the
// reproduced papers use.
//
// Both first cut the stream into `batch` contiguous rows of equal length (the remainder of
// the stream is dropped): row b holds tokens [b*L, (b+1)*L), L = stream_length / batch.
//
// BpttBatches (Zaremba et al. 2014; truncated BPTT): batch i is columns [i*steps, i*steps+T)
//   of the rows, T = steps except that the last batch may be shorter (unless drop_last);
//   targets are the same columns shifted right by one. Consecutive batches continue each row,
//   so a recurrent model carries its state from batch i to batch i+1. Every position is scored.
//
// WindowBatches (Bai, Kolter & Koltun 2018, the TCN protocol): window i starts at column
//   i*scored and spans seq_len columns (clipped at the end of the rows); only its last
//   `scored` positions enter the loss, the first seq_len - scored are context. A window whose
//   context already reaches the end of the rows is skipped, so every token after the first
//   window's context is scored exactly once. No state is carried between windows.
//
// A batch is int32 inputs and targets [batch, T] and float32 weights [batch, T] (1 where a
// position is scored, 0 where it is context): loss = Σ weights·nll / Σ weights.
#pragma once
#include <cstdint>
#include <vector>
#include "engine/tensor.h"

namespace data {

struct TokenBatch {
    engine::Tensor inputs;   // int32 [batch, T]
    engine::Tensor targets;  // int32 [batch, T]: the token after each input
    engine::Tensor weights;  // float32 [batch, T]: 1 scored, 0 context
    int64_t first_scored = 0;  // column where scoring starts (0 for BPTT)
    int64_t scored = 0;        // number of scored positions, Σ weights
};

class BpttBatches {
public:
    BpttBatches(const std::vector<int32_t>& stream, int64_t batch, int64_t steps, bool drop_last = false);
    int64_t size() const { return count_; }  // batches per epoch
    int64_t row_length() const { return row_len_; }
    TokenBatch get(int64_t i) const;

private:
    std::vector<int32_t> rows_;  // [batch, row_len]
    int64_t batch_, steps_, row_len_, count_;
};

class WindowBatches {
public:
    // keep_partial=false also skips the trailing windows shorter than seq_len.
    WindowBatches(const std::vector<int32_t>& stream, int64_t batch, int64_t seq_len, int64_t scored,
                  bool keep_partial = true);
    int64_t size() const { return (int64_t)starts_.size(); }
    int64_t row_length() const { return row_len_; }
    TokenBatch get(int64_t i) const;

private:
    std::vector<int32_t> rows_;
    std::vector<int64_t> starts_;
    int64_t batch_, seq_len_, scored_, row_len_;
};

}  // namespace data
