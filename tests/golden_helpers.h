// tests/golden_helpers.h: reading a golden file (a safetensors file of PyTorch reference values
// written by tools/golden*.py) and comparing engine tensors with its tensors element by element.
//
// A tensor passes when every element has |engine - torch| <= atol + rtol·|torch| + scaled·M,
// M = max|torch| over the tensor (a tolerance relative to the tensor's own scale, for gradients
// that are 1e-5 in one layer and 1 in another); NaN never passes. compare() returns the max
// |engine - torch| so a test can report it. The files are found under GOLDEN_DIR, or tests/golden
// when it is unset (run the tests from the repository root); GOLDEN_VERBOSE=1 prints one line per
// compared tensor.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>
#include <fmt/format.h>
#include "engine/safetensors.h"

namespace golden {

struct Tol {
    float atol, rtol;
    float scaled = 0.f;  // times the tensor's max|torch|
};

inline std::string dir() {
    const char* env = std::getenv("GOLDEN_DIR");
    return env ? env : "tests/golden";
}

inline bool verbose() {
    const char* env = std::getenv("GOLDEN_VERBOSE");
    return env && *env && std::string(env) != "0";
}

// Compares `got` with `want` (the torch value); `what` names them in messages.
inline float compare(const std::string& what, const engine::Tensor& got, const engine::Tensor& want, Tol tol) {
    INFO(what << ": engine " << (got.defined() ? got.shape().str() : "undefined") << " vs torch "
              << want.shape().str());
    REQUIRE(got.defined());
    REQUIRE(got.shape() == want.shape());
    std::vector<float> g = got.to_vector(), w = want.to_vector();
    float max_diff = 0.f, max_want = 0.f, worst_excess = 0.f;
    for (float v : w) max_want = std::max(max_want, std::fabs(v));
    size_t worst = 0;
    for (size_t i = 0; i < g.size(); i++) {
        float diff = std::fabs(g[i] - w[i]);
        if (!(diff == diff)) diff = INFINITY;  // NaN counts as a failure
        max_diff = std::max(max_diff, diff);
        float excess = diff - (tol.atol + tol.rtol * std::fabs(w[i]) + tol.scaled * max_want);
        if (i == 0 || excess > worst_excess) {
            worst_excess = excess;
            worst = i;
        }
    }
    if (verbose()) fmt::print("golden {:<48} max|diff| {:.2e}  max|torch| {:.2e}\n", what, max_diff, max_want);
    INFO("max |engine - torch| = " << max_diff << "; worst element " << worst << ": engine "
                                   << (g.empty() ? 0.f : g[worst]) << ", torch " << (w.empty() ? 0.f : w[worst])
                                   << "; max|torch| " << max_want << " (atol " << tol.atol << ", rtol " << tol.rtol
                                   << ", scaled " << tol.scaled << ")");
    CHECK(worst_excess <= 0.f);
    return max_diff;
}

// One golden file, loaded whole.
class File {
public:
    // `name` is the path under dir() without ".safetensors" ("models/vit").
    explicit File(const std::string& name) : name_(name) {
        std::string path = dir() + "/" + name + ".safetensors";
        INFO("golden file " << path << " (run the tests from the repository root, or set GOLDEN_DIR)");
        REQUIRE(std::filesystem::exists(path));
        tensors_ = engine::load_safetensors(path, &metadata_);
    }

    const std::string& name() const { return name_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    bool has(const std::string& key) const { return tensors_.count(key) == 1; }

    const engine::Tensor& tensor(const std::string& key) const {
        INFO("golden " << name_ << ": tensor '" << key << "'");
        REQUIRE(has(key));
        return tensors_.at(key);
    }

    // The keys that start with `prefix`, with the prefix removed ("param." -> parameter names).
    std::vector<std::string> names(const std::string& prefix) const {
        std::vector<std::string> out;
        for (const auto& [key, t] : tensors_)
            if (key.compare(0, prefix.size(), prefix) == 0) out.push_back(key.substr(prefix.size()));
        return out;
    }

    float compare(const std::string& key, const engine::Tensor& got, Tol tol) const {
        return golden::compare(name_ + ": " + key, got, tensor(key), tol);
    }

private:
    std::string name_;
    std::map<std::string, engine::Tensor> tensors_;
    std::map<std::string, std::string> metadata_;
};

}  // namespace golden
