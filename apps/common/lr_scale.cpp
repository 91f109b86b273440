// apps/common/lr_scale.cpp: --lr-scale (lr_scale.h).
#include "apps/common/lr_scale.h"
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include "apps/common/freeze.h"
#include "engine/error.h"

namespace apps {

void add_lr_scale_flag(CLI::App& app, std::string& spec) {
    app.add_option("--lr-scale", spec,
                   "comma-separated GLOB=FACTOR: the parameters matching GLOB train with lr × FACTOR (e.g. "
                   "'blocks.*.mlp.fc1.weight=0.5'; the first matching item counts)");
}

std::vector<LrScale> parse_lr_scales(const std::string& spec) {
    std::vector<LrScale> out;
    for (const std::string& item : split_patterns(spec, "--lr-scale")) {
        size_t eq = item.rfind('=');
        engine::check(eq != std::string::npos && eq > 0 && eq + 1 < item.size(),
                      "--lr-scale: '{}' is not GLOB=FACTOR (e.g. 'blocks.*.mlp.fc1.weight=0.5')", item);
        std::string value = item.substr(eq + 1);
        char* end = nullptr;
        float f = std::strtof(value.c_str(), &end);
        engine::check(end && *end == '\0' && std::isfinite(f) && f > 0.f,
                      "--lr-scale: '{}': the factor '{}' is not a positive number", item, value);
        out.push_back({item.substr(0, eq), f});
    }
    return out;
}

std::vector<nn::ParamGroup> apply_lr_scales(std::vector<nn::ParamGroup> groups, const std::string& spec,
                                            const char* app_name) {
    std::vector<LrScale> scales = parse_lr_scales(spec);
    if (scales.empty()) return groups;
    std::vector<int> used(scales.size(), 0);
    std::vector<nn::ParamGroup> out;
    std::string example;
    for (const nn::ParamGroup& g : groups) {
        // One group per factor (the group's own first), in the order the items are given.
        std::vector<nn::ParamGroup> split(scales.size() + 1);
        for (auto& s : split) s.weight_decay = g.weight_decay;
        split[0].lr_scale = g.lr_scale;
        for (size_t i = 0; i < scales.size(); i++) split[i + 1].lr_scale = g.lr_scale * scales[i].factor;
        for (const nn::NamedTensor& p : g.params) {
            if (example.empty()) example = p.name;
            size_t k = 0;
            for (size_t i = 0; i < scales.size() && k == 0; i++)
                if (matches_glob(scales[i].pattern, p.name)) k = i + 1;
            if (k > 0) used[k - 1]++;
            split[k].params.push_back(p);
        }
        for (auto& s : split)
            if (!s.params.empty()) out.push_back(std::move(s));
    }
    for (size_t i = 0; i < scales.size(); i++)
        engine::check(used[i] > 0, "--lr-scale: '{}' matches no parameter, or only ones an earlier item took (e.g. '{}')",
                      scales[i].pattern, example.empty() ? std::string("none") : example);
    for (size_t i = 0; i < scales.size(); i++)
        std::printf("%s: --lr-scale: %d parameter tensors matching '%s' train with lr × %g\n", app_name, used[i],
                    scales[i].pattern.c_str(), scales[i].factor);
    return out;
}

}  // namespace apps
