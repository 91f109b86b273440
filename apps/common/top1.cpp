// apps/common/top1.cpp: see the header.
#include "apps/common/top1.h"

#include <algorithm>
#include "engine/error.h"

namespace apps {

int64_t top1_matches(const engine::Tensor& logits, const engine::Tensor& ids, Ties ties) {
    engine::check(logits.ndim() >= 1 && logits.size(-1) > 0 && ids.numel() * logits.size(-1) == logits.numel(),
                  "top1_matches: {} ids for logits {}: one id per row of logits", ids.numel(), logits.shape().str());
    engine::Tensor l = logits.detach().to(engine::Device::CPU), t = ids.to(engine::Device::CPU);
    int64_t C = l.size(-1);
    const float* p = l.data_f32();
    const int32_t* id = t.data_i32();
    int64_t matches = 0;
    for (int64_t r = 0; r < t.numel(); r++) {
        const float* row = p + r * C;
        const float* top = std::max_element(row, row + C);
        if (top - row != id[r]) continue;
        if (ties == Ties::NoMatch && std::count(row, row + C, *top) > 1) continue;
        matches++;
    }
    return matches;
}

}  // namespace apps
