// tests/test_apps.cpp: end-to-end runs of apps/train_vit and apps/train_lm on tiny data written
// by the test: a short run trains and writes its outputs, an interrupted run resumed equals an
// uninterrupted one bit for bit, a NaN loss stops cleanly, bad flags are refused with status 2.
// With INITLAB_DATA set, "[ptb-char]" also trains on a slice of the real PTB char data.
// The apps are built by `make` (and by `make test`); run the suite from the repository root.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>
#include "engine/rng.h"
#include "data/image_codec.h"
#include "engine/safetensors.h"
#include "tests/test_data_helpers.h"

namespace fs = std::filesystem;
using engine::Shape;
using engine::Tensor;

namespace {

// The same values bit for bit (checkpoint tensors: CPU float32).
bool same(const Tensor& a, const Tensor& b) {
    return a.numel() == b.numel() && std::equal(a.data_f32(), a.data_f32() + a.numel(), b.data_f32());
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

// How a run_app_until run ended: its wait status, and whether it had exited before the signal.
struct Stopped {
    int status = 0;
    bool exited_first = false;
};

// True when a run_app_until run was stopped by its SIGTERM (exit 143). A run that had already
// exited when the signal was due (a run too fast to catch) is still a valid run, but then only two
// whole runs get compared: a warning. A run still going when it got the signal must stop with 143:
// one that finished instead ignored the signal.
bool stopped_by_sigterm(const Stopped& s) {
    REQUIRE(WIFEXITED(s.status));
    if (s.exited_first) {
        REQUIRE(WEXITSTATUS(s.status) == 0);
        WARN("the run finished before SIGTERM was due: only the equality of two whole runs was checked");
        return false;
    }
    REQUIRE(WEXITSTATUS(s.status) == 143);
    return true;
}

std::string slurp(const std::string& path) {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

// The lines of a run's metrics.jsonl written so far (a half-written last line is left out).
std::vector<nlohmann::json> metrics_lines(const std::string& path) {
    std::vector<nlohmann::json> out;
    std::ifstream m(path);
    for (std::string l; std::getline(m, l);) {
        auto j = nlohmann::json::parse(l, nullptr, false);
        if (!j.is_discarded()) out.push_back(j);
    }
    return out;
}

// Starts an app with `args` (output to `log`), waits until `ready()` holds (at most 60 s) and
// sends it a real SIGTERM, unless it has exited by then; returns how it ended.
Stopped run_app_until(const std::string& name, const std::string& args, const std::string& log,
                      const std::function<bool()>& ready) {
    std::string cmd = app_path(name) + " " + args;
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        freopen(log.c_str(), "w", stdout);
        freopen(log.c_str(), "a", stderr);
        execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), (char*)nullptr);
        _exit(127);
    }
    Stopped s;
    auto exited = [&] { return s.exited_first = s.exited_first || waitpid(pid, &s.status, WNOHANG) == pid; };
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!exited() && std::chrono::steady_clock::now() < deadline && !ready())
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (exited()) return s;
    kill(pid, SIGTERM);
    waitpid(pid, &s.status, 0);
    return s;
}

// Every tensor of two safetensors files is bitwise equal.
void check_same_tensors(const std::string& path_a, const std::string& path_b) {
    auto a = engine::load_safetensors(path_a);
    auto b = engine::load_safetensors(path_b);
    REQUIRE(a.size() == b.size());
    for (auto& [name, t] : a) {
        INFO(name);
        REQUIRE(b.count(name));
        REQUIRE(b.at(name).numel() == t.numel());
        CHECK(std::memcmp(t.data_f32(), b.at(name).data_f32(), t.numel() * 4) == 0);
    }
}

// No RandAugment here: the test wants a loss curve that falls within a few epochs.
const char* kTinyVit = "--dataset cifar10 --dim 16 --depth 1 --heads 2 --patch 8 --batch-size 25 --lr 1e-2 "
                       "--warmup-epochs 0 --randaug 0 --threads 1 --log-every 1 --init timm";

}  // namespace

