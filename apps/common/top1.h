// apps/common/top1.h: how often a model's largest logit lands on a given class. train_vit counts
// its test accuracy with it (against the labels); inspect_init its `copy_top1` (against the input
// tokens: how often an LM predicts the token it was just given).
#pragma once
#include "engine/tensor.h"

namespace apps {

// logits [..., C] (any device), ids int32 with one entry per row of logits (any shape, on any
// device): the number of rows whose arg-max (the first, on ties) is that row's id.
int64_t top1_matches(const engine::Tensor& logits, const engine::Tensor& ids);

}  // namespace apps
