// apps/common/top1.h: how often a model's largest logit lands on a given class. train_vit counts
// its test accuracy with it (against the labels); inspect_init its `copy_top1` (against the input
// tokens: how often an LM predicts the token it was just given).
#pragma once
#include "engine/tensor.h"

namespace apps {

// What a row whose maximum comes more than once counts as: the first of them, as torch.argmax
// picks it (an accuracy), or nothing (copy_top1: a row of equal logits predicts no token).
enum class Ties { First, NoMatch };

// logits [..., C] (any device), ids int32 with one entry per row of logits (any shape, on any
// device): the number of rows whose arg-max is that row's id.
int64_t top1_matches(const engine::Tensor& logits, const engine::Tensor& ids, Ties ties = Ties::First);

}  // namespace apps