TEST_CASE("train_vit: a short run learns and writes its outputs", "[apps]") {
    test::TempDir tmp;
    test::write_tiny_cifar10(tmp / "cifar", 10, 5);
    std::string args = std::string(kTinyVit) + " --data-dir " + (tmp / "cifar") + " --epochs 3 --out " + (tmp / "run");
    int rc = run_app("train_vit", args, tmp / "log");
    INFO(slurp(tmp / "log"));
    REQUIRE(rc == 0);
    // The tiny files are partial copies of the release, and the log says so, file by file.
    CHECK(slurp(tmp / "log").find("data_batch_3.bin holds 100 images, the release's 10000") != std::string::npos);
    CHECK(slurp(tmp / "log").find("test_batch.bin holds 50 images") != std::string::npos);
    for (const char* f : {"config.json", "metrics.jsonl", "result.json", "init.safetensors", "last.safetensors",
                          "best.safetensors", "last.optim.safetensors"})
        CHECK(fs::exists(tmp / ("run/" + std::string(f))));
    auto config = nlohmann::json::parse(slurp(tmp / "run/config.json"));
    CHECK(config["--init"] == "timm");
    // The commit the binary was built from (not the working directory's): a hash, or "unknown" for
    // a build outside a git checkout.
    CHECK(std::regex_match(config["git_commit"].get<std::string>(), std::regex("[0-9a-f]{40}(\\+dirty)?|unknown")));
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

// --train-subset takes a seeded subset that keeps every class; --opt sgd (Nesterov, momentum 0.9)
// trains and checkpoints its momentum buffers instead of Adam's moments.
TEST_CASE("train_vit --train-subset and --opt sgd", "[apps]") {
    test::TempDir tmp;
    test::write_tiny_cifar10(tmp / "cifar", 10, 5);
    std::string args = std::string(kTinyVit) + " --data-dir " + (tmp / "cifar") +
                       " --epochs 4 --train-subset 53 --opt sgd --out " + (tmp / "run");
    int rc = run_app("train_vit", args, tmp / "log");
    INFO(slurp(tmp / "log"));
    REQUIRE(rc == 0);
    CHECK(slurp(tmp / "log").find("cifar10: 53 train / 50 test images, 10 classes") != std::string::npos);
    std::vector<double> losses;
    for (auto& j : metrics_lines(tmp / "run/metrics.jsonl"))
        if (j["kind"] == "train") losses.push_back(j["loss"]);
    REQUIRE(losses.size() == 4 * 3);  // 53 images: batches of 25, 25 and 3, 4 epochs
    INFO("first epoch " << losses[0] << " " << losses[1] << ", last " << losses[9] << " " << losses[10]);
    CHECK(losses[9] + losses[10] < losses[0] + losses[1]);
    auto state = engine::load_safetensors(tmp / "run/last.optim.safetensors");
    CHECK(state.count("blocks.0.attn.q.weight.momentum"));
    CHECK_FALSE(state.count("blocks.0.attn.q.weight.exp_avg"));
}

// The same flags in train_vit: the patch embedding frozen in one run stays at the init that a run
// training only the head keeps too, while the blocks of the first run move.
TEST_CASE("train_vit --freeze / --train-only / --freeze-until / --init-from: frozen weights keep their values", "[apps]") {
    test::TempDir tmp;
    test::write_tiny_cifar10(tmp / "cifar", 4, 1);
    std::string base = std::string(kTinyVit) + " --data-dir " + (tmp / "cifar") + " --epochs 1 --out ";
    REQUIRE(run_app("train_vit", base + (tmp / "frozen") + " --freeze 'patch_embed.*'", tmp / "log") == 0);
    CHECK(slurp(tmp / "log").find("train_vit: training ") != std::string::npos);
    REQUIRE(run_app("train_vit", base + (tmp / "head") + " --train-only 'head.*'", tmp / "log") == 0);
    auto frozen = engine::load_safetensors(tmp / "frozen/last.safetensors");
    auto head = engine::load_safetensors(tmp / "head/last.safetensors");
    CHECK(same(frozen.at("patch_embed.weight"), head.at("patch_embed.weight")));
    CHECK(same(frozen.at("patch_embed.bias"), head.at("patch_embed.bias")));
    CHECK(!same(frozen.at("blocks.0.attn.q.weight"), head.at("blocks.0.attn.q.weight")));
    // --freeze-until 1: the patch embedding joins at the second (last) step, and moves.
    REQUIRE(run_app("train_vit", base + (tmp / "staged") + " --freeze 'patch_embed.*' --freeze-until 1", tmp / "log") == 0);
    CHECK(slurp(tmp / "log").find("train_vit: step 2: --freeze-until 1: 2 more parameter tensors") != std::string::npos);
    auto staged = engine::load_safetensors(tmp / "staged/last.safetensors");
    CHECK(!same(staged.at("patch_embed.weight"), frozen.at("patch_embed.weight")));
    // --init-from: another seed's run that starts from the first run's weights and trains only the
    // head ends with every other tensor as the first run left it.
    REQUIRE(run_app("train_vit", base + (tmp / "from") + " --seed 9 --train-only 'head.*' --init-from " +
                                     (tmp / "frozen/last.safetensors"), tmp / "log") == 0);
    auto from = engine::load_safetensors(tmp / "from/last.safetensors");
    for (const auto& [name, t] : frozen) {
        INFO(name);
        CHECK(same(from.at(name), t) == (name.rfind("head.", 0) != 0));
    }
}

TEST_CASE("train_vit: interrupted and resumed equals uninterrupted, bit for bit", "[apps]") {
    test::TempDir tmp;
    test::write_tiny_cifar10(tmp / "cifar", 10, 2);
    // --eval-init: the evaluation at step 0 stays in the resumed run's result, and is not repeated.
    std::string base = std::string(kTinyVit) + " --data-dir " + (tmp / "cifar") + " --epochs 3 --eval-init";
    REQUIRE(run_app("train_vit", base + " --out " + (tmp / "whole"), tmp / "log1") == 0);

    // The same run, stopped by SIGTERM after a few training steps, then resumed.
    Stopped stop = run_app_until("train_vit", base + " --out " + (tmp / "parts"), tmp / "log2",
                                 [&] { return metrics_lines(tmp / "parts/metrics.jsonl").size() >= 5; });
    INFO(slurp(tmp / "log2"));
    if (stopped_by_sigterm(stop)) {
        CHECK(fs::exists(tmp / "parts/last.safetensors"));
        CHECK(!fs::exists(tmp / "parts/last.safetensors.tmp"));
        REQUIRE(run_app("train_vit", base + " --out " + (tmp / "parts") + " --resume", tmp / "log3") == 0);
    }
    check_same_tensors(tmp / "whole/last.safetensors", tmp / "parts/last.safetensors");
    // Every epoch's logged train loss too (the interrupted epoch's running sum went with the
    // checkpoint), and the result.
    auto evals = [&](const std::string& run) {
        std::vector<nlohmann::json> out;
        for (auto& j : metrics_lines(tmp / (run + "/metrics.jsonl")))
            if (j["kind"] == "eval") out.push_back({j["train_loss"], j["test_loss"], j["test_acc"]});
        return out;
    };
    CHECK(evals("parts") == evals("whole"));
    auto result = [&](const std::string& run) { return nlohmann::json::parse(slurp(tmp / (run + "/result.json"))); };
    CHECK(result("parts")["test_acc"] == result("whole")["test_acc"]);
    REQUIRE(result("whole").contains("init_eval"));
    CHECK(result("parts")["init_eval"] == result("whole")["init_eval"]);
    // --resume of a finished run trains nothing and gives the same result (it wrote zeros).
    REQUIRE(run_app("train_vit", base + " --out " + (tmp / "whole") + " --resume", tmp / "log4") == 0);
    CHECK(result("whole")["test_acc"] == result("parts")["test_acc"]);
    CHECK(result("whole")["test_loss"] == result("parts")["test_loss"]);
}

// --eval-init scores the init on the test set before the first step: a line of metrics.jsonl at
// step 0 and result.json's init_eval, the same figures a run that cannot move its weights (lr 1e-30)
// ends with; the training itself is the run's without the flag, bit for bit.
TEST_CASE("train_vit --eval-init: the init's test score, training unchanged", "[apps]") {
    test::TempDir tmp;
    test::write_tiny_cifar10(tmp / "cifar", 4, 2);
    std::string base = std::string(kTinyVit) + " --data-dir " + (tmp / "cifar");
    REQUIRE(run_app("train_vit", base + " --epochs 2 --eval-init --out " + (tmp / "with"), tmp / "log") == 0);
    std::string log = slurp(tmp / "log");
    INFO(log);
    CHECK(log.find("init: test loss ") != std::string::npos);
    REQUIRE(run_app("train_vit", base + " --epochs 2 --out " + (tmp / "without"), tmp / "log2") == 0);
    check_same_tensors(tmp / "with/last.safetensors", tmp / "without/last.safetensors");
    auto lines = metrics_lines(tmp / "with/metrics.jsonl");
    REQUIRE(!lines.empty());
    const nlohmann::json first = lines[0];
    CHECK(first["kind"] == "eval");
    CHECK(first["step"] == 0);
    CHECK(first["epoch"] == 0);
    auto result = [&](const std::string& run) { return nlohmann::json::parse(slurp(tmp / (run + "/result.json"))); };
    CHECK(result("with")["init_eval"] == nlohmann::json{{"test_loss", first["test_loss"]}, {"test_acc", first["test_acc"]}});
    CHECK(!result("without").contains("init_eval"));
    CHECK(result("with")["test_acc"] == result("without")["test_acc"]);
    // A run whose steps cannot change a weight in float32 ends with its init's score.
    const std::string still = std::regex_replace(base, std::regex("--lr 1e-2"), "--lr 1e-30");
    REQUIRE(still != base);
    REQUIRE(run_app("train_vit", still + " --epochs 1 --min-lr 0 --eval-init --out " + (tmp / "still"), tmp / "log3") == 0);
    CHECK(result("still")["init_eval"] == result("with")["init_eval"]);  // the same seed: the same init
    CHECK(result("still")["test_loss"].get<double>() == Approx(first["test_loss"].get<double>()).epsilon(1e-6));
    CHECK(std::abs(result("still")["test_acc"].get<double>() - first["test_acc"].get<double>()) <= 0.02 + 1e-9);
    // A finished run resumed keeps its init_eval and logs no second one.
    REQUIRE(run_app("train_vit", base + " --epochs 2 --eval-init --out " + (tmp / "with") + " --resume", tmp / "log4") == 0);
    CHECK(result("with")["init_eval"] == result("still")["init_eval"]);
    int at_init = 0;
    for (auto& j : metrics_lines(tmp / "with/metrics.jsonl")) at_init += j["kind"] == "eval" && j["step"] == 0;
    CHECK(at_init == 1);
}

TEST_CASE("train_vit: a NaN loss stops the run cleanly", "[apps]") {
    test::TempDir tmp;
    test::write_tiny_cifar10(tmp / "cifar", 4, 1);
    std::string args = std::string(kTinyVit) + " --data-dir " + (tmp / "cifar") + " --epochs 3 --fail-at-step 20 --out " +
                       (tmp / "run");
    int rc = run_app("train_vit", args, tmp / "log");
    std::string log = slurp(tmp / "log");
    INFO(log);
    CHECK(rc == 1);
    CHECK(log.find("loss is nan at epoch 3, step 20") != std::string::npos);
    CHECK(log.find("last.safetensors") != std::string::npos);
    // The last checkpoint is the one from the end of epoch 2, not one written at the bad step.
    REQUIRE(fs::exists(tmp / "run/last.safetensors"));
    std::map<std::string, std::string> meta;
    CHECK(engine::load_safetensors(tmp / "run/last.safetensors", &meta).size() > 0);
    CHECK(meta.at("epoch") == "2");
    CHECK(meta.at("batch_in_epoch") == "0");
    CHECK(std::stoll(meta.at("step")) < 20);
    CHECK_FALSE(fs::exists(tmp / "run/result.json"));
}

// `count` noise PNGs of size x size in each of `classes` under dir/ (a split's class folders, or,
// with `flat`, directly in dir as Tiny-ImageNet's val/images and test/images).
void write_png_images(const std::string& dir, const std::vector<std::string>& classes, int count, int size = 32,
                      bool flat = false) {
    engine::Generator g(7);
    for (const std::string& cls : classes)
        for (int k = 0; k < count; k++) {
            std::vector<float> noise(size * size * 3);
            g.uniform(noise.data(), (int64_t)noise.size(), 0.f, 255.f);
            std::vector<uint8_t> img(noise.begin(), noise.end());
            std::string file = flat ? fmt::format("{}/{}{}.png", dir, cls, k) : fmt::format("{}/{}/{}.png", dir, cls, k);
            data::write_png(test::made_parent(file), img.data(), size, size);
        }
}

// An image folder lists its images class by class: the first N would be the first classes only.
TEST_CASE("train_vit --init-samples: data-dependent inits see images drawn at random over the classes", "[apps]") {
    test::TempDir tmp;
    for (const char* split : {"train", "test"}) write_png_images(tmp / "folder" + "/" + split, {"a", "b", "c", "d"}, 6);
    std::string base = "--dataset folder --data-dir " + (tmp / "folder") +
                       " --dim 16 --depth 1 --heads 2 --patch 8 --batch-size 8 --epochs 1 --randaug 0 --threads 1";
    REQUIRE(run_app("train_vit", base + " --init lsuv --init-samples 12 --out " + (tmp / "lsuv"), tmp / "log") == 0);
    std::string log = slurp(tmp / "log");
    INFO(log);
    CHECK(log.find("init set: 12 of 24 training images at random, 4 of 4 classes") != std::string::npos);
    CHECK(log.find("on 12 samples") != std::string::npos);
    // A scheme that needs no data says nothing of an init set.
    REQUIRE(run_app("train_vit", base + " --init timm --out " + (tmp / "timm"), tmp / "log") == 0);
    CHECK(slurp(tmp / "log").find("init set:") == std::string::npos);
    CHECK(run_app("train_vit", base + " --init lsuv --init-samples 0", tmp / "log") == 2);
}

// An evaluation split whose classes are not train/'s would shift every label after the difference.
TEST_CASE("train_vit --dataset folder: the test/ or val/ split with train/'s classes and image size, else an error",
          "[apps]") {
    test::TempDir tmp;
    const std::string flags = " --dim 16 --depth 1 --heads 2 --patch 8 --batch-size 8 --epochs 1 --randaug 0 "
                              "--threads 1 --init timm";
    auto result_of = [&](const std::string& dir) {
        int rc = run_app("train_vit", "--dataset folder --data-dir " + dir + flags + " --out " + dir + "-run", tmp / "log");
        INFO(slurp(tmp / "log"));
        return rc;
    };
    // Tiny-ImageNet's layout: val/ labelled by val_annotations.txt, test/ one unlabelled folder.
    std::string tiny = tmp / "tiny";
    write_png_images(tiny + "/train/n01/images", {"x"}, 4, 32, true);
    write_png_images(tiny + "/train/n02/images", {"y"}, 4, 32, true);
    write_png_images(tiny + "/val/images", {"v"}, 3, 32, true);
    test::write_file(tiny + "/val/val_annotations.txt", "v0.png\tn01\t0\t0\t1\t1\nv1.png\tn02\t0\t0\t1\t1\n"
                                                        "v2.png\tn01\t0\t0\t1\t1\n");
    write_png_images(tiny + "/test/images", {"t"}, 5, 32, true);
    REQUIRE(result_of(tiny) == 0);
    CHECK(slurp(tmp / "log").find("8 train / 3 test images, 2 classes") != std::string::npos);
    // A test/ without one of train/'s classes.
    std::string missing = tmp / "missing";
    write_png_images(missing + "/train", {"a", "b", "c"}, 2);
    write_png_images(missing + "/test", {"a", "c"}, 2);
    REQUIRE(result_of(missing) == 1);
    CHECK(slurp(tmp / "log").find("class 1 is 'c' where train/ has 'b'") != std::string::npos);
    // Test images of another size.
    std::string sizes = tmp / "sizes";
    write_png_images(sizes + "/train", {"a", "b"}, 2);
    write_png_images(sizes + "/test", {"a", "b"}, 2, 16);
    REQUIRE(result_of(sizes) == 1);
    CHECK(slurp(tmp / "log").find("its images are 16x16") != std::string::npos);
    // A folder read as CIFAR must have CIFAR's classes (it would take CIFAR's normalization and name).
    std::string two = tmp / "two";
    write_png_images(two + "/train", {"a", "b"}, 2);
    write_png_images(two + "/test", {"a", "b"}, 2);
    for (const char* dataset : {"cifar10", "cifar100"}) {
        int rc = run_app("train_vit", std::string("--dataset ") + dataset + " --data-dir " + two + flags, tmp / "log");
        CHECK(rc == 1);
        CHECK(slurp(tmp / "log").find("has 2 classes, not") != std::string::npos);
    }
}

TEST_CASE("train_vit and train_lm refuse bad flags with status 2", "[apps]") {
    test::TempDir tmp;
    CHECK(run_app("train_vit", "--epochs 0", tmp / "log") == 2);
    CHECK(run_app("train_vit", "--no-such-flag", tmp / "log") == 2);
    CHECK(run_app("train_vit", "--init impulse3 --pool cls", tmp / "log") == 2);
    CHECK(slurp(tmp / "log").find("--pool avg") != std::string::npos);
    CHECK(run_app("train_vit", "--resume", tmp / "log") == 2);
    // Negative sizes and counts are refused by name, not read as "off" or failing later.
    for (const char* flag : {"--depth -1", "--dim -4", "--workers -1", "--threads -2", "--train-subset -5",
                             "--clip-grad -1", "--adam-eps 0"}) {
        INFO(flag);
        CHECK(run_app("train_vit", std::string(flag) + " --dry-run", tmp / "log") == 2);
        CHECK(slurp(tmp / "log").find(std::string(flag).substr(0, std::string(flag).find(' '))) != std::string::npos);
    }
    // The init schemes' numeric options too (before, a zero lr or tolerance failed in the init).
    for (const char* flag : {"--impulse-lr 0", "--lsuv-tol 0", "--lsuv-max-iters 0", "--goal-std -1",
                             "--tfixup-layers -2"}) {
        INFO(flag);
        CHECK(run_app("train_vit", std::string(flag) + " --dry-run", tmp / "log") == 2);
        CHECK(slurp(tmp / "log").find(std::string(flag).substr(0, std::string(flag).find(' '))) != std::string::npos);
    }
    for (const char* flag : {"--emb-dropout 1.5", "--word-dropout -0.1", "--max-steps -1", "--clip-grad -1"}) {
        INFO(flag);
        CHECK(run_app("train_lm", std::string(flag) + " --dry-run", tmp / "log") == 2);
        CHECK(slurp(tmp / "log").find(std::string(flag).substr(0, std::string(flag).find(' '))) != std::string::npos);
    }
    CHECK(run_app("train_vit", "--data-dir " + (tmp / "nothing"), tmp / "log") == 2);
    CHECK(slurp(tmp / "log").find("Looked in") != std::string::npos);
    // An image folder: --data-dir is needed, and a train/ without test/ or val/ is named as such.
    CHECK(run_app("train_vit", "--dataset folder --dry-run", tmp / "log") == 2);
    CHECK(slurp(tmp / "log").find("--dataset folder needs --data-dir DIR") != std::string::npos);
    CHECK(run_app("train_vit", "--dataset folder --data-dir " + (tmp / "nothing"), tmp / "log") == 2);
    CHECK(slurp(tmp / "log").find("--data-dir " + (tmp / "nothing") + ": no train/ folder") != std::string::npos);
    fs::create_directories(tmp / "trainonly/train/cat");
    CHECK(run_app("train_vit", "--dataset folder --data-dir " + (tmp / "trainonly"), tmp / "log") != 0);
    CHECK(slurp(tmp / "log").find("it has train/ but no test/ or val/ split") != std::string::npos);
    CHECK(run_app("train_lm", "--model rnn", tmp / "log") == 2);
    CHECK(run_app("train_lm", "--init mimetic+nope", tmp / "log") == 2);
    CHECK(slurp(tmp / "log").find("unknown scheme 'nope'") != std::string::npos);
    CHECK(run_app("train_lm", "--protocol window --seq-len 8 --scored 9", tmp / "log") == 2);
    CHECK(run_app("train_lm", "--data-dir " + (tmp / "nothing"), tmp / "log") == 2);
    CHECK(run_app("train_lm", "--head-bias", tmp / "log") == 2);  // a tied head has no bias of its own
    CHECK(slurp(tmp / "log").find("--untied") != std::string::npos);
    CHECK(run_app("train_lm", "--model gau --untied --head-bias", tmp / "log") == 2);
    CHECK(run_app("train_lm", "--pos rope --pe-scale 2", tmp / "log") == 2);  // rotary PE has no vector to scale
    CHECK(slurp(tmp / "log").find("--pe-scale and --pe-every-block apply to") != std::string::npos);
    CHECK(run_app("train_lm", "--model lstm --pe-scale 2", tmp / "log") == 2);
    CHECK(run_app("train_lm", "--pos none --pe-every-block", tmp / "log") == 2);
    CHECK(run_app("train_lm", "--model gau --emb-scale 2", tmp / "log") == 2);
    CHECK(slurp(tmp / "log").find("--emb-scale applies to --model transformer") != std::string::npos);
    // Another model's flags run (one command for several models), with a note naming them.
    // So do flags of another schedule, --eval-tokens without --eval-every, and --init-samples with
    // an init that uses no data.
    CHECK(run_app("train_lm", "--model lstm --heads 4 --s 64 --dry-run", tmp / "log") == 0);
    CHECK(slurp(tmp / "log").find("note: --heads changes nothing here (--model lstm)") != std::string::npos);
    CHECK(slurp(tmp / "log").find("note: --s changes nothing here (--model lstm)") != std::string::npos);
    CHECK(run_app("train_lm", "--model gau --s 64 --gau-pre-norm --dry-run", tmp / "log") == 0);
    CHECK(slurp(tmp / "log").find("changes nothing") == std::string::npos);
    CHECK(run_app("train_lm", "--schedule plateau --min-lr 1e-4 --dry-run", tmp / "log") == 0);  // its floor
    CHECK(slurp(tmp / "log").find("changes nothing") == std::string::npos);
    CHECK(run_app("train_lm", "--schedule step --warmup-steps 9 --min-lr 1e-4 --eval-tokens 5 --init-samples 8 --dry-run",
                  tmp / "log") == 0);
    for (const char* note : {"--warmup-steps changes nothing here (--schedule step)",
                             "--min-lr changes nothing here (--schedule step)",
                             "--eval-tokens changes nothing here (no --eval-every)",
                             "--init-samples changes nothing here (--init torch uses no data)"})
        CHECK(slurp(tmp / "log").find(note) != std::string::npos);
    CHECK(run_app("train_lm", "--dataset ptb-char --level byte --dry-run", tmp / "log") == 2);
    CHECK(slurp(tmp / "log").find("--level applies to --dataset text") != std::string::npos);
    CHECK(run_app("train_lm", "--dataset text --level bogus --dry-run", tmp / "log") == 2);
    // Raw WikiText: char level unless --level byte; word level refused (no <unk>).
    CHECK(run_app("train_lm", "--dataset wikitext2-raw --level word --dry-run", tmp / "log") == 2);
    CHECK(slurp(tmp / "log").find("is read at char or byte level (word level: --dataset wikitext2,") != std::string::npos);
    CHECK(run_app("train_lm", "--dataset wikitext103-raw --dry-run", tmp / "log") == 0);
    CHECK(slurp(tmp / "log").find("\"--level\": \"char\"") != std::string::npos);
    CHECK(run_app("train_lm", "--model lstm --preset medium --dim 64 --dry-run", tmp / "log") == 2);
    CHECK(slurp(tmp / "log").find("--preset sets --dim, --depth and --dropout; --dim too") != std::string::npos);
    CHECK(run_app("train_lm", "--model lstm --preset medium --dry-run", tmp / "log") == 0);  // records its sizes
    CHECK(slurp(tmp / "log").find("\"--dim\": \"650\"") != std::string::npos);
    CHECK(slurp(tmp / "log").find("\"--dropout\": \"0.5\"") != std::string::npos);
    // --randaug N[,M] is checked before anything runs (a bad one aborted after loading the data).
    for (const char* bad : {"abc", "3x", "2,50", "-3", "2,"}) {
        INFO(bad);
        CHECK(run_app("train_vit", std::string("--randaug=") + bad + " --dry-run", tmp / "log") == 2);
        CHECK(slurp(tmp / "log").find("--randaug") != std::string::npos);
    }
    CHECK(run_app("train_vit", "--randaug 1 --dry-run", tmp / "log") == 0);
    CHECK(run_app("train_vit", "--model convmixer-256-8 --pos learned --dry-run", tmp / "log") == 0);
    CHECK(slurp(tmp / "log").find("note: --pos changes nothing here (--model convmixer-256-8)") != std::string::npos);
    // The warmup the run uses is the one its config.json records.
    CHECK(run_app("train_vit", "--epochs 5 --dry-run", tmp / "log") == 0);
    CHECK(slurp(tmp / "log").find("\"--warmup-epochs\": \"0\"") != std::string::npos);
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
        // Every evaluation of an attention model says how alike the tokens leave its last block.
        int evals = 0;
        for (auto& j : metrics_lines(tmp / ("run_" + model + "/metrics.jsonl"))) {
            if (j["kind"] != "eval") continue;
            evals++;
            if (model == "lstm") {
                CHECK(!j.contains("tok_cos"));
                continue;
            }
            REQUIRE(j.contains("tok_cos"));
            // −1/(T−1), T = 16: a bound every mean of pairwise cosines meets (is the figure one?).
            CHECK(j["tok_cos"].get<double>() > -1.0 / 15);
            CHECK(j["tok_cos"].get<double>() < 0.99);        // a model that learned has not collapsed
        }
        CHECK(evals == 8);
        CHECK((slurp(tmp / "log").find("last block tok_cos") != std::string::npos) == (model != "lstm"));
    }
}

