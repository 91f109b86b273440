// tests/test_run_dir.cpp: apps/common/run.h's RunDir: a JSON file is replaced whole or not at all,
// and a write that fails (a full disk) is an error naming the file, not a file cut short; and the
// finite-weights check the trainers make before a checkpoint.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include "apps/common/run.h"
#include "engine/error.h"
#include "nn/layers.h"
#include "tests/test_data_helpers.h"

namespace fs = std::filesystem;

static std::string file_text(const std::string& path) {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST_CASE("RunDir::write_json replaces a file whole; a full disk is an error and keeps the old file", "[apps]") {
    test::TempDir tmp;
    apps::RunDir out(tmp / "run");
    out.write_json("config.json", {{"--lr", "0.001"}});
    out.write_json("config.json", {{"--lr", "0.002"}});
    CHECK(nlohmann::json::parse(std::ifstream(tmp / "run/config.json"))["--lr"] == "0.002");
    CHECK(!fs::exists(tmp / "run/config.json.tmp"));
    out.append_metrics({{"step", 1}});
    out.append_metrics({{"step", 2}});
    CHECK(file_text(tmp / "run/metrics.jsonl") == "{\"step\":1}\n{\"step\":2}\n");

    // /dev/full takes the temporary file's bytes and fails them with ENOSPC, as a full disk does.
    if (!fs::exists("/dev/full")) {
        WARN("no /dev/full here: the full-disk case is not checked");
        return;
    }
    fs::create_symlink("/dev/full", tmp / "run/config.json.tmp");
    CHECK_THROWS_WITH(out.write_json("config.json", {{"--lr", "0.003"}}),
                      Catch::Contains((tmp / "run/config.json.tmp") + ": flush failed: No space left on device"));
    CHECK(fs::is_symlink(tmp / "run/config.json.tmp") == false);  // the temporary file is gone
    CHECK(nlohmann::json::parse(std::ifstream(tmp / "run/config.json"))["--lr"] == "0.002");  // the old one
    fs::remove(tmp / "run/metrics.jsonl");
    fs::create_symlink("/dev/full", tmp / "run/metrics.jsonl");
    CHECK_THROWS_WITH(out.append_metrics({{"step", 3}}),
                      Catch::Contains("cannot append to " + (tmp / "run/metrics.jsonl")));
}

// What the trainers ask before each checkpoint: a model holding a NaN or an infinity is not saved
// (unless --no-nan-check), and without --out there is nothing to protect.
TEST_CASE("weights_finite_for_checkpoint: a non-finite weight stops the checkpoint, unless the check is off",
          "[apps]") {
    test::TempDir tmp;
    apps::RunDir out(tmp / "run");
    nn::Linear layer(4, 3);
    CHECK(apps::weights_finite_for_checkpoint("test", layer, "last", 1, 10, out, true));
    layer.bias.data_f32()[2] = std::numeric_limits<float>::quiet_NaN();
    CHECK_FALSE(apps::weights_finite_for_checkpoint("test", layer, "last", 1, 10, out, true));
    CHECK(apps::weights_finite_for_checkpoint("test", layer, "last", 1, 10, out, false));        // --no-nan-check
    CHECK(apps::weights_finite_for_checkpoint("test", layer, "last", 1, 10, apps::RunDir(), true));  // no --out
}
