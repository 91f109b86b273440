// engine/ops/reduce.h: reductions over one or more dims (negative dims count from the end).
// An empty dims list means all dims.
#pragma once
#include <vector>
#include "engine/tensor.h"

namespace engine {

Tensor sum(const Tensor& x, std::vector<int> dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, std::vector<int> dims = {}, bool keepdim = false);
// Max over dims; the gradient goes to the first maximal element of each reduced group.
Tensor max(const Tensor& x, std::vector<int> dims = {}, bool keepdim = false);
// Sum `x` down to `shape` (the inverse of broadcasting); used by broadcasting backwards.
Tensor sum_to(const Tensor& x, const Shape& shape);

}  // namespace engine