namespace {

// A small word corpus with some variety, so the losses keep moving for a few epochs: sentences
// "subject verb object" in a fixed pseudo-random mix; valid and test use the same words.
void write_tiny_text(const std::string& dir, int train_lines) {
    const char* subjects[] = {"the cat", "a dog", "the bird", "my friend", "the old man"};
    const char* verbs[] = {"sat on", "ran to", "looked at", "sang to"};
    const char* objects[] = {"the mat", "the park", "a tree", "the house", "the river"};
    auto lines = [&](int n, int offset) {
        std::string text;
        for (int i = offset; i < offset + n; i++)
            text += std::string(subjects[i % 5]) + " " + verbs[(i * 3 + i / 5) % 4] + " " + objects[(i * 7 + i / 4) % 5] + "\n";
        return text;
    };
    test::write_file(dir + "/train.txt", lines(train_lines, 0));
    test::write_file(dir + "/valid.txt", lines(40, 1000));
    test::write_file(dir + "/test.txt", lines(40, 2000));
}

// Writes a 100-line corpus into `dir` and returns the train_lm flags of a tiny untied transformer
// (16 wide unless `dim` says otherwise) trained on it, one epoch on one thread, for the flag tests.
std::string tiny_lm_flags(const std::string& dir, int dim = 16) {
    write_tiny_text(dir, 100);
    return "--dataset text --data-dir " + dir + " --model transformer --dim " + std::to_string(dim) +
           " --depth 2 --heads 2 --untied --seq-len 8 --batch-size 4 --epochs 1 --threads 1";
}

// The evaluation lines, without their wall-clock field (elapsed_s differs from run to run).
std::vector<nlohmann::json> eval_lines(const std::string& metrics) {
    std::vector<nlohmann::json> out;
    for (auto& j : metrics_lines(metrics))
        if (j["kind"] == "eval") {
            j.erase("elapsed_s");
            out.push_back(j);
        }
    return out;
}

// Runs train_lm with `args` (3 epochs) twice: whole, and stopped by SIGTERM a few steps into
// its second epoch, then resumed. The final parameters and optimizer state, every evaluation
// (the interrupted epoch's train loss included) and the result must be identical. With
// `auto_resume` the second run is started and resumed by the same command, --auto-resume, and a
// third start of it finds the run finished.
void check_lm_resume(const std::string& args, bool carries_state, bool auto_resume = false) {
    test::TempDir tmp;
    write_tiny_text(tmp / "text", 300);
    std::string base = "--dataset text --data-dir " + (tmp / "text") +
                       " --epochs 3 --seq-len 16 --batch-size 4 --threads 1 --log-every 1 " + args;
    REQUIRE(run_app("train_lm", base + " --out " + (tmp / "whole"), tmp / "log1") == 0);
    auto whole_evals = eval_lines(tmp / "whole/metrics.jsonl");
    REQUIRE(whole_evals.size() == 3);
    int64_t steps_per_epoch = whole_evals[0]["step"];

    int64_t resumed_at = -1;  // the step the parts' checkpoint holds
    auto in_second_epoch = [&] {
        auto lines = metrics_lines(tmp / "parts/metrics.jsonl");
        auto eval = std::find_if(lines.begin(), lines.end(), [](const nlohmann::json& j) { return j["kind"] == "eval"; });
        return eval != lines.end() && lines.end() - eval > 3;
    };
    const std::string parts = base + " --out " + (tmp / "parts") + (auto_resume ? " --auto-resume" : "");
    Stopped stop = run_app_until("train_lm", parts, tmp / "log2", in_second_epoch);
    INFO(slurp(tmp / "log2"));
    if (stopped_by_sigterm(stop)) {
        std::map<std::string, std::string> meta;
        engine::load_safetensors(tmp / "parts/last.safetensors", &meta);
        int64_t batch = std::stoll(meta.at("batch_in_epoch"));
        INFO("stopped in epoch " << std::stoi(meta.at("epoch")) + 1 << " after batch " << batch << " of "
                                 << steps_per_epoch);
        CHECK(batch > 0);
        CHECK(batch < steps_per_epoch);  // truly mid-epoch, not at its end
        CHECK(meta.at("carried_state") == (carries_state ? "1" : "0"));
        CHECK(fs::exists(tmp / "parts/last.carry.safetensors") == carries_state);
        // The clock goes on across the parts: as if the first part had trained 1000 s.
        resumed_at = std::stoll(meta.at("step"));
        meta["elapsed_s"] = "1000";
        auto weights = engine::load_safetensors(tmp / "parts/last.safetensors");
        engine::save_safetensors(tmp / "parts/last.safetensors", {weights.begin(), weights.end()}, meta);
        // As if killed some steps after that checkpoint: a line the resumed run writes again, and
        // half of the next one.
        {
            std::ofstream m(tmp / "parts/metrics.jsonl", std::ios::app);
            m << nlohmann::json{{"kind", "train"}, {"step", std::stoll(meta.at("step")) + 1}, {"loss", 0.5}}.dump()
              << "\n{\"kind\": \"tra";
        }
        if (carries_state) {
            // A carry file without a layer's state is refused, naming it, and changes nothing.
            const std::string carry_file = tmp / "parts/last.carry.safetensors";
            std::map<std::string, std::string> carry_meta;
            auto carry = engine::load_safetensors(carry_file, &carry_meta);
            auto short_carry = carry;
            short_carry.erase("c.1");
            engine::save_safetensors(carry_file, {short_carry.begin(), short_carry.end()}, carry_meta);
            REQUIRE(run_app("train_lm", auto_resume ? parts : parts + " --resume", tmp / "log5") == 1);
            CHECK(slurp(tmp / "log5").find("--resume: " + carry_file + ": it holds 3 tensors, not h.i and c.i of 2 "
                                           "layers") != std::string::npos);
            engine::save_safetensors(carry_file, {carry.begin(), carry.end()}, carry_meta);
        }
        REQUIRE(run_app("train_lm", auto_resume ? parts : parts + " --resume", tmp / "log3") == 0);
        CHECK(slurp(tmp / "log3").find("resumed from") != std::string::npos);
        CHECK(slurp(tmp / "log3").find("removed 1 line(s)") != std::string::npos);
        CHECK(slurp(tmp / "log3").find("and 1 unreadable") != std::string::npos);
    }
    if (auto_resume) {
        const std::string metrics = slurp(tmp / "parts/metrics.jsonl");
        REQUIRE(run_app("train_lm", parts, tmp / "log4") == 0);
        CHECK(slurp(tmp / "log4").find("has finished (result.json): nothing to do") != std::string::npos);
        CHECK(slurp(tmp / "parts/metrics.jsonl") == metrics);
    }
    check_same_tensors(tmp / "whole/last.safetensors", tmp / "parts/last.safetensors");
    check_same_tensors(tmp / "whole/last.optim.safetensors", tmp / "parts/last.optim.safetensors");
    CHECK(eval_lines(tmp / "parts/metrics.jsonl") == whole_evals);
    // Every training line once, as the uninterrupted run wrote it (the clock's fields aside).
    auto steps_and_losses = [](const std::string& path) {
        std::vector<std::pair<int64_t, double>> out;
        std::ifstream m(path);
        for (std::string l; std::getline(m, l);) {
            auto j = nlohmann::json::parse(l);  // every line must parse
            if (j["kind"] == "train") out.push_back({j["step"], j["loss"]});
        }
        return out;
    };
    CHECK(steps_and_losses(tmp / "parts/metrics.jsonl") == steps_and_losses(tmp / "whole/metrics.jsonl"));
    // The resumed part's clock starts where the checkpoint's left it (elapsed_s restarted at 0).
    for (auto& j : metrics_lines(tmp / "parts/metrics.jsonl"))
        if (resumed_at >= 0 && j.contains("elapsed_s"))
            CHECK((j["elapsed_s"].get<double>() >= 1000) == (j["step"].get<int64_t>() > resumed_at));
    auto result_a = nlohmann::json::parse(slurp(tmp / "whole/result.json"));
    auto result_b = nlohmann::json::parse(slurp(tmp / "parts/result.json"));
    CHECK(result_a["test_ppl"] == result_b["test_ppl"]);
    CHECK(result_a["steps"] == result_b["steps"]);
}

}  // namespace

TEST_CASE("train_lm: transformer interrupted mid-epoch and resumed equals uninterrupted bit for bit", "[apps]") {
    // Dropout on, warmup + cosine: the dropout generator and the schedule's position must resume.
    check_lm_resume("--model transformer --dim 32 --depth 2 --heads 2 --dropout 0.1 --lr 3e-3 --warmup-steps 10",
                    false);
}

TEST_CASE("train_lm --freeze-until: interrupted after the unfreezing and resumed equals uninterrupted", "[apps]") {
    // The parameters that joined at step 3 have taken 3 fewer updates than the others: their own
    // counts (Adam's bias corrections) must come back from the checkpoint.
    // Started and resumed by one command, --auto-resume, as a script of runs started again would.
    check_lm_resume("--model transformer --dim 32 --depth 2 --heads 2 --train-only 'blocks.1.*' --freeze-until 3", false,
                    true);
}

