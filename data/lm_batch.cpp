// data/lm_batch.cpp: BPTT and window batches from a token stream (see lm_batch.h).
#include "data/lm_batch.h"

#include <algorithm>
#include <cstring>
#include "engine/error.h"

using engine::check;
using engine::DType;
using engine::Tensor;

namespace data {

// Cut the stream into `batch` rows of equal length; the remainder is dropped.
static std::vector<int32_t> make_rows(const std::vector<int32_t>& stream, int64_t batch, int64_t& row_len,
                                      const char* who) {
    check(batch > 0, "{}: batch must be positive, got {}", who, batch);
    row_len = (int64_t)stream.size() / batch;
    check(row_len >= 2, "{}: a stream of {} tokens is too short for {} rows (need at least 2 tokens a row)", who,
          stream.size(), batch);
    return std::vector<int32_t>(stream.begin(), stream.begin() + batch * row_len);
}

// Columns [start, start+len) of the rows as inputs, shifted by one as targets; weights 1 from
// column `first_scored` of the batch on.
static TokenBatch slice(const std::vector<int32_t>& rows, int64_t batch, int64_t row_len, int64_t start,
                        int64_t len, int64_t first_scored) {
    TokenBatch b;
    b.inputs = Tensor::empty({batch, len}, DType::I32);
    b.targets = Tensor::empty({batch, len}, DType::I32);
    b.weights = Tensor::empty({batch, len});
    int32_t* in = b.inputs.data_i32();
    int32_t* tg = b.targets.data_i32();
    float* w = b.weights.data_f32();
    for (int64_t r = 0; r < batch; r++) {
        const int32_t* row = rows.data() + r * row_len + start;
        std::memcpy(in + r * len, row, len * sizeof(int32_t));
        std::memcpy(tg + r * len, row + 1, len * sizeof(int32_t));
        for (int64_t t = 0; t < len; t++) w[r * len + t] = t >= first_scored ? 1.f : 0.f;
    }
    b.first_scored = first_scored;
    b.scored = batch * (len - first_scored);
    return b;
}

BpttBatches::BpttBatches(const std::vector<int32_t>& stream, int64_t batch, int64_t steps, bool drop_last)
    : batch_(batch), steps_(steps) {
    check(steps > 0, "bptt batches: steps must be positive, got {}", steps);
    rows_ = make_rows(stream, batch, row_len_, "bptt batches");
    int64_t columns = row_len_ - 1;  // the last column is only ever a target
    count_ = drop_last ? columns / steps : (columns + steps - 1) / steps;
    check(count_ > 0, "bptt batches: rows of {} tokens give no full batch of {} steps (drop_last)", row_len_, steps);
}

TokenBatch BpttBatches::get(int64_t i) const {
    check(i >= 0 && i < count_, "bptt batches: batch {} out of range [0, {})", i, count_);
    int64_t start = i * steps_;
    int64_t len = std::min(steps_, row_len_ - 1 - start);
    return slice(rows_, batch_, row_len_, start, len, 0);
}

WindowBatches::WindowBatches(const std::vector<int32_t>& stream, int64_t batch, int64_t seq_len, int64_t scored,
                             bool keep_partial)
    : batch_(batch), seq_len_(seq_len), scored_(scored) {
    check(scored > 0 && scored <= seq_len, "window batches: need 0 < scored <= seq_len, got scored {} seq_len {}",
          scored, seq_len);
    rows_ = make_rows(stream, batch, row_len_, "window batches");
    int64_t context = seq_len - scored;
    for (int64_t s = 0; s < row_len_ - 1; s += scored) {
        if (s + context >= row_len_ - 1) continue;  // nothing left to score after the context
        if (!keep_partial && s + seq_len > row_len_ - 1) continue;
        starts_.push_back(s);
    }
    check(!starts_.empty(), "window batches: rows of {} tokens hold no window of length {}", row_len_, seq_len);
}

TokenBatch WindowBatches::get(int64_t i) const {
    check(i >= 0 && i < size(), "window batches: window {} out of range [0, {})", i, size());
    int64_t start = starts_[i];
    int64_t len = std::min(seq_len_, row_len_ - 1 - start);
    return slice(rows_, batch_, row_len_, start, len, seq_len_ - scored_);
}

}  // namespace data
