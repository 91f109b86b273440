// init/spatial_filters.h: ConvMixer's depthwise ("spatial") filters set to the structured-init
// paper's random / impulse / box filters (Zheng, Li, Lucey; its frozen-filter ConvMixer study,
// ../shared/specs/reference-notes.md §2.6). For a k×k filter per channel:
//   random:  U(−1/k, 1/k) per tap
//   impulse: one tap, at a uniformly random position, set to √(1/k), the others 0  ("box1")
//   box:     all k² taps set to √(1/(k²·k))                                         ("box k²")
//   train:   leave the filters as the init scheme made them
// Biases of the non-"train" kinds are U(−1/k, 1/k). The √(1/(N·k)) scale of a box of N taps is the
// authors' v2 code. Freezing (requires_grad = false) is the model's: nn::ConvMixer::freeze_spatial.
#pragma once
#include <string>
#include "init/init.h"
#include "nn/convmixer.h"

namespace init {

// The kinds set_spatial_filters accepts, for flag checks and help texts.
const std::vector<std::string>& spatial_filter_kinds();

// Overwrites every block's depthwise filters (and biases) with `kind`, drawing from the project
// RNG; "train" does nothing. Says what it did in `report` when given.
void set_spatial_filters(nn::ConvMixer& model, const std::string& kind, Report* report = nullptr);

}  // namespace init