TEST_CASE("train_lm: LSTM (bptt) interrupted mid-epoch and resumed equals uninterrupted bit for bit", "[apps]") {
    // The hidden state carried between BPTT batches is saved with the checkpoint (last.carry.*);
    // the plateau scheduler's best and patience count too.
    check_lm_resume("--model lstm --dim 32 --depth 2 --dropout 0.2 --protocol bptt --opt sgd --lr 1 --schedule plateau",
                    true);
}

// --eval-init in train_lm: the whole validation split before the first step (with tok_cos), the
// score a run that cannot move its weights ends its epoch with; training as without the flag.
TEST_CASE("train_lm --eval-init: the init's validation score, training unchanged", "[apps]") {
    test::TempDir tmp;
    write_tiny_text(tmp / "text", 100);
    std::string base = "--dataset text --data-dir " + (tmp / "text") +
                       " --model transformer --dim 32 --depth 2 --heads 2 --seq-len 16 --batch-size 4 --epochs 1 --threads 1";
    REQUIRE(run_app("train_lm", base + " --eval-init --out " + (tmp / "with"), tmp / "log") == 0);
    INFO(slurp(tmp / "log"));
    CHECK(slurp(tmp / "log").find("init: valid ppl ") != std::string::npos);
    REQUIRE(run_app("train_lm", base + " --out " + (tmp / "without"), tmp / "log2") == 0);
    check_same_tensors(tmp / "with/last.safetensors", tmp / "without/last.safetensors");
    auto evals = eval_lines(tmp / "with/metrics.jsonl");
    REQUIRE(evals.size() == 2);
    CHECK(evals[0]["step"] == 0);
    CHECK(evals[0]["epoch"] == 0);
    CHECK(evals[0].contains("tok_cos"));
    CHECK(evals[1] == eval_lines(tmp / "without/metrics.jsonl").at(0));
    auto result = [&](const std::string& run) { return nlohmann::json::parse(slurp(tmp / (run + "/result.json"))); };
    CHECK(result("with")["init_eval"] ==
          nlohmann::json{{"valid_ppl", evals[0]["valid_ppl"]}, {"valid_loss", evals[0]["valid_loss"]}});
    CHECK(!result("without").contains("init_eval"));
    REQUIRE(run_app("train_lm", base + " --lr 1e-30 --min-lr 0 --eval-init --out " + (tmp / "still"), tmp / "log3") == 0);
    auto still = eval_lines(tmp / "still/metrics.jsonl");
    REQUIRE(still.size() == 2);
    CHECK(still[0] == evals[0]);  // the same seed: the same init
    CHECK(still[1]["valid_loss"].get<double>() == Approx(still[0]["valid_loss"].get<double>()).epsilon(1e-6));
}

TEST_CASE("train_lm: --train-tokens trains on the first N tokens of the training split", "[apps]") {
    test::TempDir tmp;
    write_tiny_text(tmp / "text", 300);
    // A word only at the end of the training split, and in valid: the vocabulary must still come
    // from the whole split (a text corpus without <unk> refuses unknown words).
    for (const char* split : {"train", "valid"}) {
        std::ofstream f(tmp / ("text/" + std::string(split) + ".txt"), std::ios::app);
        f << "a zebra sat on the mat\n";
    }
    std::string base = "--dataset text --data-dir " + (tmp / "text") +
                       " --dim 16 --depth 1 --heads 2 --seq-len 8 --batch-size 4 --epochs 1 --threads 1";
    REQUIRE(run_app("train_lm", base + " --train-tokens 200 --out " + (tmp / "slice"), tmp / "log") == 0);
    std::string log = slurp(tmp / "log");
    INFO(log);
    CHECK(log.find(": 200 / ") != std::string::npos);
    CHECK(log.find("(the first of ") != std::string::npos);
    CHECK(slurp(tmp / "slice/vocab.txt").find("zebra") != std::string::npos);
    auto result = nlohmann::json::parse(slurp(tmp / "slice/result.json"));
    CHECK(result["train_tokens"] == 200);
    // 4 rows of 50 tokens: 49 input columns, 8 a batch -> 7 steps (the whole split gives many more).
    CHECK(result["steps"] == 7);
    // More than the split: all of it.
    REQUIRE(run_app("train_lm", base + " --train-tokens 1000000 --out " + (tmp / "all"), tmp / "log") == 0);
    auto all = nlohmann::json::parse(slurp(tmp / "all/result.json"));
    CHECK(all["train_tokens"].get<int64_t>() > 1000);
    CHECK(all["steps"].get<int64_t>() > 7);
}

// A checkpoint of another version, or edited by hand: --resume names the file and the key.
TEST_CASE("train_lm --resume: a checkpoint's missing or malformed metadata is an error naming file and key",
          "[apps]") {
    test::TempDir tmp;
    std::string args = tiny_lm_flags(tmp / "text") + " --out " + (tmp / "run");
    REQUIRE(run_app("train_lm", args, tmp / "log") == 0);
    // Rewrites `file` of the run with its metadata changed by `edit`.
    auto edit_meta = [&](const std::string& file, const std::function<void(std::map<std::string, std::string>&)>& edit) {
        std::map<std::string, std::string> meta;
        auto tensors = engine::load_safetensors(tmp / ("run/" + file), &meta);
        edit(meta);
        engine::save_safetensors(tmp / ("run/" + file), {tensors.begin(), tensors.end()}, meta);
    };
    struct Case { std::string file, key, value, says; };
    for (const Case& c : {Case{"last.safetensors", "rng_offset", "", "has no 'rng_offset'"},
                          Case{"last.safetensors", "step", "12x", "metadata 'step' is '12x', not an integer"},
                          Case{"last.optim.safetensors", "lr", "fast", "metadata 'lr' is 'fast', not a number"},
                          Case{"last.optim.safetensors", "steps", "-1", "\"steps\" is -1, not a step count"},
                          Case{"last.optim.safetensors", "param_steps.tok_emb.weight", "99",
                               "tok_emb.weight has taken 99 updates in "}}) {
        INFO(c.file << " " << c.key);
        std::map<std::string, std::string> saved;
        engine::load_safetensors(tmp / ("run/" + c.file), &saved);
        edit_meta(c.file, [&](auto& meta) {
            if (c.value.empty()) meta.erase(c.key);
            else meta[c.key] = c.value;
        });
        REQUIRE(run_app("train_lm", args + " --resume", tmp / "log") == 1);
        std::string log = slurp(tmp / "log");
        INFO(log);
        CHECK(log.find(c.file) != std::string::npos);
        CHECK(log.find(c.says) != std::string::npos);
        edit_meta(c.file, [&](auto& meta) { meta = saved; });
    }
    REQUIRE(run_app("train_lm", args + " --resume", tmp / "log") == 0);  // as saved: it resumes
    // Another training file with the same words in another order: the same size of vocabulary,
    // other ids. The checkpoint's embedding rows would silently mean other words.
    std::string train = slurp(tmp / "text/train.txt"), vocab = slurp(tmp / "run/vocab.txt");
    test::write_file(tmp / "text/train.txt", "the old man looked at a tree\n" + train);
    REQUIRE(run_app("train_lm", args + " --resume", tmp / "log") == 1);
    CHECK(slurp(tmp / "log").find("gives another vocabulary than the run's " + (tmp / "run/vocab.txt")) !=
          std::string::npos);
    CHECK(slurp(tmp / "run/vocab.txt") == vocab);  // the refusal replaced nothing
    // --init-from the run's checkpoint onto that data: refused the same way (vocab.txt beside it).
    std::string from = tiny_lm_flags(tmp / "text2") + " --init-from " + (tmp / "run/last.safetensors") + " --out ";
    fs::remove(tmp / "text2/train.txt");
    fs::copy_file(tmp / "text/train.txt", tmp / "text2/train.txt");
    REQUIRE(run_app("train_lm", from + (tmp / "from"), tmp / "log") == 1);
    CHECK(slurp(tmp / "log").find("--init-from: the training split in " + (tmp / "text2")) != std::string::npos);
    test::write_file(tmp / "text2/train.txt", train);  // the run's own data: it loads
    REQUIRE(run_app("train_lm", from + (tmp / "from2"), tmp / "log") == 0);
}

TEST_CASE("train_lm --dataset ptb: files of another size than the published ones get a note", "[apps]") {
    test::TempDir tmp;
    write_tiny_text(tmp / "text", 100);
    for (const char* split : {"train", "valid", "test"})
        test::write_file(tmp / fmt::format("ptb/ptb.{}.txt", split), slurp(tmp / fmt::format("text/{}.txt", split)));
    REQUIRE(run_app("train_lm", "--dataset ptb --data-dir " + (tmp / "ptb") +
                                    " --dim 16 --depth 1 --heads 2 --seq-len 8 --batch-size 4 --epochs 1 --max-steps 1 "
                                    "--threads 1", tmp / "log") == 0);
    std::string log = slurp(tmp / "log");
    INFO(log);
    CHECK(log.find("ptb: note: " + (tmp / "ptb/ptb.train.txt")) != std::string::npos);
    CHECK(log.find("the published ones 929589 / 73760 / 82430") != std::string::npos);
}

TEST_CASE("train_lm --init-samples: data-dependent inits see N rows cut over the split, not the first batch",
          "[apps]") {
    test::TempDir tmp;
    write_tiny_text(tmp / "text", 300);
    std::string base = "--dataset text --data-dir " + (tmp / "text") +
                       " --dim 16 --depth 1 --heads 2 --seq-len 8 --batch-size 4 --epochs 1 --max-steps 1 --threads 1 "
                       "--init lsuv";
    REQUIRE(run_app("train_lm", base + " --out " + (tmp / "batch"), tmp / "log") == 0);
    CHECK(slurp(tmp / "log").find("on 4 samples") != std::string::npos);
    CHECK(slurp(tmp / "log").find("init set: 4 rows of 8 tokens (the first training batch)") != std::string::npos);
    REQUIRE(run_app("train_lm", base + " --init-samples 16 --out " + (tmp / "rows16"), tmp / "log") == 0);
    std::string log = slurp(tmp / "log");
    INFO(log);
    CHECK(log.find("on 16 samples") != std::string::npos);
    // The same orthonormal draws (same seed), scaled on other rows: the init differs.
    CHECK(slurp(tmp / "batch/init.safetensors") != slurp(tmp / "rows16/init.safetensors"));
    // More rows than the split has tokens: refused, naming the flag.
    REQUIRE(run_app("train_lm", base + " --init-samples 100000 --out " + (tmp / "too-many"), tmp / "log") == 1);
    CHECK(slurp(tmp / "log").find("--init-samples 100000") != std::string::npos);
    // Rows whose logits would take gigabytes: refused before any is cut.
    REQUIRE(run_app("train_lm", base + " --init-samples 10000000 --out " + (tmp / "huge"), tmp / "log") == 1);
    CHECK(slurp(tmp / "log").find("GB of logits") != std::string::npos);
}

// Repeating a command must neither mix two runs in one folder nor replace a finished run by accident.
TEST_CASE("a new run refuses an --out that holds a run; --overwrite replaces that run's files only", "[apps]") {
    test::TempDir tmp;
    std::string base = tiny_lm_flags(tmp / "text") + " --max-steps 3 --log-every 1 --out " + (tmp / "run");
    REQUIRE(run_app("train_lm", base, tmp / "log") == 0);
    const std::string metrics = slurp(tmp / "run/metrics.jsonl");
    const size_t lines = metrics_lines(tmp / "run/metrics.jsonl").size();
    test::write_file(tmp / "run/notes.txt", "mine");

    CHECK(run_app("train_lm", base + " --seed 1", tmp / "log") == 2);
    CHECK(slurp(tmp / "log").find("already holds a run (config.json): --resume continues it, --overwrite replaces it") !=
          std::string::npos);
    CHECK(slurp(tmp / "run/metrics.jsonl") == metrics);
    CHECK(run_app("train_lm", base + " --seed 1 --dry-run", tmp / "log") == 2);  // a dry run says so too
    CHECK(run_app("train_vit", "--out " + (tmp / "run") + " --dry-run", tmp / "log") == 2);
    CHECK(run_app("train_vit", "--out " + (tmp / "run") + " --auto-resume --dry-run", tmp / "log") == 2);
    CHECK(slurp(tmp / "log").find("is not a train_vit run's config") != std::string::npos);
    CHECK(run_app("train_lm", base + " --resume --overwrite", tmp / "log") == 2);
    CHECK(slurp(tmp / "log").find("give one") != std::string::npos);

    REQUIRE(run_app("train_lm", base + " --seed 1 --overwrite", tmp / "log") == 0);
    CHECK(metrics_lines(tmp / "run/metrics.jsonl").size() == lines);  // the second run's lines only
    CHECK(slurp(tmp / "run/metrics.jsonl") != metrics);
    CHECK(nlohmann::json::parse(slurp(tmp / "run/config.json"))["--seed"] == "1");
    CHECK(slurp(tmp / "run/notes.txt") == "mine");
    // --resume of the replaced run goes on as before.
    CHECK(run_app("train_lm", base + " --seed 1 --resume", tmp / "log") == 0);
}

