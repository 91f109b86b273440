// tests/test_inspect_init.cpp: apps/inspect_init end to end: the per-layer JSON report, the
// --checkpoint path (figures of trained weights), and the usage errors.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include "engine/rng.h"
#include "init/init.h"
#include "nn/checkpoint.h"
#include "nn/transformer.h"
#include "test_data_helpers.h"

namespace {

// Runs apps/inspect_init with `args`; stdout to `out`, stderr to `err`; returns the exit status.
int inspect(const std::string& args, const std::string& out, const std::string& err) {
    REQUIRE(std::filesystem::exists("apps/inspect_init"));  // built by make, tests run from the root
    int rc = std::system(("apps/inspect_init " + args + " > " + out + " 2> " + err).c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::vector<nlohmann::json> json_lines(const std::string& path) {
    std::vector<nlohmann::json> rows;
    std::ifstream f(path);
    for (std::string line; std::getline(f, line);)
        if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
    return rows;
}

std::string slurp_file(const std::string& path) {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

// The ViT that `inspect_init --dim 32 --depth 2 --heads 2 --patch 4` builds.
const char* kSmallVit = "--dim 32 --depth 2 --heads 2 --patch 4 --batch 4";
nn::ViTConfig small_vit() {
    nn::ViTConfig c = nn::ViTConfig::tiny();
    c.dim = 32, c.depth = 2, c.heads = 2, c.patch = 4, c.pool = "avg", c.pos = "sincos2d";
    return c;
}

}  // namespace

TEST_CASE("inspect_init --json: one object per layer with the required figures; mimetic's signs", "[apps]") {
    test::TempDir dir;
    REQUIRE(inspect(std::string(kSmallVit) + " --init mimetic --json", dir / "out", dir / "err") == 0);
    auto rows = json_lines(dir / "out");
    REQUIRE(rows.size() == 2);
    for (size_t i = 0; i < rows.size(); i++) {
        for (const char* key : {"layer", "qk_diag_mean", "qk_offdiag_rms", "vo_diag_mean", "vo_offdiag_rms", "act_std",
                                "grad_std"})
            REQUIRE(rows[i].contains(key));
        CHECK(rows[i]["layer"] == (int)i);
        CHECK(rows[i]["qk_diag_mean"].get<double>() > 0.5);   // β₁ = 0.7 (plus the rank-k share)
        CHECK(rows[i]["vo_diag_mean"].get<double>() < -0.2);  // −β₂ = −0.4
    }
}

TEST_CASE("inspect_init --checkpoint: the figures are those of the saved weights, not of --init", "[apps]") {
    test::TempDir dir;
    engine::manual_seed(3);
    nn::ViT vit(small_vit());
    init::apply(vit, "mimetic", init::Options{}, nullptr);
    nn::save_checkpoint(dir / "mimetic", vit);

    REQUIRE(inspect(std::string(kSmallVit) + " --init timm --json", dir / "timm", dir / "err") == 0);
    REQUIRE(inspect(std::string(kSmallVit) + " --init timm --json --checkpoint " + (dir / "mimetic.safetensors"),
                    dir / "loaded", dir / "err") == 0);
    auto timm = json_lines(dir / "timm"), loaded = json_lines(dir / "loaded");
    REQUIRE(timm.size() == 2);
    REQUIRE(loaded.size() == 2);
    for (int i = 0; i < 2; i++) {
        CHECK(std::abs(timm[i]["qk_diag_mean"].get<double>()) < 0.05);  // trunc-normal 0.02: no diagonal
        CHECK(loaded[i]["qk_diag_mean"].get<double>() > 0.5);
        CHECK(loaded[i]["vo_diag_mean"].get<double>() < -0.2);
    }
    CHECK(slurp_file(dir / "err").find("checkpoint") != std::string::npos);

    // A checkpoint of another shape is refused, naming the tensors that differ.
    CHECK(inspect("--dim 32 --depth 2 --heads 2 --patch 2 --batch 4 --checkpoint " + (dir / "mimetic"), dir / "out",
                  dir / "err") == 2);
    CHECK(slurp_file(dir / "err").find("patch_embed.weight") != std::string::npos);
    CHECK(inspect(std::string(kSmallVit) + " --checkpoint " + (dir / "missing"), dir / "out", dir / "err") == 2);
}

TEST_CASE("inspect_init: unknown schemes and bad flags are usage errors", "[apps]") {
    test::TempDir dir;
    CHECK(inspect(std::string(kSmallVit) + " --init nonsense", dir / "out", dir / "err") == 2);
    CHECK(slurp_file(dir / "err").find("mimetic") != std::string::npos);  // the valid names are listed
    CHECK(inspect("--model vit-huge", dir / "out", dir / "err") == 2);
}
