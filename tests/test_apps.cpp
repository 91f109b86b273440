// tests/test_apps.cpp: end-to-end runs of apps/train_vit and apps/train_lm on tiny data written
// by the test: a short run trains and writes its outputs, an interrupted run resumed equals an
// uninterrupted one bit for bit, a NaN loss stops cleanly, bad flags are refused with status 2.
// The apps are built by `make` (and by `make test`); run the suite from the repository root.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include "engine/rng.h"
#include "engine/safetensors.h"
#include "tests/test_data_helpers.h"

namespace fs = std::filesystem;
using engine::Tensor;

namespace {

// A tiny CIFAR-10 binary release: `per_class` images per class in each training batch file,
// images made of a class-dependent colour plus noise, so a small model can learn them.
void write_tiny_cifar10(const std::string& dir, int per_class_train, int per_class_test) {
    engine::Generator g(3);
    auto batch = [&](int per_class) {
        std::vector<uint8_t> bytes;
        for (int i = 0; i < per_class; i++)
            for (int c = 0; c < 10; c++) {
                bytes.push_back((uint8_t)c);
                std::vector<int32_t> noise(3072);
                g.randint(noise.data(), 3072, 0, 64);
                for (int ch = 0; ch < 3; ch++)
                    for (int p = 0; p < 1024; p++)
                        bytes.push_back((uint8_t)(((c * 37 + ch * 91) % 192) + noise[ch * 1024 + p]));
            }
        return bytes;
    };
    for (int k = 1; k <= 5; k++) test::write_file(dir + "/data_batch_" + std::to_string(k) + ".bin", batch(per_class_train));
    test::write_file(dir + "/test_batch.bin", batch(per_class_test));
}

std::string app_path(const std::string& name) {
    std::string p = "apps/" + name;
    if (!fs::exists(p)) FAIL(p << " not found: build the apps (make) and run the tests from the repository root");
    return p;
}

// Runs an app with `args`, output to `log`; returns its exit status.
int run_app(const std::string& name, const std::string& args, const std::string& log) {
    std::string cmd = app_path(name) + " " + args + " > " + log + " 2>&1";
    int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string slurp(const std::string& path) {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

// No RandAugment here: the test wants a loss curve that falls within a few epochs.
const char* kTinyVit = "--dataset cifar10 --dim 16 --depth 1 --heads 2 --patch 8 --batch-size 25 --lr 1e-2 "
                       "--warmup-epochs 0 --randaug 0 --threads 1 --log-every 1 --init timm";

}  // namespace

TEST_CASE("train_vit: a short run learns and writes its outputs", "[apps]") {
    test::TempDir tmp;
    write_tiny_cifar10(tmp / "cifar", 10, 5);
    std::string args = std::string(kTinyVit) + " --data-dir " + (tmp / "cifar") + " --epochs 3 --out " + (tmp / "run");
    int rc = run_app("train_vit", args, tmp / "log");
    INFO(slurp(tmp / "log"));
    REQUIRE(rc == 0);
    for (const char* f : {"config.json", "metrics.jsonl", "result.json", "last.safetensors", "best.safetensors",
                          "last.optim.safetensors"})
        CHECK(fs::exists(tmp / ("run/" + std::string(f))));
    auto config = nlohmann::json::parse(slurp(tmp / "run/config.json"));
    CHECK(config["--init"] == "timm");
    CHECK(config.contains("git_commit"));
    std::vector<double> losses;
    std::ifstream m(tmp / "run/metrics.jsonl");
    for (std::string line; std::getline(m, line);) {
        auto j = nlohmann::json::parse(line);
        if (j["kind"] == "train") losses.push_back(j["loss"]);
    }
    REQUIRE(losses.size() == 3 * 20);  // 500 images / 25 per batch, 3 epochs
    double first = 0, last = 0;  // mean loss of the first and of the last epoch
    for (int i = 0; i < 20; i++) first += losses[i] / 20, last += losses[40 + i] / 20;
    INFO("loss " << first << " -> " << last);
    CHECK(last < first * 0.8);
    auto result = nlohmann::json::parse(slurp(tmp / "run/result.json"));
    CHECK(result["test_acc"].get<double>() > 0.2);  // 10 classes: chance is 0.1
}

TEST_CASE("train_vit: interrupted and resumed equals uninterrupted, bit for bit", "[apps]") {
    test::TempDir tmp;
    write_tiny_cifar10(tmp / "cifar", 10, 2);
    std::string base = std::string(kTinyVit) + " --data-dir " + (tmp / "cifar") + " --epochs 3";
    REQUIRE(run_app("train_vit", base + " --out " + (tmp / "whole"), tmp / "log1") == 0);

    // The same run, stopped by SIGTERM partway, then resumed.
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        std::string log = tmp / "log2";
        freopen(log.c_str(), "w", stdout);
        freopen(log.c_str(), "a", stderr);
        std::string cmd = app_path("train_vit") + " " + base + " --out " + (tmp / "parts");
        execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), (char*)nullptr);
        _exit(127);
    }
    // Wait for a few training steps to be logged, then interrupt.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
        std::ifstream m(tmp / "parts/metrics.jsonl");
        int lines = 0;
        for (std::string l; std::getline(m, l);) lines++;
        if (lines >= 5) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    INFO(slurp(tmp / "log2"));
    bool finished_first = WIFEXITED(status) && WEXITSTATUS(status) == 0;  // too fast to catch: still a valid run
    if (finished_first) WARN("the run finished before SIGTERM arrived: only the equality of two whole runs was checked");
    if (!finished_first) {
        REQUIRE(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 143);
        CHECK(fs::exists(tmp / "parts/last.safetensors"));
        CHECK(!fs::exists(tmp / "parts/last.safetensors.tmp"));
        REQUIRE(run_app("train_vit", base + " --out " + (tmp / "parts") + " --resume", tmp / "log3") == 0);
    }
    auto a = engine::load_safetensors(tmp / "whole/last.safetensors");
    auto b = engine::load_safetensors(tmp / "parts/last.safetensors");
    REQUIRE(a.size() == b.size());
    for (auto& [name, t] : a) {
        INFO(name);
        REQUIRE(b.count(name));
        CHECK(std::memcmp(t.data_f32(), b.at(name).data_f32(), t.numel() * 4) == 0);
    }
}