// A plain --resume checks the run's flags as --auto-resume does (a changed --lr would have gone on
// with the run's optimizer state and rewritten its record), and the run's config.json stays its
// own, with each resumed part noted in its "resumed" list; numbers compare by value.
TEST_CASE("train_lm --resume: refuses other flags, keeps the run's config.json and notes the part", "[apps]") {
    test::TempDir tmp;
    std::string base = tiny_lm_flags(tmp / "text") + " --max-steps 3 --out " + (tmp / "run");
    REQUIRE(run_app("train_lm", base, tmp / "log") == 0);
    const std::string config = slurp(tmp / "run/config.json");
    CHECK(run_app("train_lm", base + " --resume --lr 0.5", tmp / "log") == 2);
    CHECK(slurp(tmp / "log").find("holds a run with other flags: --lr") != std::string::npos);
    CHECK(slurp(tmp / "log").find("--init-from " + (tmp / "run/last.safetensors")) != std::string::npos);
    CHECK(slurp(tmp / "run/config.json") == config);

    std::string other_machine = base;
    other_machine.replace(other_machine.find("--threads 1"), 11, "--threads 2");
    REQUIRE(run_app("train_lm", other_machine + " --resume --weight-decay 1e-2", tmp / "log") == 0);
    auto before = nlohmann::json::parse(config), after = nlohmann::json::parse(slurp(tmp / "run/config.json"));
    CHECK(after["started"] == before["started"]);
    CHECK(after["--weight-decay"] == before["--weight-decay"]);
    CHECK(after["--threads"] == "1");
    REQUIRE(after["resumed"].size() == 1);
    CHECK(after["resumed"][0]["threads"] == 2);
    CHECK(after["resumed"][0]["--threads"] == "2");
    CHECK(after["resumed"][0].contains("started"));
}

// --auto-resume's other cases (an interrupted run is check_lm_resume's): a finished run is left
// alone, a run of other flags refused, a run that stopped before its first checkpoint started again.
TEST_CASE("train_lm --auto-resume: starts, skips a finished run, refuses other flags, restarts a run without checkpoint",
          "[apps]") {
    test::TempDir tmp;
    std::string base = tiny_lm_flags(tmp / "text") + " --max-steps 3 --log-every 1 --auto-resume --out ";
    REQUIRE(run_app("train_lm", base + (tmp / "run"), tmp / "log") == 0);
    CHECK(slurp(tmp / "log").find("no run in " + (tmp / "run") + " yet: starting it") != std::string::npos);
    const std::string metrics = slurp(tmp / "run/metrics.jsonl");
    const size_t lines = metrics_lines(tmp / "run/metrics.jsonl").size();
    REQUIRE(lines > 0);

    // Machine flags may differ; the result is what it was.
    std::string other_machine = base;
    other_machine.replace(other_machine.find("--threads 1"), 11, "--threads 2");
    REQUIRE(run_app("train_lm", other_machine + (tmp / "run") + " --no-nan-check", tmp / "log") == 0);
    CHECK(slurp(tmp / "log").find("has finished") != std::string::npos);
    CHECK(slurp(tmp / "run/metrics.jsonl") == metrics);
    // Anything else may not: the run would be skipped as done, or continued with new settings.
    CHECK(run_app("train_lm", base + (tmp / "run") + " --lr 0.5", tmp / "log") == 2);
    CHECK(slurp(tmp / "log").find("holds a run with other flags: --lr") != std::string::npos);
    CHECK(run_app("train_lm", base + (tmp / "run") + " --resume", tmp / "log") == 2);  // one of the three
    CHECK(run_app("train_lm", "--auto-resume", tmp / "log") == 2);                      // needs --out
    // A config.json that is not this app's run: not JSON, JSON but not a config, another app's.
    fs::create_directories(tmp / "odd");
    for (const char* text : {"{not json", "{}", "[]", "{\"app\": \"train_vit\"}"}) {
        INFO(text);
        test::write_file(tmp / "odd/config.json", text);
        CHECK(run_app("train_lm", base + (tmp / "odd"), tmp / "log") == 2);
        CHECK(slurp(tmp / "log").find(tmp / "odd/config.json") != std::string::npos);
    }

    // config.json but no checkpoint (stopped at once): a new run in its place, its own lines only.
    fs::create_directories(tmp / "early");
    fs::copy_file(tmp / "run/config.json", tmp / "early/config.json");
    test::write_file(tmp / "early/metrics.jsonl", "{\"kind\":\"train\",\"step\":1}\n");
    REQUIRE(run_app("train_lm", base + (tmp / "early"), tmp / "log") == 0);
    CHECK(slurp(tmp / "log").find("stopped before its first checkpoint: starting it again") != std::string::npos);
    CHECK(metrics_lines(tmp / "early/metrics.jsonl").size() == lines);
    CHECK(fs::exists(tmp / "early/result.json"));
}

// The sinusoidal PE is a buffer, so it draws nothing from the seed: at scale 0 the run is the run
// without a position embedding, loss for loss; at scale 2 it is not.
TEST_CASE("train_lm --pe-scale: 0 repeats --pos none, 2 changes the run; so does --emb-scale 0.5", "[apps]") {
    test::TempDir tmp;
    std::string base = tiny_lm_flags(tmp / "text") + " --max-steps 5 --out ";
    REQUIRE(run_app("train_lm", base + (tmp / "none") + " --pos none", tmp / "log") == 0);
    REQUIRE(run_app("train_lm", base + (tmp / "zero") + " --pe-scale 0", tmp / "log") == 0);
    REQUIRE(run_app("train_lm", base + (tmp / "two") + " --pe-scale 2", tmp / "log") == 0);
    auto test_ppl = [&](const char* run) {
        return nlohmann::json::parse(slurp(tmp / (std::string(run) + "/result.json")))["test_ppl"].get<double>();
    };
    CHECK(test_ppl("zero") == test_ppl("none"));
    CHECK(test_ppl("two") != test_ppl("none"));
    CHECK(nlohmann::json::parse(slurp(tmp / "two/config.json"))["--pe-scale"] == "2");
    // The token embedding's scale reaches the run too.
    REQUIRE(run_app("train_lm", base + (tmp / "one"), tmp / "log") == 0);
    REQUIRE(run_app("train_lm", base + (tmp / "half") + " --emb-scale 0.5", tmp / "log") == 0);
    CHECK(test_ppl("half") != test_ppl("one"));
    CHECK(nlohmann::json::parse(slurp(tmp / "half/config.json"))["--emb-scale"] == "0.5");
}

TEST_CASE("train_lm --head-bias: the output layer gets a bias, saved, and inspect_init loads it", "[apps]") {
    test::TempDir tmp;
    REQUIRE(run_app("train_lm", tiny_lm_flags(tmp / "text") + " --head-bias --out " + (tmp / "run"), tmp / "log") == 0);
    auto tensors = engine::load_safetensors(tmp / "run/last.safetensors");
    REQUIRE(tensors.count("head.bias") == 1);
    CHECK(tensors.at("head.bias").numel() == tensors.at("head.weight").size(0));  // one per word
    std::string inspect = "apps/inspect_init --model lm-small --dataset text --data-dir " + (tmp / "text") +
                          " --dim 16 --depth 2 --heads 2 --untied --seq-len 8 --batch 2 --checkpoint " +
                          (tmp / "run/last.safetensors");
    CHECK(std::system((inspect + " --head-bias > " + (tmp / "out") + " 2>&1").c_str()) == 0);
    CHECK(std::system((inspect + " > " + (tmp / "out") + " 2>&1").c_str()) != 0);  // no bias in that model
    CHECK(slurp(tmp / "out").find("head.bias") != std::string::npos);
}

// --train-only and --freeze (apps/common/freeze.h). Three runs from the same init: one trains only
// the value layers, one all but them, and one only a single LayerNorm bias, which leaves every other
// tensor at its init, so the other two can be compared against it tensor by tensor.
TEST_CASE("train_lm --train-only / --freeze: frozen parameters keep their init, trained ones move", "[apps]") {
    test::TempDir tmp;
    std::string base = tiny_lm_flags(tmp / "text") + " --max-steps 3 --out ";
    REQUIRE(run_app("train_lm", base + (tmp / "v") + " --train-only 'blocks.*.attn.v.*'", tmp / "log") == 0);
    CHECK(slurp(tmp / "log").find("train_lm: training 4 of ") != std::string::npos);  // 2 blocks × (weight, bias)
    REQUIRE(run_app("train_lm", base + (tmp / "not-v") + " --freeze 'blocks.*.attn.v.*'", tmp / "log") == 0);
    REQUIRE(run_app("train_lm", base + (tmp / "one") + " --train-only blocks.0.norm1.bias", tmp / "log") == 0);
    auto v = engine::load_safetensors(tmp / "v/last.safetensors");
    auto not_v = engine::load_safetensors(tmp / "not-v/last.safetensors");
    auto init = engine::load_safetensors(tmp / "one/last.safetensors");
    int checked = 0;
    for (const auto& [name, t] : init) {
        if (name == "pos_embed" || name == "blocks.0.norm1.bias") continue;  // a buffer; the one trained alone
        bool is_v = name.find(".attn.v.") != std::string::npos;
        INFO(name);
        CHECK(same(v.at(name), t) == !is_v);
        CHECK(same(not_v.at(name), t) == is_v);
        checked++;
    }
    CHECK(checked > 20);
    CHECK(!same(init.at("blocks.0.norm1.bias"), v.at("blocks.0.norm1.bias")));  // trained alone, it moved
    // A pattern that matches nothing is a typo, and is named.
    CHECK(run_app("train_lm", base + (tmp / "typo") + " --freeze 'blocks.*.atn.*'", tmp / "log") != 0);
    CHECK(slurp(tmp / "log").find("--freeze: 'blocks.*.atn.*' matches no parameter") != std::string::npos);
}

// The last update of epoch 1 makes the weights infinite; the epoch's training loss was finite, the
// validation loss is not: the run stops there, and writes neither best nor last.
TEST_CASE("train_lm: a validation loss that is not finite stops the run before its checkpoint", "[apps]") {
    test::TempDir tmp;
    std::string args = tiny_lm_flags(tmp / "text") + " --max-steps 1 --opt sgd --lr 1e38 --clip-grad 0 --out " +
                       (tmp / "run");
    args.replace(args.find("--epochs 1"), 10, "--epochs 2");
    int rc = run_app("train_lm", args, tmp / "log");
    std::string log = slurp(tmp / "log");
    INFO(log);
    CHECK(rc == 1);
    CHECK(log.find("train_lm: valid loss is ") != std::string::npos);  // (nan or -nan)
    CHECK(log.find("nan at epoch 1, step 1; stopping. Last good checkpoint: (none written yet)") != std::string::npos);
    CHECK_FALSE(fs::exists(tmp / "run/last.safetensors"));
    CHECK_FALSE(fs::exists(tmp / "run/best.safetensors"));
    CHECK_FALSE(fs::exists(tmp / "run/result.json"));
}

// An evaluation split too short for the flags is refused before training, naming its file (not
// after an epoch, losing it); so is a --eval-tokens prefix too short for them.
TEST_CASE("train_lm: a validation or test split too short to evaluate is refused before training", "[apps]") {
    test::TempDir tmp;
    std::string base = tiny_lm_flags(tmp / "text") + " --out " + (tmp / "run");
    test::write_file(tmp / "text/valid.txt", "the cat\n");
    CHECK(run_app("train_lm", base, tmp / "log") != 0);
    CHECK(slurp(tmp / "log").find("the validation split " + (tmp / "text/valid.txt") + " (3 tokens) cannot be evaluated "
                                  "with --protocol bptt --seq-len 8 in 4 rows") != std::string::npos);
    CHECK(!fs::exists(tmp / "run/config.json"));
    write_tiny_text(tmp / "text", 100);
    test::write_file(tmp / "text/test.txt", "a dog\n");
    CHECK(run_app("train_lm", base, tmp / "log") != 0);
    CHECK(slurp(tmp / "log").find("the test split " + (tmp / "text/test.txt")) != std::string::npos);
    write_tiny_text(tmp / "text", 100);
    CHECK(run_app("train_lm", base + " --eval-every 1 --eval-tokens 5", tmp / "log") != 0);
    CHECK(slurp(tmp / "log").find("--eval-tokens 5: the validation prefix (5 tokens) cannot be evaluated") !=
          std::string::npos);
}

