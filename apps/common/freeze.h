// apps/common/freeze.h: --train-only and --freeze, which parameters a run updates.
//
// Each flag takes comma-separated glob patterns over parameter names as named_parameters() and
// the checkpoints spell them ("blocks.3.attn.v.weight", "tok_emb.weight"); `*` matches any run of
// characters, dots included, and `?` one character. A parameter is trained when it matches some
// --train-only pattern (or that flag is empty) and no --freeze pattern, and the model has not
// frozen it itself (ConvMixer's --freeze-spatial). A frozen parameter gets no gradient
// (requires_grad false), so the optimizer neither moves nor decays it; it is still saved.
// Used to ask which parameters' updates matter (docs/RESULTS.md section 3: which parameters' first
// step collapses a deep Post-LN stack), or to keep a part of a model at its init. With
// --freeze-until the frozen part joins after a number of steps (a staged start).
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include <CLI/CLI.hpp>

namespace engine {
class Tensor;
}
namespace nn {
class Module;
}

namespace apps {

// The flags: --train-only PATTERNS, --freeze PATTERNS, and --freeze-until STEP (0: the choice
// holds for the whole run; else the parameters the first two froze train from step STEP + 1 on).
struct FreezeFlags {
    std::string train_only, freeze;
    int64_t until = 0;
};
void add_freeze_flags(CLI::App& app, FreezeFlags& flags);

// The parameters the flags froze, which --freeze-until trains again. Each takes a first optimizer
// step then (Adam's bias correction of a fresh start), as torch.optim counts each parameter's
// updates (nn::Optimizer::param_steps); the model moves to the device without changing them.
struct FrozenByFlags {
    std::vector<engine::Tensor*> tensors;
    int64_t until = 0;
    // Call before each step with the steps taken so far (a resumed run's included): once they
    // reach `until`, every frozen tensor trains again, and the run says so as `app_name`.
    void unfreeze_when_due(int64_t steps_taken, const char* app_name);
};

// Applies the flags to `model` (select_trained), prints what they froze as `app_name`, and
// returns the frozen parameters when --freeze-until will train them again (else none).
FrozenByFlags apply_freeze_flags(nn::Module& model, const FreezeFlags& flags, const char* app_name);

// "a,b" -> {"a", "b"}; empty items are refused, naming `flag`.
std::vector<std::string> split_patterns(const std::string& list, const std::string& flag);

// Whether the glob `pattern` matches a parameter name; `*` matches dots too.
bool matches_glob(const std::string& pattern, const std::string& name);

struct FreezeSummary {
    int64_t trained_tensors = 0, trained_values = 0;
    int64_t frozen_tensors = 0, frozen_values = 0;  // the model's own frozen ones included
    std::vector<engine::Tensor*> frozen_by_flags;   // only those the two lists turned off
};

// Sets requires_grad on every parameter of `model` from the two lists (only ever turning it off).
// Throws, naming the flag and the pattern, when a pattern matches no parameter (a typo would
// otherwise freeze or train nothing), and when nothing is left to train.
FreezeSummary select_trained(nn::Module& model, const std::string& train_only, const std::string& freeze);

}  // namespace apps
