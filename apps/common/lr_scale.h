// apps/common/lr_scale.h: --lr-scale, a learning-rate multiplier for chosen parameters.
//
// The flag takes comma-separated GLOB=FACTOR items over parameter names as named_parameters()
// spells them ("blocks.0.mlp.fc1.weight"; `*` matches any run of characters, dots included): a
// parameter matching an item is updated with lr × FACTOR (its weight decay too, as a torch param
// group with its own lr decays), the first matching item counting. It separates two things a
// change of init scale does under Adam, whose step does not grow with the weight: a weight made
// c× larger also takes steps c× smaller relative to itself, unless its lr is scaled by c as well
// (docs/RESULTS.md section 5).
#pragma once
#include <string>
#include <vector>
#include <CLI/CLI.hpp>
#include "nn/optim.h"

namespace apps {

struct LrScale {
    std::string pattern;
    float factor = 1.f;
};

void add_lr_scale_flag(CLI::App& app, std::string& spec);

// "a=2,b=0.5" -> {{"a", 2}, {"b", 0.5}}; a malformed item or a factor that is not a positive
// finite number is refused, naming --lr-scale and the item.
std::vector<LrScale> parse_lr_scales(const std::string& spec);

// Each group split by factor: the parameters of `groups` that match an item move to a group of
// their own (the same weight decay, lr_scale = the factor). An item that matches no parameter, or
// only ones an earlier item took, is refused (a typo would otherwise change nothing), naming an
// example name. Returns the groups unchanged for an empty spec, and prints what it scaled as
// `app_name` otherwise.
std::vector<nn::ParamGroup> apply_lr_scales(std::vector<nn::ParamGroup> groups, const std::string& spec,
                                            const char* app_name);

}  // namespace apps