// --lr-scale (apps/common/lr_scale.h): every parameter at lr × 2 is the run at twice the lr (the
// schedule's floor at 0, which the factor does not scale), to the bit; one tensor at another
// factor moves differently and alone.
TEST_CASE("train_lm --lr-scale: '*=2' equals twice the lr; a factor on one tensor changes that tensor's path", "[apps]") {
    test::TempDir tmp;
    std::string base = tiny_lm_flags(tmp / "text") + " --max-steps 3 --min-lr 0 --out ";
    REQUIRE(run_app("train_lm", base + (tmp / "double") + " --lr 2e-3", tmp / "log") == 0);
    REQUIRE(run_app("train_lm", base + (tmp / "scaled") + " --lr 1e-3 --lr-scale '*=2'", tmp / "log") == 0);
    CHECK(slurp(tmp / "log").find("train_lm: --lr-scale: ") != std::string::npos);
    REQUIRE(run_app("train_lm", base + (tmp / "fc1") + " --lr 2e-3 --lr-scale 'blocks.0.mlp.fc1.weight=0.5'",
                    tmp / "log") == 0);
    auto twice = engine::load_safetensors(tmp / "double/last.safetensors");
    auto scaled = engine::load_safetensors(tmp / "scaled/last.safetensors");
    auto fc1 = engine::load_safetensors(tmp / "fc1/last.safetensors");
    auto init = engine::load_safetensors(tmp / "double/init.safetensors");
    for (const auto& [name, t] : twice) {
        INFO(name);
        CHECK(same(scaled.at(name), t));
    }
    // The halved tensor moved from its init, and not as in the run where it had the full lr.
    CHECK(!same(fc1.at("blocks.0.mlp.fc1.weight"), init.at("blocks.0.mlp.fc1.weight")));
    CHECK(!same(fc1.at("blocks.0.mlp.fc1.weight"), twice.at("blocks.0.mlp.fc1.weight")));
    auto config = nlohmann::json::parse(slurp(tmp / "fc1/config.json"));
    CHECK(config.at("--lr-scale") == "blocks.0.mlp.fc1.weight=0.5");
    // A glob that matches nothing is refused before the run starts, naming it.
    CHECK(run_app("train_lm", base + (tmp / "typo") + " --lr-scale 'blocks.*.mlp.fc3.*=2'", tmp / "log") != 0);
    CHECK(slurp(tmp / "log").find("--lr-scale: 'blocks.*.mlp.fc3.*' matches no parameter") != std::string::npos);
    CHECK(!fs::exists(tmp / "typo/config.json"));
}

// --freeze-until: the frozen parameters join at that step, each with a first optimizer step of its
// own (the optimizer file records the update counts that differ from its step count).
TEST_CASE("train_lm --freeze-until: frozen parameters train from that step, with their own update counts", "[apps]") {
    test::TempDir tmp;
    std::string base = tiny_lm_flags(tmp / "text") + " --train-only 'blocks.1.*' --out ";
    REQUIRE(run_app("train_lm", base + (tmp / "staged") + " --max-steps 5 --freeze-until 2", tmp / "log") == 0);
    std::string log = slurp(tmp / "log");
    CHECK(log.find("the rest keep their values for the first 2 steps") != std::string::npos);
    CHECK(log.find("train_lm: step 3: --freeze-until 2: ") != std::string::npos);
    REQUIRE(run_app("train_lm", base + (tmp / "two") + " --max-steps 2", tmp / "log") == 0);
    std::map<std::string, std::string> meta;
    engine::load_safetensors(tmp / "staged/last.optim.safetensors", &meta);
    CHECK(meta.at("steps") == "5");
    CHECK(meta.at("param_steps.blocks.0.attn.q.weight") == "3");
    CHECK(meta.at("param_steps.tok_emb.weight") == "3");
    CHECK(meta.count("param_steps.blocks.1.attn.q.weight") == 0);  // trained at every step
    // The frozen part moved in steps 3-5: a run of the first two steps left it at its init.
    auto staged = engine::load_safetensors(tmp / "staged/last.safetensors");
    auto two = engine::load_safetensors(tmp / "two/last.safetensors");
    CHECK(!same(staged.at("blocks.0.attn.q.weight"), two.at("blocks.0.attn.q.weight")));
    CHECK(run_app("train_lm", "--dataset text --data-dir " + (tmp / "text") + " --max-steps 2 --freeze-until 1",
                  tmp / "log") != 0);
    CHECK(slurp(tmp / "log").find("--freeze-until 1: there is nothing to unfreeze") != std::string::npos);
}

// --init-from: a second run starts from the first run's weights (and trains only one LayerNorm bias
// here, so every other tensor must come out as the first run left it); a checkpoint of another
// model shape is refused, naming the flag.
TEST_CASE("train_lm --init-from: a run starts from another run's weights", "[apps]") {
    test::TempDir tmp;
    std::string base = tiny_lm_flags(tmp / "text") + " --max-steps 3";
    REQUIRE(run_app("train_lm", base + " --out " + (tmp / "first"), tmp / "log") == 0);
    REQUIRE(run_app("train_lm", base + " --seed 7 --train-only blocks.0.norm1.bias --init-from " +
                                    (tmp / "first/last.safetensors") + " --out " + (tmp / "second"),
                    tmp / "log") == 0);
    CHECK(slurp(tmp / "log").find("init: weights replaced by the checkpoint") != std::string::npos);
    auto first = engine::load_safetensors(tmp / "first/last.safetensors");
    auto second = engine::load_safetensors(tmp / "second/last.safetensors");
    int checked = 0;
    for (const auto& [name, t] : first) {
        INFO(name);
        CHECK(same(second.at(name), t) == (name != "blocks.0.norm1.bias"));
        checked++;
    }
    CHECK(checked > 20);
    CHECK(run_app("train_lm", tiny_lm_flags(tmp / "text", 32) + " --max-steps 3 --init-from " + (tmp / "first/last.safetensors"),
                  tmp / "log") != 0);
    CHECK(slurp(tmp / "log").find("--init-from " + (tmp / "first/last.safetensors")) != std::string::npos);
}

// RUN/init.safetensors holds the exact start: a run from it (--init-from, the same seed) repeats the
// run bit for bit. tools/edit_checkpoint.py edits it into another start, here an untied head that
// starts as a copy of the embedding, and names what it cannot do; tools/weight_change.py measures
// the distance between two checkpoints.
TEST_CASE("train_lm writes init.safetensors; tools/edit_checkpoint.py and weight_change.py", "[apps]") {
    test::TempDir tmp;
    std::string base = tiny_lm_flags(tmp / "text") + " --max-steps 3";
    REQUIRE(run_app("train_lm", base + " --out " + (tmp / "first"), tmp / "log") == 0);
    std::map<std::string, std::string> meta;
    auto init = engine::load_safetensors(tmp / "first/init.safetensors", &meta);
    CHECK(meta.at("init") == "torch");
    CHECK(meta.count("init_from") == 0);
    CHECK(!fs::exists(tmp / "first/init.optim.safetensors"));
    REQUIRE(run_app("train_lm", base + " --init-from " + (tmp / "first/init.safetensors") + " --out " + (tmp / "again"),
                    tmp / "log") == 0);
    check_same_tensors(tmp / "first/init.safetensors", tmp / "again/init.safetensors");
    engine::load_safetensors(tmp / "again/init.safetensors", &meta);
    CHECK(meta.at("init_from") == tmp / "first/init.safetensors");  // where the start came from
    check_same_tensors(tmp / "first/last.safetensors", tmp / "again/last.safetensors");
    CHECK(!same(init.at("blocks.0.attn.q.weight"),
                engine::load_safetensors(tmp / "first/last.safetensors").at("blocks.0.attn.q.weight")));

    std::string edit = "python3 tools/edit_checkpoint.py " + (tmp / "first/init.safetensors") + " " +
                       (tmp / "edited.safetensors");
    REQUIRE(std::system((edit + " --copy head.weight=tok_emb.weight --scale 'blocks.*.attn.q.weight=0.5'"
                                " --fill norm.weight=0 > " + (tmp / "log") + " 2>&1").c_str()) == 0);
    auto edited = engine::load_safetensors(tmp / "edited.safetensors", &meta);
    CHECK(meta.at("edits") == "--copy head.weight=tok_emb.weight; --scale blocks.*.attn.q.weight=0.5; --fill norm.weight=0");
    CHECK(same(edited.at("head.weight"), init.at("tok_emb.weight")));
    CHECK(!same(init.at("head.weight"), init.at("tok_emb.weight")));
    for (const char* q : {"blocks.0.attn.q.weight", "blocks.1.attn.q.weight"})
        for (int64_t i = 0; i < init.at(q).numel(); i++)
            REQUIRE(edited.at(q).data_f32()[i] == 0.5f * init.at(q).data_f32()[i]);
    const Tensor& gain = edited.at("norm.weight");
    CHECK(std::all_of(gain.data_f32(), gain.data_f32() + gain.numel(), [](float g) { return g == 0; }));
    CHECK(same(edited.at("blocks.0.attn.k.weight"), init.at("blocks.0.attn.k.weight")));
    // --copy DST=FILE:NAME takes a tensor of another checkpoint (here the edited one's halved q).
    REQUIRE(std::system(("python3 tools/edit_checkpoint.py " + (tmp / "first/init.safetensors") + " " +
                         (tmp / "other.safetensors") + " --copy blocks.1.attn.q.weight=" +
                         (tmp / "edited.safetensors") + ":blocks.0.attn.q.weight > " + (tmp / "log") + " 2>&1")
                            .c_str()) == 0);
    auto other = engine::load_safetensors(tmp / "other.safetensors");
    CHECK(same(other.at("blocks.1.attn.q.weight"), edited.at("blocks.0.attn.q.weight")));
    CHECK(same(other.at("blocks.0.attn.q.weight"), init.at("blocks.0.attn.q.weight")));
    // --take NAMES=FILE: every matching tensor takes FILE's of the same name (the halved q's here).
    std::string take = "python3 tools/edit_checkpoint.py " + (tmp / "first/init.safetensors") + " " +
                       (tmp / "taken.safetensors");
    REQUIRE(std::system((take + " --take 'blocks.*.attn.q.*=" + (tmp / "edited.safetensors") + "' > " + (tmp / "log") +
                         " 2>&1").c_str()) == 0);
    auto taken = engine::load_safetensors(tmp / "taken.safetensors");
    CHECK(same(taken.at("blocks.1.attn.q.weight"), edited.at("blocks.1.attn.q.weight")));
    CHECK(!same(taken.at("blocks.1.attn.q.weight"), init.at("blocks.1.attn.q.weight")));
    CHECK(same(taken.at("head.weight"), init.at("head.weight")));  // not matched: the input's
    CHECK(std::system((take + " --take 'blocks.*.atn.*=" + (tmp / "other.safetensors") + "' > " + (tmp / "log") +
                       " 2>&1").c_str()) != 0);
    CHECK(slurp(tmp / "log").find("blocks.*.atn.*: no tensor matches") != std::string::npos);
    CHECK(std::system((take + " --take 'head.*=" + (tmp / "missing.safetensors") + "' > " + (tmp / "log") +
                       " 2>&1").c_str()) != 0);
    CHECK(slurp(tmp / "log").find("--take head.*=" + (tmp / "missing.safetensors")) != std::string::npos);
    CHECK(std::system((edit + " --copy head.weight=" + (tmp / "edited.safetensors") + ":nope > " + (tmp / "log") +
                       " 2>&1").c_str()) != 0);
    CHECK(slurp(tmp / "log").find("no tensor " + (tmp / "edited.safetensors") + ":nope") != std::string::npos);
    REQUIRE(run_app("train_lm", base + " --init-from " + (tmp / "edited.safetensors") + " --out " + (tmp / "from-edit"),
                    tmp / "log") == 0);
    check_same_tensors(tmp / "edited.safetensors", tmp / "from-edit/init.safetensors");
    // tools/weight_change.py: the edit's relative changes, exactly (q halved 0.5, the gain zeroed 1),
    // and a run's table, a row per tensor.
    std::string change = "python3 tools/weight_change.py ";
    REQUIRE(std::system((change + "--pair " + (tmp / "first/init.safetensors") + " " + (tmp / "edited.safetensors") +
                         " > " + (tmp / "log") + " 2>&1").c_str()) == 0);
    for (const char* row : {"| blocks.0.attn.q.weight | 0.500 |", "| norm.weight | 1.000 |",
                            "| blocks.0.attn.k.weight | 0.000 |", "| norm.bias | 0.00e+00 (rms) |"})
        CHECK(slurp(tmp / "log").find(row) != std::string::npos);
    REQUIRE(std::system((change + (tmp / "first") + " > " + (tmp / "log") + " 2>&1").c_str()) == 0);
    CHECK(slurp(tmp / "log").find("| blocks.1.mlp.fc2.weight | ") != std::string::npos);
    CHECK(std::system((change + (tmp / "text") + " > " + (tmp / "log") + " 2>&1").c_str()) != 0);
    CHECK(slurp(tmp / "log").find("no init.safetensors") != std::string::npos);
    // Shapes that differ, a glob that matches nothing, a file that is not a checkpoint: refused, named.
    CHECK(std::system((edit + " --copy head.weight=norm.weight > " + (tmp / "log") + " 2>&1").c_str()) != 0);
    CHECK(slurp(tmp / "log").find("head.weight is F32 [") != std::string::npos);
    CHECK(std::system((edit + " --scale 'blocks.*.atn.q.weight=2' > " + (tmp / "log") + " 2>&1").c_str()) != 0);
    CHECK(slurp(tmp / "log").find("blocks.*.atn.q.weight: no tensor matches") != std::string::npos);
    std::ofstream(tmp / "text.safetensors") << "not a checkpoint";
    CHECK(std::system(("python3 tools/edit_checkpoint.py " + (tmp / "text.safetensors") + " --list > " + (tmp / "log") +
                       " 2>&1").c_str()) != 0);
    CHECK(slurp(tmp / "log").find("goes past the end of the file") != std::string::npos);
}

