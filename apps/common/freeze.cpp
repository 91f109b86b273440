// apps/common/freeze.cpp: --train-only and --freeze (freeze.h).
#include "apps/common/freeze.h"
#include "apps/common/run.h"
#include <fnmatch.h>
#include <cstdio>
#include <fmt/format.h>
#include "engine/error.h"
#include "engine/tensor.h"
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
bool matches_glob(const std::string& pattern, const std::string& name) {
    return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

FreezeSummary select_trained(nn::Module& model, const std::string& train_only, const std::string& freeze) {
    auto keep = split_patterns(train_only, "--train-only");
    auto drop = split_patterns(freeze, "--freeze");
    auto params = model.named_parameters();
    auto check_used = [&](const std::vector<std::string>& patterns, const std::string& flag) {
        for (const auto& pat : patterns) {
            bool used = false;
            for (const auto& p : params) used = used || matches_glob(pat, p.name);
            engine::check(used, "{}: '{}' matches no parameter of the {} (e.g. '{}')", flag, pat,
                          model.type_name(), params.empty() ? std::string("none") : params.front().name);
        }
    };
    check_used(keep, "--train-only");
    check_used(drop, "--freeze");
    FreezeSummary s;
    for (const auto& p : params) {
        bool trained = keep.empty();
        for (const auto& pat : keep) trained = trained || matches_glob(pat, p.name);
        for (const auto& pat : drop) trained = trained && !matches_glob(pat, p.name);
        if (p.tensor->requires_grad() && !trained) s.frozen_by_flags.push_back(p.tensor);
        trained = trained && p.tensor->requires_grad();  // a model's own freezing (ConvMixer's) stays
        p.tensor->requires_grad_(trained);
        (trained ? s.trained_tensors : s.frozen_tensors)++;
        (trained ? s.trained_values : s.frozen_values) += p.tensor->numel();
    }
    engine::check(s.trained_tensors > 0, "--train-only '{}' with --freeze '{}' leaves no parameter to train",
                  train_only, freeze);
    return s;
}

void add_freeze_flags(CLI::App& app, FreezeFlags& flags) {
    app.add_option("--train-only", flags.train_only,
                   "update only the parameters matching these comma-separated globs (e.g. 'blocks.*.attn.v.*,tok_emb.*'); "
                   "the others keep their init");
    app.add_option("--freeze", flags.freeze, "do not update the parameters matching these comma-separated globs "
                                             "(e.g. '*.bias,*norm*')");
    app.add_option("--freeze-until", flags.until,
                   "with --train-only/--freeze: after this many steps, train the parameters they froze too (each "
                   "starting its optimizer state afresh; no CUDA graph); 0: never")
        ->capture_default_str()
        ->check(apps::NonNegative);
}

FrozenByFlags apply_freeze_flags(nn::Module& model, const FreezeFlags& flags, const char* app_name) {
    FrozenByFlags frozen;
    if (flags.train_only.empty() && flags.freeze.empty()) {
        engine::check(flags.until == 0, "--freeze-until {}: there is nothing to unfreeze without --train-only or --freeze",
                      flags.until);
        return frozen;
    }
    FreezeSummary s = select_trained(model, flags.train_only, flags.freeze);
    std::string how_long = flags.until > 0 ? fmt::format(" for the first {} steps", flags.until) : "";
    std::printf("%s: training %lld of %lld parameter tensors (%lld of %lld values); the rest keep their values%s\n",
                app_name, (long long)s.trained_tensors, (long long)(s.trained_tensors + s.frozen_tensors),
                (long long)s.trained_values, (long long)(s.trained_values + s.frozen_values), how_long.c_str());
    if (flags.until == 0) return frozen;
    frozen.until = flags.until;
    frozen.tensors = std::move(s.frozen_by_flags);
    return frozen;
}

void FrozenByFlags::unfreeze_when_due(int64_t steps_taken, const char* app_name) {
    if (tensors.empty() || steps_taken < until) return;
    int64_t values = 0;
    for (engine::Tensor* t : tensors) {
        t->requires_grad_(true);
        values += t->numel();
    }
    std::printf("%s: step %lld: --freeze-until %lld: %zu more parameter tensors (%lld values) train from here\n",
                app_name, (long long)steps_taken + 1, (long long)until, tensors.size(), (long long)values);
    tensors.clear();
}

}  // namespace apps
