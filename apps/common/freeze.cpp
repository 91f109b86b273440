// apps/common/freeze.cpp: --train-only and --freeze (freeze.h).
#include "apps/common/freeze.h"
#include <fnmatch.h>
#include <cstdio>
#include "engine/error.h"
#include "nn/module.h"

namespace apps {

std::vector<std::string> split_patterns(const std::string& list, const std::string& flag) {
    std::vector<std::string> out;
    if (list.empty()) return out;
    size_t start = 0;
    while (true) {
        size_t comma = list.find(',', start);
        std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        engine::check(!item.empty(), "{}: an empty pattern in '{}'", flag, list);
        out.push_back(item);
        if (comma == std::string::npos) return out;
        start = comma + 1;
    }
}

// fnmatch without FNM_PATHNAME or FNM_PERIOD: `*` crosses the dots of a dotted name.
static bool matches(const std::string& pattern, const std::string& name) {
    return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

FreezeSummary select_trained(nn::Module& model, const std::string& train_only, const std::string& freeze) {
    auto keep = split_patterns(train_only, "--train-only");
    auto drop = split_patterns(freeze, "--freeze");
    auto params = model.named_parameters();
    auto check_used = [&](const std::vector<std::string>& patterns, const std::string& flag) {
        for (const auto& pat : patterns) {
            bool used = false;
            for (const auto& p : params) used = used || matches(pat, p.name);
            engine::check(used, "{}: '{}' matches no parameter of the {} (e.g. '{}')", flag, pat,
                          model.type_name(), params.empty() ? std::string("none") : params.front().name);
        }
    };
    check_used(keep, "--train-only");
    check_used(drop, "--freeze");
    FreezeSummary s;
    for (const auto& p : params) {
        bool trained = keep.empty();
        for (const auto& pat : keep) trained = trained || matches(pat, p.name);
        for (const auto& pat : drop) trained = trained && !matches(pat, p.name);
        trained = trained && p.tensor->requires_grad();  // a model's own freezing (ConvMixer's) stays
        p.tensor->requires_grad_(trained);
        (trained ? s.trained_tensors : s.frozen_tensors)++;
        (trained ? s.trained_values : s.frozen_values) += p.tensor->numel();
    }
    engine::check(s.trained_tensors > 0, "--train-only '{}' with --freeze '{}' leaves no parameter to train",
                  train_only, freeze);
    return s;
}

void add_freeze_flags(CLI::App& app, std::string& train_only, std::string& freeze) {
    app.add_option("--train-only", train_only,
                   "update only the parameters matching these comma-separated globs (e.g. 'blocks.*.attn.v.*,tok_emb.*'); "
                   "the others keep their init");
    app.add_option("--freeze", freeze, "do not update the parameters matching these comma-separated globs "
                                       "(e.g. '*.bias,*norm*')");
}

void apply_freeze_flags(nn::Module& model, const std::string& train_only, const std::string& freeze,
                        const char* app_name) {
    if (train_only.empty() && freeze.empty()) return;
    FreezeSummary s = select_trained(model, train_only, freeze);
    std::printf("%s: training %lld of %lld parameter tensors (%lld of %lld values); the rest keep their values\n",
                app_name, (long long)s.trained_tensors, (long long)(s.trained_tensors + s.frozen_tensors),
                (long long)s.trained_values, (long long)(s.trained_values + s.frozen_values));
}

}  // namespace apps