// apps/datainfo: what a data set holds, per split, and a clear error for a missing or cut file.
TEST_CASE("apps/datainfo: tokens and vocabulary of a text set, images per class, bad folders", "[apps]") {
    test::TempDir tmp;
    test::write_file(tmp / "ptb/ptb.train.txt", "a b c\nb c\n");
    test::write_file(tmp / "ptb/ptb.valid.txt", "a b\n");
    test::write_file(tmp / "ptb/ptb.test.txt", "c\n");
    REQUIRE(run_app("datainfo", "--dataset ptb --data-dir " + (tmp / "ptb"), tmp / "log") == 0);
    std::string text = slurp(tmp / "log");
    INFO(text);
    CHECK(std::regex_search(text, std::regex("train +7 tokens")));  // with an <eos> a line
    CHECK(std::regex_search(text, std::regex("valid +3 tokens")));
    CHECK(std::regex_search(text, std::regex("test +2 tokens")));
    CHECK(text.find("vocabulary 4 tokens (from train)") != std::string::npos);

    test::write_tiny_cifar10(tmp / "cifar", 2, 1);
    REQUIRE(run_app("datainfo", "--dataset cifar10 --data-dir " + (tmp / "cifar"), tmp / "log") == 0);
    std::string images = slurp(tmp / "log");
    INFO(images);
    CHECK(std::regex_search(images, std::regex("train: 100 images, 10 classes")));
    CHECK(std::regex_search(images, std::regex("test: 10 images, 10 classes")));
    CHECK(std::regex_search(images, std::regex("airplane +10\n")));

    CHECK(run_app("datainfo", "--dataset cifar10 --data-dir " + (tmp / "none"), tmp / "log") != 0);
    CHECK(slurp(tmp / "log").find("none does not exist") != std::string::npos);
    std::filesystem::resize_file(tmp / "cifar/data_batch_2.bin", 5000);  // not a whole number of records
    CHECK(run_app("datainfo", "--dataset cifar10 --data-dir " + (tmp / "cifar"), tmp / "log") != 0);
    CHECK(slurp(tmp / "log").find("data_batch_2.bin") != std::string::npos);
}

// tools/adam_eps_share.py on a hand-made optimizer checkpoint: √v̂ (v over 1 − β₂ᵗ) against the
// run's --adam-eps, the blocks' tensors of one role pooled, biases left out.
TEST_CASE("tools/adam_eps_share.py: the share of weight entries whose Adam steps ε sets", "[apps]") {
    test::TempDir tmp;
    const double correction = 1 - 0.999;  // at step 1
    // exp_avg_sq values whose √v̂ are the given multiples of ε = 1e-3
    auto sq = [&](std::vector<float> ratios, Shape shape) {
        for (float& r : ratios) r = (float)((r * 1e-3) * (r * 1e-3) * correction);
        return Tensor::from_vector(ratios, shape);
    };
    auto write_run = [&](const std::string& name, const std::string& config, const std::string& steps) {
        test::write_file(tmp / (name + "/config.json"), config);
        engine::save_safetensors(tmp / (name + "/last.optim.safetensors"),
                                 {{"blocks.0.attn.q.weight.exp_avg", Tensor::zeros({2, 2})},
                                  {"blocks.0.attn.q.weight.exp_avg_sq", sq({0.5f, 0.5f, 2.f, 4.f}, {2, 2})},
                                  {"blocks.1.attn.q.weight.exp_avg_sq", sq({0.1f, 0.2f}, {1, 2})},
                                  {"blocks.0.attn.q.bias.exp_avg_sq", sq({0.f, 0.f}, {2})}},
                                 {{"steps", steps}});
    };
    auto tool = [&](const std::string& args) {
        return std::system(("python3 tools/adam_eps_share.py " + args + " > " + (tmp / "out") + " 2>&1").c_str());
    };
    auto weights = [&] { return nlohmann::json::parse(slurp(tmp / "out"))["weights"]; };
    write_run("vit", "{\"app\": \"train_vit\", \"--adam-eps\": \"0.001\"}", "1");
    REQUIRE(tool((tmp / "vit") + " --json") == 0);
    INFO(slurp(tmp / "out"));
    auto pooled = weights();
    REQUIRE(pooled.size() == 1);  // one role; the bias is not counted
    CHECK(pooled["blocks.*.attn.q.weight"]["entries"] == 6);
    CHECK(pooled["blocks.*.attn.q.weight"]["below_eps"].get<double>() == Approx(4.0 / 6));
    CHECK(pooled["blocks.*.attn.q.weight"]["median_sqrt_v_over_eps"].get<double>() == Approx(0.5).epsilon(1e-4));
    REQUIRE(tool((tmp / "vit") + " --json --per-tensor") == 0);
    CHECK(weights()["blocks.0.attn.q.weight"]["below_eps"].get<double>() == Approx(0.5));
    CHECK(weights()["blocks.0.attn.q.weight"]["median_sqrt_v_over_eps"].get<double>() == Approx(1.25).epsilon(1e-4));
    CHECK(weights()["blocks.1.attn.q.weight"]["below_eps"].get<double>() == Approx(1.0));
    // --eps overrides the run's; a train_lm run (no --adam-eps flag) has PyTorch's 1e-8
    REQUIRE(tool((tmp / "vit") + " --json --eps 5e-5") == 0);
    CHECK(weights()["blocks.*.attn.q.weight"]["below_eps"].get<double>() == Approx(0.0));
    write_run("lm", "{\"app\": \"train_lm\"}", "1");
    REQUIRE(tool((tmp / "lm") + " --json") == 0);
    CHECK(nlohmann::json::parse(slurp(tmp / "out"))["eps"].get<double>() == Approx(1e-8));
    // a checkpoint before any step, and a run without one, are named
    write_run("fresh", "{\"app\": \"train_vit\", \"--adam-eps\": \"0.001\"}", "0");
    CHECK(tool(tmp / "fresh") != 0);
    CHECK(slurp(tmp / "out").find("before any Adam step") != std::string::npos);
    CHECK(tool(tmp / "none") != 0);
    CHECK(slurp(tmp / "out").find("none/config.json") != std::string::npos);
}

// tools/ptxas_table.py on a hand-made `nvcc -Xptxas -v` log: one row per kernel with its
// registers and the largest block they allow (65,536 registers a block, 256 a warp at a time: 40
// registers allow 1,024 threads, 100 allow 608, 238 allow 256), a device function marked, and
// status 1 naming the kernel when one spills.
TEST_CASE("tools/ptxas_table.py: registers, the largest block they allow, spills", "[apps]") {
    test::TempDir tmp;
    auto entry = [](const std::string& mangled, int registers, int spill) {
        return "ptxas info    : Compiling entry function '" + mangled + "' for 'sm_80'\n"
               "ptxas info    : Function properties for " + mangled + "\n"
               "    0 bytes stack frame, " + std::to_string(spill) + " bytes spill stores, " + std::to_string(spill) +
               " bytes spill loads\n"
               "ptxas info    : Used " + std::to_string(registers) + " registers, used 1 barriers, 512 bytes smem, 360 bytes cmem[0]\n";
    };
    const std::string device_function = "ptxas info    : Function properties for _Z6helperf\n"
                                        "    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n";
    test::write_file(tmp / "conv.log", "ptxas info    : 0 bytes gmem\n" + entry("_Z5lightPf", 40, 0) +
                                           entry("_Z6middlePf", 100, 0) + device_function + entry("_Z5heavyPf", 238, 0));
    auto tool = [&](const std::string& logs) {
        return std::system(("python3 tools/ptxas_table.py --out " + (tmp / "kernels.md") + " " + logs + " > " +
                            (tmp / "out") + " 2>&1").c_str());
    };
    REQUIRE(tool(tmp / "conv.log") == 0);
    INFO(slurp(tmp / "out"));
    const std::string table = slurp(tmp / "kernels.md");
    CHECK(table.find("| registers (sm_80) | largest block (threads) |") != std::string::npos);
    CHECK(table.find("| conv | `light(float*)` | 40 | 1024 | 0 | 0 | 0 | 512 | 1 |") != std::string::npos);
    CHECK(table.find("| conv | `middle(float*)` | 100 | 608 | 0 | 0 | 0 | 512 | 1 |") != std::string::npos);
    CHECK(table.find("| conv | `heavy(float*)` | 238 | 256 | 0 | 0 | 0 | 512 | 1 |") != std::string::npos);
    CHECK(table.find("| conv | `helper(float) (device function)` |  |  | 16 |") != std::string::npos);
    CHECK(table.find("3 kernels in 1 files for sm_80; 0 (kernel, arch) pairs with register spills") != std::string::npos);

    test::write_file(tmp / "nn.log", entry("_Z7spillerPf", 255, 24));
    const int status = tool((tmp / "conv.log") + " " + (tmp / "nn.log"));
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 1));
    CHECK(slurp(tmp / "out").find("nn: spiller(float*) (sm_80): 24 bytes spill stores") != std::string::npos);
}

// tools/results.py on hand-made run folders: seeds of one row, the shared flags, and a switch the
// shared flags turn on (or a value they give) that one row leaves off, which has no spelling of its own. A flag newer than
// some runs is shared when the runs that have it agree; a resumed run's parts count in the footer;
// runs of two metrics make no table.
TEST_CASE("tools/results.py: one row per run name, seeds averaged, a left-off switch named", "[apps]") {
    test::TempDir tmp;
    auto run = [&](const std::string& name, const std::string& untied, double bpc, const std::string& started_by = "",
                   const std::string& extra = "", const std::string& metric = "test_bpc") {
        test::write_file(tmp / ("runs/" + name + "/config.json"),
                         "{\"--init\": \"torch\", \"--untied\": \"" + untied + "\", \"--dim\": \"128\", " +
                             "\"--lr-scale\": \"" + (untied.empty() ? "" : "fc1.*=2") + "\", " + extra +
                         "\"--auto-resume\": \"" + started_by + "\", \"started\": \"2026-11-27T10:00:00Z\"}");
        test::write_file(tmp / ("runs/" + name + "/result.json"),
                         "{\"" + metric + "\": " + std::to_string(bpc) + ", \"finished\": \"2026-11-27T10:02:00Z\"}");
    };
    // How a run was started does not set it apart: three runs with --auto-resume, one without.
    run("a", "true", 2.5, "true");
    run("a-s1", "true", 2.7, "true");
    run("b", "true", 2.0, "true",
        "\"--pe-scale\": \"1\", \"resumed\": [{\"git_commit\": \"feedbee\", \"started\": \"2026-11-27T10:01:00Z\"}], ");
    run("tied", "", 3.0);
    REQUIRE(std::system(("python3 tools/results.py " + (tmp / "runs") + " > " + (tmp / "table") + " 2>&1").c_str()) == 0);
    std::string table = slurp(tmp / "table");
    INFO(table);
    CHECK(table.find("| a | --init torch | 2.50, 2.70 | 2.60 | 0.20 |") != std::string::npos);
    // (a value the shared flags give and the row leaves out, too: --lr-scale)
    CHECK(table.find("| tied | --init torch (no --untied) (no --lr-scale) | 3.00 |") != std::string::npos);
    CHECK(table.find("Shared flags: `--untied --dim 128 --lr-scale fc1.*=2 --pe-scale 1`") != std::string::npos);
    CHECK(table.find("| b | --init torch | 2.00; run: resumed, wall of its last part | 2.00 | — | — | 1.0 |") != std::string::npos);
    CHECK(table.find("feedbee") != std::string::npos);
    CHECK(table.find("auto-resume") == std::string::npos);
    CHECK(table.find("at init") == std::string::npos);
    // A run made with --eval-init: a column of the scores at init (its seeds' that have one; "—" in
    // a row with none).
    test::write_file(tmp / "runs/a-s1/result.json", "{\"test_bpc\": 2.7, \"init_eval\": {\"valid_bpc\": 6.125, "
                                                    "\"valid_loss\": 4.2}, \"finished\": \"2026-11-27T10:02:00Z\"}");
    REQUIRE(std::system(("python3 tools/results.py " + (tmp / "runs") + " > " + (tmp / "table") + " 2>&1").c_str()) == 0);
    table = slurp(tmp / "table");
    CHECK(table.find("| wall (min) | at init |") != std::string::npos);
    CHECK(table.find("| a | --init torch | 2.50, 2.70 | 2.60 | 0.20 | — | 2.0, 2.0 | 6.12 |") != std::string::npos);
    CHECK(table.find("| tied | --init torch (no --untied) (no --lr-scale) | 3.00 | 3.00 | — | — | 2.0 | — |") !=
          std::string::npos);
    run("vit", "true", 0.5, "true", "", "test_acc");
    CHECK(std::system(("python3 tools/results.py " + (tmp / "runs") + " > " + (tmp / "table") + " 2>&1").c_str()) != 0);
    CHECK(slurp(tmp / "table").find("one table holds runs of one metric") != std::string::npos);
    // A config.json cut short (a copy interrupted): refused, naming the file.
    test::write_file(tmp / "runs/vit/config.json", "{\"--init\": \"tor");
    CHECK(std::system(("python3 tools/results.py " + (tmp / "runs") + " > " + (tmp / "table") + " 2>&1").c_str()) != 0);
    CHECK(slurp(tmp / "table").find("runs/vit/config.json is not JSON") != std::string::npos);
    CHECK(slurp(tmp / "table").find("Traceback") == std::string::npos);
}