TEST_CASE("train_vit: a NaN loss stops the run cleanly", "[apps]") {
    test::TempDir tmp;
    write_tiny_cifar10(tmp / "cifar", 4, 1);
    std::string args = std::string(kTinyVit) + " --data-dir " + (tmp / "cifar") + " --epochs 3 --fail-at-step 20 --out " +
                       (tmp / "run");
    int rc = run_app("train_vit", args, tmp / "log");
    std::string log = slurp(tmp / "log");
    INFO(log);
    CHECK(rc == 1);
    CHECK(log.find("loss is nan at epoch 3, step 20") != std::string::npos);
    CHECK(log.find("last.safetensors") != std::string::npos);
    CHECK(fs::exists(tmp / "run/last.safetensors"));  // the epoch-2 checkpoint is intact
    CHECK(engine::load_safetensors(tmp / "run/last.safetensors").size() > 0);
}

TEST_CASE("train_vit and train_lm refuse bad flags with status 2", "[apps]") {
    test::TempDir tmp;
    CHECK(run_app("train_vit", "--epochs 0", tmp / "log") == 2);
    CHECK(run_app("train_vit", "--no-such-flag", tmp / "log") == 2);
    CHECK(run_app("train_vit", "--init impulse3 --pool cls", tmp / "log") == 2);
    CHECK(slurp(tmp / "log").find("--pool avg") != std::string::npos);
    CHECK(run_app("train_vit", "--resume", tmp / "log") == 2);
    CHECK(run_app("train_vit", "--data-dir " + (tmp / "nothing"), tmp / "log") == 2);
    CHECK(slurp(tmp / "log").find("Looked in") != std::string::npos);
    CHECK(run_app("train_lm", "--model rnn", tmp / "log") == 2);
    CHECK(run_app("train_lm", "--init mimetic+nope", tmp / "log") == 2);
    CHECK(slurp(tmp / "log").find("unknown scheme 'nope'") != std::string::npos);
    CHECK(run_app("train_lm", "--protocol window --seq-len 8 --scored 9", tmp / "log") == 2);
    CHECK(run_app("train_lm", "--data-dir " + (tmp / "nothing"), tmp / "log") == 2);
}

TEST_CASE("train_lm: transformer, GAU and LSTM learn a tiny corpus", "[apps]") {
    test::TempDir tmp;
    std::string line = "the cat sat on the mat and the dog sat on the log\n";
    std::string text;
    for (int i = 0; i < 40; i++) text += line;
    for (const char* split : {"train", "valid", "test"}) test::write_file(tmp / ("text/" + std::string(split) + ".txt"), text);
    for (std::string model : {"transformer", "gau", "lstm"}) {
        std::string args = "--dataset text --data-dir " + (tmp / "text") + " --model " + model +
                           " --dim 32 --depth 2 --heads 2 --s 16 --seq-len 16 --batch-size 4 --epochs 8 --lr 1e-2"
                           " --dropout 0 --threads 1 --out " + (tmp / ("run_" + model));
        int rc = run_app("train_lm", args, tmp / "log");
        INFO(model << ":\n" << slurp(tmp / "log"));
        REQUIRE(rc == 0);
        auto result = nlohmann::json::parse(slurp(tmp / ("run_" + model + "/result.json")));
        // 10 distinct words; a model that learned the repeated line is far below uniform (ppl 11).
        CHECK(result["test_ppl"].get<double>() < 3.0);
    }
}