TEST_CASE("train_lm: raw WikiText trains at char level, its result in bits per character", "[apps]") {
    test::TempDir tmp;
    std::string text;
    for (int i = 0; i < 60; i++) text += " = Section " + std::to_string(i % 7) + " = \n \n The caf\u00e9 @-@ bar is open . \n";
    test::write_file(tmp / "raw/wiki.train.raw", text);
    test::write_file(tmp / "raw/wiki.valid.raw", " The bar is open . \n");
    test::write_file(tmp / "raw/wiki.test.raw", " The caf\u00e9 is shut . \n");  // 'u' unseen: <unk>
    REQUIRE(run_app("train_lm", "--dataset wikitext2-raw --data-dir " + (tmp / "raw") + " --model transformer --dim 16 "
                    "--depth 1 --heads 2 --seq-len 16 --batch-size 4 --epochs 1 --max-steps 3 --threads 1 --out " +
                    (tmp / "run"), tmp / "log") == 0);
    INFO(slurp(tmp / "log"));
    CHECK(slurp(tmp / "log").find("read as <unk>: 0 in valid, 1 in test") != std::string::npos);
    auto config = nlohmann::json::parse(slurp(tmp / "run/config.json"));
    CHECK(config["--level"] == "char");
    auto result = nlohmann::json::parse(slurp(tmp / "run/result.json"));
    CHECK(result.contains("test_bpc"));
    CHECK(slurp(tmp / "run/vocab.txt").find("<unk>\n") != std::string::npos);
}

TEST_CASE("train_lm: --eval-every adds validation points inside an epoch without changing the training", "[apps]") {
    test::TempDir tmp;
    write_tiny_text(tmp / "text", 300);
    // Dropout on and an LSTM's state carried across BPTT batches: an evaluation that drew from the
    // dropout generator or dropped the carried state would change the losses that follow it.
    for (std::string model : {"lstm --protocol bptt", "transformer --heads 2 --protocol window --scored 4"}) {
        INFO(model);
        std::string plain = tmp / (model.substr(0, 4) + "-plain"), evals = tmp / (model.substr(0, 4) + "-evals");
        std::string base = "--dataset text --data-dir " + (tmp / "text") + " --model " + model +
                           " --dim 16 --depth 2 --seq-len 8 --batch-size 4 --epochs 2 --dropout 0.2 --threads 1"
                           " --log-every 1 --seed 3";
        REQUIRE(run_app("train_lm", base + " --out " + plain, tmp / "log") == 0);
        REQUIRE(run_app("train_lm", base + " --eval-every 3 --eval-tokens 40 --out " + evals, tmp / "log") == 0);
        std::vector<double> plain_losses, eval_losses;
        std::vector<nlohmann::json> mid, ends;
        for (auto& j : metrics_lines(plain + "/metrics.jsonl"))
            if (j["kind"] == "train") plain_losses.push_back(j["loss"]);
        REQUIRE(plain_losses.size() > 6);
        int64_t per_epoch = (int64_t)plain_losses.size() / 2, expected = 0;
        for (auto& j : metrics_lines(evals + "/metrics.jsonl")) {
            if (j["kind"] == "train") eval_losses.push_back(j["loss"]);
            if (j["kind"] == "eval") (j["step"].get<int64_t>() % per_epoch != 0 ? mid : ends).push_back(j);
        }
        CHECK(eval_losses == plain_losses);  // bit for bit
        REQUIRE(ends.size() == 2);
        CHECK(ends[0]["valid_tokens"].get<int64_t>() > 40);  // the end-of-epoch evaluations read the whole split
        // Every third step, except where an epoch ends (that one has its whole-split evaluation).
        for (int64_t s = 3; s <= 2 * per_epoch; s += 3) expected += s % per_epoch != 0;
        CHECK((int64_t)mid.size() == expected);
        // valid_tokens counts the tokens scored: the 40 cut into 4 rows of 10 have 9 targets each; the
        // window protocol (windows of 8, the last 4 scored, stepping 4) scores 5 of them.
        const int64_t scored = model.rfind("lstm", 0) == 0 ? 36 : 20;
        for (auto& j : mid) {
            CHECK(j["step"].get<int64_t>() % 3 == 0);
            CHECK(j["valid_tokens"].get<int64_t>() == scored);
            CHECK(std::isfinite(j["valid_loss"].get<double>()));
            CHECK(j["elapsed_s"].get<double>() >= 0);
        }
    }
}

TEST_CASE("train_lm: --loss-scale time-sum gives the gradient of the mean loss times the scored positions per row",
          "[apps]") {
    test::TempDir tmp;
    write_tiny_text(tmp / "text", 300);
    // The positions the first batch scores in each row: bptt all 8; the window protocol the last
    // 3 of every window, the first one included (its first 5 tokens are context only, as in Bai et
    // al.'s code; data/lm_batch.h).
    struct Case {
        std::string args;
        double per_row;
    };
    for (const Case& c : {Case{"--model lstm --protocol bptt --seq-len 8", 8.0},
                          Case{"--model transformer --heads 2 --protocol window --seq-len 8 --scored 3", 3.0}}) {
        INFO(c.args);
        std::string base = "--dataset text --data-dir " + (tmp / "text") + " " + c.args +
                           " --dim 16 --depth 1 --batch-size 4 --epochs 1 --max-steps 1 --dropout 0 --opt sgd"
                           " --lr 1 --clip-grad 0 --threads 1 --log-every 1 --seed 5";
        // Each case in folders of its own (with one pair of folders, the second case's metrics were
        // appended to the first's, and its checks read the first case's lines).
        std::string run = tmp / (c.args.substr(8, c.args.find(' ', 8) - 8) + "-");  // "lstm-", "transformer-"
        for (const char* scale : {"mean", "time-sum"})
            REQUIRE(run_app("train_lm", base + " --loss-scale " + scale + " --out " + run + scale, tmp / "log") == 0);
        auto first_step = [&](const char* scale) {
            for (auto& j : metrics_lines(run + scale + "/metrics.jsonl"))
                if (j["kind"] == "train") return j;
            FAIL("no train line in " << scale << "/metrics.jsonl");
            return nlohmann::json();
        };
        auto mean = first_step("mean"), sum = first_step("time-sum");
        // The same batch, the same reported loss; the gradient (before any update) per_row times larger.
        CHECK(sum["loss"].get<double>() == Approx(mean["loss"].get<double>()).epsilon(1e-6));
        CHECK(sum["grad_norm"].get<double>() == Approx(c.per_row * mean["grad_norm"].get<double>()).epsilon(1e-5));
        CHECK(mean["grad_norm"].get<double>() > 0);
    }
}

TEST_CASE("bench convmixer: ConvMixer's step, with its kernel and patch and its parameter count", "[apps]") {
    test::TempDir tmp;
    int rc = std::system((app_path("bench") + " convmixer --dim 8 --depth 2 --kernel 5 --patch 4 --image-size 16 "
                          "--batch 2 --steps 1 --warmup 0 --threads 1 2>/dev/null >" + (tmp / "line")).c_str());
    REQUIRE(rc == 0);
    auto line = nlohmann::json::parse(slurp(tmp / "line"));
    CHECK(line["model"] == "convmixer");
    CHECK(line["kernel"] == 5);
    CHECK(line["patch"] == 4);
    // stem 3·8·4·4 + 8, its norm 2·8; per block depthwise 8·5·5 + 8, 1×1 8·8 + 8, two norms 4·8; head 8·10 + 10
    CHECK(line["params"] == (3 * 8 * 16 + 8) + 16 + 2 * ((8 * 25 + 8) + (64 + 8) + 32) + 90);
    CHECK(line["ms_per_step"].get<double>() > 0);
    CHECK(line["gflop_per_step"].get<double>() > 0);
}

TEST_CASE("--profile: bench prints the table and its JSON; train_lm writes profile.json", "[apps][profile]") {
    test::TempDir tmp;
    // The JSON line on stdout, the table on stderr, apart.
    int rc = std::system((app_path("bench") + " lm --dim 16 --depth 1 --heads 2 --seq 8 --batch 2 --vocab 11 --steps 1 "
                          "--warmup 0 --threads 1 --profile 2 2>" + (tmp / "table") + " >" + (tmp / "line")).c_str());
    std::string table = slurp(tmp / "table");
    INFO(table);
    REQUIRE(rc == 0);
    CHECK(table.find("bench lm --profile: 2 steps on cpu") != std::string::npos);
    CHECK(table.find("GFLOP/s") != std::string::npos);
    auto line = nlohmann::json::parse(slurp(tmp / "line"));
    CHECK(line.at("gflop_per_step").get<double>() > 0);
    CHECK(line.at("mfu").get<double>() > 0);
    auto prof = line.at("profile");
    CHECK(prof["steps"] == 2);
    double step = prof["step_ms"], charged = prof["charged_ms"], sum = 0;
    bool linear_forward = false;
    for (auto& e : prof["entries"]) {
        sum += e["ms_per_step"].get<double>();
        if (e["name"] == "linear" && e["phase"] == "forward") {
            linear_forward = true;
            CHECK(e["gflop_per_step"].get<double>() > 0);
        }
    }
    CHECK(linear_forward);
    CHECK(sum == Approx(charged).epsilon(1e-9));
    CHECK(std::fabs(charged - step) <= 0.1 * step);

    test::TempDir text;
    write_tiny_text(text / "text", 100);
    REQUIRE(run_app("train_lm", "--dataset text --data-dir " + (text / "text") + " --dim 16 --depth 1 --heads 2 "
                    "--seq-len 8 --batch-size 4 --epochs 1 --max-steps 4 --threads 1 --profile 2 --log-every 1 --out " +
                    (tmp / "run"), tmp / "log") == 0);
    CHECK(slurp(tmp / "log").find("train_lm --profile: 2 steps on cpu") != std::string::npos);
    auto pj = nlohmann::json::parse(slurp(tmp / "run/profile.json"));
    CHECK(pj["steps"] == 2);
    CHECK(!pj["entries"].empty());

    // Every training line reports the step's GEMM FLOPs (the same shapes each step: the same
    // count) and its MFU against the measured sgemm peak.
    CHECK(slurp(tmp / "log").find("mfu: against sgemm 1024^3 on 1 threads (measured)") != std::string::npos);
    std::vector<double> gflop;
    for (auto& j : metrics_lines(tmp / "run/metrics.jsonl"))
        if (j["kind"] == "train") {
            gflop.push_back(j.at("gflop").get<double>());
            CHECK(j.at("mfu").get<double>() > 0);
        }
    REQUIRE(gflop.size() == 4);
    CHECK(gflop[0] > 0);
    for (double g : gflop) CHECK(g == gflop[0]);
}

TEST_CASE("train_lm: a small transformer gets below 3 bpc on PTB char valid", "[apps][ptb-char]") {
    std::string root = test::real_data_dir("PTB char training");
    if (root.empty()) return;
    if (!fs::is_directory(root + "/ptb-char")) {
        WARN("skipped PTB char training: no " << root << "/ptb-char");
        return;
    }
    test::TempDir tmp;
    // 400 steps of 32 rows x 64 characters: the first 400·32·64 + 32 = 819,232 training characters
    // (one more a row for the last target), one epoch. An untied output layer keeps the first
    // logits small under PyTorch's N(0,1) embedding; no dropout in so short a run; one thread,
    // as the CI machine's cores may be busy. About 45 s on a loaded 2-core machine.
    std::string args = "--dataset ptb-char --data-dir " + root + "/ptb-char" +
                       " --model transformer --dim 64 --depth 2 --heads 4 --untied --dropout 0"
                       " --seq-len 64 --batch-size 32 --train-tokens 819232 --epochs 1"
                       " --lr 1e-2 --warmup-steps 30 --threads 1 --out " + (tmp / "run");
    int rc = run_app("train_lm", args, tmp / "log");
    INFO(slurp(tmp / "log"));
    REQUIRE(rc == 0);
    auto result = nlohmann::json::parse(slurp(tmp / "run/result.json"));
    CHECK(result["train_tokens"] == 819232);
    CHECK(result["steps"] == 400);
    auto evals = eval_lines(tmp / "run/metrics.jsonl");
    REQUIRE(evals.size() == 1);
    double bpc = evals[0]["valid_bpc"], nats = evals[0]["valid_loss"];
    INFO("valid " << bpc << " bpc (" << nats << " nats per character)");
    // Bits per character: the mean cross-entropy over the valid split in nats, divided by ln 2.
    CHECK(bpc == Approx(nats / std::log(2.0)).epsilon(1e-12));
    CHECK(result["best_valid_bpc"].get<double>() == bpc);
    // A bigram model of PTB char is near 3.35 bpc, the unigram entropy 4.3; the run reaches
    // about 2.65 (seeds 0-2).
    CHECK(bpc < 3.0);
}
