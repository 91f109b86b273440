// tests/cuda/test_cuda_apps.cpp: train_vit and train_lm end to end with --device cuda on tiny data,
// against the same runs on the CPU: the same training losses step by step, and the same test
// figures. Under the emulated build the CUDA apps are build/<root>/emu/apps/*; under the nvcc
// build they are the apps/ next to tests/ (found from this binary's own path either way). The CPU
// reference is the CPU build's apps/ (run from the repository root); without one, the same binary
// with --device cpu (the same CPU code paths), with a notice.
//
// Tolerances: per-step losses and test losses atol 1e-4, rtol 1e-3 (a few steps of AdamW on
// float32 kernels that add in other orders); accuracy within one test image.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "engine/cuda/cudnn.h"
#include "engine/rng.h"
#include "engine/safetensors.h"
#include "tests/test_data_helpers.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The apps built with this test binary: <dir of this binary>/../apps/ (build/<root>/emu/apps/ for
// build/<root>/emu/tests/run_tests; apps/ for the nvcc build's tests/run_tests). An nvcc build
// elsewhere (BUILD_ROOT=...) keeps its test binary in its build folder and its apps in apps/.
std::string device_app(const std::string& name) {
    fs::path self = fs::read_symlink("/proc/self/exe");
    fs::path p = self.parent_path().parent_path() / "apps" / name;
#ifndef ENGINE_CUDA_EMU
    if (!fs::exists(p)) p = fs::path("apps") / name;
#endif
    if (!fs::exists(p)) FAIL(p.string() << " not found: build the apps with this test binary (make emu, or make)");
    return p.string();
}

// The CPU build's app (repository root), or "" when it is not there.
std::string cpu_app(const std::string& name) {
    std::string p = "apps/" + name;
    if (fs::exists(p)) return p;
    WARN("no CPU build's " << p << " (run from the repository root after make): the CPU reference is "
                           << device_app(name) << " --device cpu");
    return "";
}

int run(const std::string& cmd, const std::string& log) {
    int rc = std::system((cmd + " > " + log + " 2>&1").c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string slurp(const std::string& path) {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

std::vector<json> metrics(const std::string& run_dir, const std::string& kind) {
    std::vector<json> out;
    std::ifstream m(run_dir + "/metrics.jsonl");
    for (std::string l; std::getline(m, l);) {
        auto j = json::parse(l);
        if (j["kind"] == kind) out.push_back(j);
    }
    return out;
}

void check_close(const std::string& what, double cpu, double cuda, double atol = 1e-4, double rtol = 1e-3) {
    INFO(what << ": cpu " << cpu << ", cuda " << cuda);
    CHECK(std::fabs(cpu - cuda) <= atol + rtol * std::fabs(cpu));
}

// Runs `args` on the device and on the CPU into tmp/cuda and tmp/cpu; both must succeed.
void run_both(const test::TempDir& tmp, const std::string& app, const std::string& args,
              const std::string& cuda_extra = "", const std::string& cpu_extra = "") {
    std::string dev = device_app(app), cpu = cpu_app(app);
    int rc = run(dev + " " + args + " --device cuda " + cuda_extra + " --out " + (tmp / "cuda"), tmp / "log_cuda");
    INFO("cuda run:\n" << slurp(tmp / "log_cuda"));
    REQUIRE(rc == 0);
    rc = run((cpu.empty() ? dev : cpu) + " " + args + " --device cpu " + cpu_extra + " --out " + (tmp / "cpu"),
             tmp / "log_cpu");
    INFO("cpu run:\n" << slurp(tmp / "log_cpu"));
    REQUIRE(rc == 0);
    auto config = json::parse(slurp(tmp / "cuda/config.json"));
    CHECK(config["device"].get<std::string>().rfind("cuda: ", 0) == 0);  // "cuda: emulated" or the GPU's name
    CHECK(json::parse(slurp(tmp / "cpu/config.json"))["device"] == "cpu");
}

}  // namespace

TEST_CASE("cuda apps: train_vit --device cuda matches the CPU run", "[cuda]") {
    test::TempDir tmp;
    test::write_tiny_cifar10(tmp / "cifar", 1, 2);  // 50 training images, 20 test images
    std::string args = "--dataset cifar10 --data-dir " + (tmp / "cifar") +
                       " --dim 16 --depth 1 --heads 2 --patch 8 --batch-size 25 --epochs 2 --lr 1e-2 "
                       "--warmup-epochs 0 --randaug 0 --threads 1 --log-every 1 --init timm --seed 3 --eval-init";
    run_both(tmp, "train_vit", args);
    auto tc = metrics(tmp / "cpu", "train"), tg = metrics(tmp / "cuda", "train");
    REQUIRE(tc.size() == 4);
    REQUIRE(tg.size() == tc.size());
    for (size_t i = 0; i < tc.size(); i++) {
        check_close("step " + std::to_string(i + 1) + " loss", tc[i]["loss"], tg[i]["loss"]);
        check_close("step " + std::to_string(i + 1) + " grad norm", tc[i]["grad_norm"], tg[i]["grad_norm"]);
    }
    auto rc = json::parse(slurp(tmp / "cpu/result.json")), rg = json::parse(slurp(tmp / "cuda/result.json"));
    check_close("test loss", rc["test_loss"], rg["test_loss"]);
    CHECK(std::fabs(rc["test_acc"].get<double>() - rg["test_acc"].get<double>()) <= 1.0 / 20 + 1e-9);
    REQUIRE(rg.contains("init_eval"));  // --eval-init: the init's score on the device as on the CPU
    check_close("test loss at init", rc["init_eval"]["test_loss"], rg["init_eval"]["test_loss"]);
    CHECK(fs::exists(tmp / "cuda/last.safetensors"));
    CHECK(fs::exists(tmp / "cuda/last.optim.safetensors"));
}

TEST_CASE("cuda apps: train_lm --device cuda matches the CPU run (transformer, GAU, LSTM)", "[cuda]") {
    std::string line = "the cat sat on the mat and the dog sat on the log\n";
    for (std::string model : {"transformer", "gau", "lstm"}) {
        INFO("model " << model);
        test::TempDir tmp;
        std::string text;
        for (int i = 0; i < 6; i++) text += line;
        for (const char* split : {"train", "valid", "test"})
            test::write_file(tmp / ("text/" + std::string(split) + ".txt"), text);
        std::string args = "--dataset text --data-dir " + (tmp / "text") + " --model " + model +
                           " --dim 16 --depth 1 --heads 2 --s 8 --seq-len 8 --batch-size 2 --epochs 1 --max-steps 4"
                           " --lr 1e-2 --dropout 0 --threads 1 --seed 1 --eval-init";
        // The device run logs every third step only: the loss is then read back at those steps and
        // at the end of the epoch, which must give the same epoch figures.
        run_both(tmp, "train_lm", args, "--log-every 3", "--log-every 1");
        auto tc = metrics(tmp / "cpu", "train"), tg = metrics(tmp / "cuda", "train");
        REQUIRE(tc.size() == 4);
        REQUIRE(tg.size() == 1);
        CHECK(tg[0]["step"] == 3);
        check_close("step 3 loss", tc[2]["loss"], tg[0]["loss"]);
        auto ec = metrics(tmp / "cpu", "eval"), eg = metrics(tmp / "cuda", "eval");
        REQUIRE(ec.size() == 2);  // --eval-init's at step 0, then the epoch's
        REQUIRE(eg.size() == 2);
        CHECK(eg[0]["step"] == 0);
        check_close("valid loss at init", ec[0]["valid_loss"], eg[0]["valid_loss"]);
        check_close("train ppl", ec[1]["train_ppl"], eg[1]["train_ppl"]);
        check_close("valid loss", ec[1]["valid_loss"], eg[1]["valid_loss"]);
        REQUIRE(eg[1].contains("tok_cos") == (model != "lstm"));  // the last block's output, read back
        if (model != "lstm") check_close("last block tok_cos", ec[1]["tok_cos"], eg[1]["tok_cos"]);
        auto rc = json::parse(slurp(tmp / "cpu/result.json")), rg = json::parse(slurp(tmp / "cuda/result.json"));
        check_close("test loss", rc["test_loss"], rg["test_loss"]);
    }
}

// --precision bf16 on the device: train_vit and train_lm run their steps and record the flag, bench
// reports it in its JSON; on the CPU it is accepted with a note (the CPU computes in fp32). How
// close bf16 is to fp32 is checked in test_cuda_bf16.cpp; here, that the flag reaches the apps.
TEST_CASE("cuda apps: --precision bf16 runs train_vit, train_lm and bench on the device", "[cuda]") {
    test::TempDir tmp;
    test::write_tiny_cifar10(tmp / "cifar", 1, 2);
    int rc = run(device_app("train_vit") + " --device cuda --precision bf16 --dataset cifar10 --data-dir " +
                     (tmp / "cifar") + " --dim 16 --depth 1 --heads 2 --patch 8 --batch-size 25 --epochs 1 "
                     "--lr 1e-2 --warmup-epochs 0 --randaug 0 --threads 1 --log-every 1 --out " + (tmp / "vit"),
                 tmp / "log");
    INFO(slurp(tmp / "log"));
    CHECK(rc == 0);
    CHECK(json::parse(slurp(tmp / "vit/config.json"))["--precision"] == "bf16");
    auto vit = metrics(tmp / "vit", "train");
    REQUIRE(vit.size() == 2);
    CHECK(std::isfinite(vit.back()["loss"].get<double>()));

    std::string text;
    for (int i = 0; i < 6; i++) text += "the cat sat on the mat and the dog sat on the log\n";
    for (const char* split : {"train", "valid", "test"})
        test::write_file(tmp / ("text/" + std::string(split) + ".txt"), text);
    for (std::string model : {"transformer", "lstm"}) {
        INFO("model " << model);
        std::string out = tmp / ("lm_" + model);
        rc = run(device_app("train_lm") + " --device cuda --precision bf16 --dataset text --data-dir " + (tmp / "text") +
                     " --model " + model + " --dim 16 --depth 1 --heads 2 --seq-len 8 --batch-size 2 --epochs 1 "
                     "--max-steps 2 --lr 1e-2 --dropout 0 --threads 1 --log-every 1 --out " + out,
                 tmp / "log");
        INFO(slurp(tmp / "log"));
        CHECK(rc == 0);
        CHECK(json::parse(slurp(out + "/config.json"))["--precision"] == "bf16");
        auto lm = metrics(out, "train");
        REQUIRE(lm.size() == 2);
        CHECK(std::isfinite(lm.back()["loss"].get<double>()));
    }

    rc = run(device_app("bench") + " gau --device cuda --precision bf16 --dim 16 --depth 1 --seq 8 --batch 2 "
                                   "--vocab 11 --steps 1 --warmup 0",
             tmp / "log");
    INFO(slurp(tmp / "log"));
    CHECK(rc == 0);
    CHECK(slurp(tmp / "log").find("\"precision\":\"bf16\"") != std::string::npos);
    CHECK(slurp(tmp / "log").find("\"device\":\"cuda: ") != std::string::npos);
    rc = run(device_app("bench") + " lm --device cuda --precision tf32 --dim 16 --depth 1 --heads 2 --seq 8 --batch 2 "
                                   "--vocab 11 --steps 1 --warmup 0",
             tmp / "log");
    INFO(slurp(tmp / "log"));
    CHECK(rc == 0);
    rc = run(device_app("bench") + " lstm --device cpu --precision bf16 --dim 8 --depth 1 --seq 4 --batch 2 "
                                   "--vocab 11 --steps 1 --warmup 0",
             tmp / "log");
    INFO(slurp(tmp / "log"));
    CHECK(rc == 0);
    CHECK(slurp(tmp / "log").find("--precision bf16 has no effect on the CPU") != std::string::npos);
}

// bench/gpu.sh's flags for a smoke run of the apps already built: under the emulator here (CI),
// on the device in an nvcc build. Run from the repository root.
static std::string gpu_sh_smoke_flags() {
#ifdef ENGINE_CUDA_EMU
    return "--smoke --emulated --no-build";
#else
    return "--smoke --no-build";
#endif
}

// Runs a smoke bench/gpu.sh with `args` added, in tmp; requires success (its log in the message)
// and returns the table it wrote.
static std::string gpu_sh_table(const std::string& args, const test::TempDir& tmp) {
    const std::string cmd = "bash bench/gpu.sh " + gpu_sh_smoke_flags() + " " + args + " --out " + (tmp / "table.md");
    int rc = run(cmd, tmp / "log");
    INFO(slurp(tmp / "log"));
    REQUIRE(rc == 0);
    return slurp(tmp / "table.md");
}

TEST_CASE("cuda apps: bench/gpu.sh --smoke runs end to end and writes its table", "[cuda]") {
    // The GPU benchmark kit, on tiny models and without PyTorch.
    test::TempDir tmp;
    std::string table = gpu_sh_table("", tmp);
    INFO(table);
    CHECK(table.find("# GPU benchmark: cuda: ") == 0);
    CHECK(table.find("[cuda] suite on this device: 1 passed, 0 failed.") != std::string::npos);
    for (const char* model : {"| vit | fp32 |", "| vit | tf32 |", "| lm | fp32 |", "| gau | tf32 |", "| lstm | fp32 |",
                              "| vit | bf16 |", "| lstm | bf16 |"})
        CHECK(table.find(model) != std::string::npos);
    CHECK(table.find("--profile: 2 steps on cuda") != std::string::npos);
}

TEST_CASE("cuda apps: bench/gpu.sh --fused-attention both gives a row with the fused path off and one on",
          "[cuda]") {
    // lm4k in a smoke run: head dim 32, so the fused (under tf32: tensor-core) kernels run.
    test::TempDir tmp;
    std::string table = gpu_sh_table("--no-tests --models lm4k --precisions tf32 --fused-attention both", tmp);
    INFO(table);
    // The attention kernels column says which path ran: at seq 64 (one key tile) the split dq.
    CHECK(table.find("| lm4k | tf32 | off | unfused |") != std::string::npos);
    CHECK(table.find("| lm4k | tf32 | on | flash tf32 split-dq |") != std::string::npos);
    CHECK(table.find("lm4k `--dim 32") != std::string::npos);
    CHECK(run("bash bench/gpu.sh " + gpu_sh_smoke_flags() + " --fused-attention sometimes", tmp / "log2") != 0);
}

TEST_CASE("cuda apps: bench/gpu.sh's vit-* variants are vit with their switch; an unknown one is refused", "[cuda]") {
    test::TempDir tmp;
    std::string table = gpu_sh_table("--no-tests --models 'vit vit-noedge' --precisions tf32", tmp);
    INFO(table);
    CHECK(table.find("| vit-noedge | tf32 | off | unfused |") != std::string::npos);
    CHECK(table.find("vit `--dim") != std::string::npos);  // vit's sizes
    // The last column: vit's ms over the variant's (a number), "–" on vit's own row.
    auto last_cell = [&](const std::string& row) {
        size_t at = table.find(row);
        REQUIRE(at != std::string::npos);
        std::string line = table.substr(at, table.find('\n', at) - at);
        line = line.substr(0, line.rfind('|'));
        return line.substr(line.rfind('|') + 1);
    };
    CHECK(last_cell("| vit | tf32 |") == " – ");
    // each run's apps/bench line, less its profile
    CHECK(table.find("- vit-noedge tf32 fused off: `{") != std::string::npos);
    CHECK(table.find("\"attention_kernels\": \"unfused\"") != std::string::npos);
    const std::string ratio = last_cell("| vit-noedge | tf32 |");
    INFO("base / variant: '" << ratio << "'");
    CHECK(std::stod(ratio) > 0.0);
    CHECK(run("bash bench/gpu.sh " + gpu_sh_smoke_flags() + " --no-tests --models vit-bogus", tmp / "log2") != 0);
    CHECK(slurp(tmp / "log2").find("unknown variant vit-bogus") != std::string::npos);
}

TEST_CASE("cuda apps: bench/gpu.sh lstm and lstm-cudnn: the own LSTM kernels and cuDNN's, side by side", "[cuda]") {
    if (!engine::cuda::cudnn_built()) {
        WARN("this build has no cuDNN: the own kernels are the only LSTM path");
        return;
    }
    test::TempDir tmp;
    std::string table = gpu_sh_table("--no-tests --models 'lstm lstm-cudnn' --precisions fp32", tmp);
    INFO(table);
    // The cuDNN calls column: a smoke lstm-cudnn step (INITLAB_CUDNN_LSTM=1; 1 layer; warm-up, timed
    // and profiled steps) calls cuDNN; lstm (the default, the own kernels) never does.
    auto cells_of_row = [&](const std::string& row) {
        size_t at = table.find(row);
        REQUIRE(at != std::string::npos);
        std::string line = table.substr(at, table.find('\n', at) - at);
        std::vector<std::string> cells;
        for (size_t p = 1, q; (q = line.find('|', p)) != std::string::npos; p = q + 1) cells.push_back(line.substr(p, q - p));
        return cells;
    };
    std::vector<std::string> header = cells_of_row("| model |");
    size_t column = std::find(header.begin(), header.end(), " cuDNN calls ") - header.begin();
    REQUIRE(column < header.size());
    auto cudnn_calls = [&](const std::string& row) {
        std::vector<std::string> cells = cells_of_row(row);
        REQUIRE(cells.size() == header.size());
        return std::stol(cells[column]);
    };
    CHECK(cudnn_calls("| lstm-cudnn | fp32 |") > 0);
    CHECK(cudnn_calls("| lstm | fp32 |") == 0);
}

TEST_CASE("cuda apps: bench/gpu.sh convmixer: ConvMixer's row, its sizes, and its convolutions through cuDNN",
          "[cuda]") {
    test::TempDir tmp;
    std::string table = gpu_sh_table("--no-tests --models convmixer --precisions tf32", tmp);
    INFO(table);
    CHECK(table.find("| convmixer | tf32 | off | – |") != std::string::npos);  // no attention op
    CHECK(table.find("convmixer `--dim 8") != std::string::npos);
    CHECK(table.find("\"model\": \"convmixer\"") != std::string::npos);
    REQUIRE(table.find("\"cudnn_calls\": ") != std::string::npos);
    if (engine::cuda::cudnn_built()) CHECK(table.find("\"cudnn_calls\": 0") == std::string::npos);
}

// bench's JSON line (stdout) out of its log (stderr may hold notes).
json bench_json(const std::string& log) {
    std::istringstream lines(log);
    for (std::string line; std::getline(lines, line);)
        if (line.rfind("{", 0) == 0) return json::parse(line);
    FAIL("no JSON line in bench's output");
    return {};
}

// --cuda-graph on (the default) in bench: the eager steps and the captured step are both timed
// and reported (the LSTM's too: its carried state stays in place); off (or the CPU) reports the
// eager step only.
TEST_CASE("cuda apps: bench times the step with and without a CUDA graph", "[cuda][graph]") {
    test::TempDir tmp;
    std::string lm = " lm --device cuda --dim 16 --depth 1 --heads 2 --seq 8 --batch 2 --vocab 11 --steps 2 --warmup 0";
    std::string lstm = " lstm --device cuda --dim 8 --depth 2 --seq 4 --batch 2 --vocab 11 --steps 2 --warmup 0";
    for (const std::string& args : {lm, lstm}) {
        int rc = run(device_app("bench") + args, tmp / "log");
        INFO(slurp(tmp / "log"));
        REQUIRE(rc == 0);
        json out = bench_json(slurp(tmp / "log"));
        CHECK(out["cuda_graph"] == true);
        CHECK(out["ms_per_step_eager"].get<double>() > 0);
        CHECK(out["ms_per_step_graph"].get<double>() > 0);
        CHECK(out["ms_per_step"] == out["ms_per_step_graph"]);
    }
    int rc = run(device_app("bench") + lm + " --cuda-graph off", tmp / "log");
    INFO(slurp(tmp / "log"));
    REQUIRE(rc == 0);
    json out = bench_json(slurp(tmp / "log"));
    CHECK_FALSE(out.contains("cuda_graph"));
    CHECK_FALSE(out.contains("ms_per_step_graph"));
    // INITLAB_CUDA_SYNC=1 (wait after every launch, to find a failing kernel) leaves captures alone.
    rc = run("INITLAB_CUDA_SYNC=1 " + device_app("bench") + lm, tmp / "log");
    INFO(slurp(tmp / "log"));
    REQUIRE(rc == 0);
    CHECK(bench_json(slurp(tmp / "log"))["ms_per_step_graph"].get<double>() > 0);
}

// apps/bench's attention_kernels names the unfused path's variants: edge keys at 257 tokens (head
// dim 32), address-array GEMMs and autotuned GEMMs by their switches (gemm_tunings counts); with
// INITLAB_LT_BIAS=1, lt_bias_calls counts the GEMMs that took cuBLASLt's bias epilogues.
TEST_CASE("cuda apps: bench names the unfused attention's edge keys, address arrays and tuned GEMMs", "[cuda]") {
    test::TempDir tmp;
    const std::string vit =
        " vit --device cuda --dim 64 --depth 1 --heads 2 --patch 2 --batch 2 --steps 1 --warmup 0";
    struct Case { std::string env, kernels; bool tuned, lt = false; };
    for (const Case& c : {Case{"", "unfused edge-keys", false},
                          Case{"INITLAB_ATTENTION_EDGE_KEYS=0 ", "unfused", false},
                          Case{"INITLAB_GEMM_POINTER_BATCH=1 INITLAB_GEMM_AUTOTUNE=1 ", "unfused edge-keys pointers",
                               true},
                          Case{"INITLAB_LT_BIAS=1 ", "unfused edge-keys", false, true}}) {
        int rc = run(c.env + device_app("bench") + vit, tmp / "log");
        INFO(c.env << slurp(tmp / "log"));
        REQUIRE(rc == 0);
        json out = bench_json(slurp(tmp / "log"));
        CHECK(out["attention_kernels"] == c.kernels);
        CHECK(out.contains("gemm_tunings") == c.tuned);
        if (c.tuned) CHECK(out["gemm_tunings"].get<int>() > 0);
        CHECK(out.contains("lt_bias_calls") == c.lt);
        if (c.lt) CHECK(out["lt_bias_calls"].get<int>() > 0);
    }
}

// --cuda-graph on against off, on the device: the same losses and gradient norms bit for bit (the
// graph step's arithmetic is the eager step's, nn/graph_step.h), with a last partial batch per
// epoch run eagerly between replays and an evaluation between epochs.
void check_graph_on_equals_off(const test::TempDir& tmp, const std::string& app, const std::string& args,
                               size_t train_lines) {
    std::string dev = device_app(app);
    for (std::string mode : {"on", "off"}) {
        int rc = run(dev + " " + args + " --device cuda --cuda-graph " + mode + " --out " + (tmp / mode), tmp / ("log_" + mode));
        INFO(mode << ":\n" << slurp(tmp / ("log_" + mode)));
        REQUIRE(rc == 0);
    }
    CHECK(slurp(tmp / "log_on").find("captured into a CUDA graph") != std::string::npos);
    CHECK(slurp(tmp / "log_off").find("captured into a CUDA graph") == std::string::npos);
    auto on = metrics(tmp / "on", "train"), off = metrics(tmp / "off", "train");
    REQUIRE(off.size() == train_lines);
    REQUIRE(on.size() == off.size());
    for (size_t i = 0; i < on.size(); i++) {
        INFO("train line " << i << ": on " << on[i].dump() << "\noff " << off[i].dump());
        CHECK(on[i]["loss"] == off[i]["loss"]);
        CHECK(on[i]["grad_norm"] == off[i]["grad_norm"]);
    }
    auto ron = json::parse(slurp(tmp / "on/result.json")), roff = json::parse(slurp(tmp / "off/result.json"));
    CHECK(ron["test_loss"] == roff["test_loss"]);
}

TEST_CASE("cuda apps: train_vit --cuda-graph on equals off bit for bit", "[cuda][graph]") {
    test::TempDir tmp;
    test::write_tiny_cifar10(tmp / "cifar", 1, 2);  // 50 training images: batches of 20, 20 and 10
    check_graph_on_equals_off(tmp, "train_vit",
                              "--dataset cifar10 --data-dir " + (tmp / "cifar") +
                                  " --dim 16 --depth 1 --heads 2 --patch 8 --batch-size 20 --epochs 2 --lr 1e-2 "
                                  "--warmup-epochs 1 --randaug 0 --threads 1 --log-every 1 --clip-grad 0.5 --init timm "
                                  "--seed 3",
                              6);
}

TEST_CASE("cuda apps: train_lm --cuda-graph on equals off bit for bit (transformer, GAU)", "[cuda][graph]") {
    std::string text;
    for (int i = 0; i < 6; i++) text += "the cat sat on the mat and the dog sat on the log\n";
    for (std::string model : {"transformer", "gau"}) {
        INFO("model " << model);
        test::TempDir tmp;
        for (const char* split : {"train", "valid", "test"})
            test::write_file(tmp / ("text/" + std::string(split) + ".txt"), text);
        // 84 tokens, BPTT over 2 streams of 41 inputs: 5 batches of 8 and a last one of 1 (run eagerly).
        check_graph_on_equals_off(tmp, "train_lm",
                                  "--dataset text --data-dir " + (tmp / "text") + " --model " + model +
                                      " --dim 16 --depth 1 --heads 2 --s 8 --seq-len 8 --batch-size 2 --epochs 1"
                                      " --lr 1e-2 --dropout 0.1 --clip-grad 0.5 --threads 1 --log-every 1 --seed 1",
                                  6);
    }
}

// --freeze on the device (apps/common/freeze.h): frozen parameters get no gradient, which the
// multi-tensor AdamW and the captured step skip. The graph run equals the eager one bit for bit, and
// the frozen tensors leave the run exactly as the CPU initialized them (a CPU run that trains only one
// LayerNorm gain holds every other tensor at its init).
TEST_CASE("cuda apps: train_lm --freeze on the device keeps the frozen tensors at their init", "[cuda][graph]") {
    std::string text;
    for (int i = 0; i < 6; i++) text += "the cat sat on the mat and the dog sat on the log\n";
    test::TempDir tmp;
    for (const char* split : {"train", "valid", "test"})
        test::write_file(tmp / ("text/" + std::string(split) + ".txt"), text);
    std::string args = "--dataset text --data-dir " + (tmp / "text") +
                       " --model transformer --dim 16 --depth 1 --heads 2 --seq-len 8 --batch-size 2 --epochs 1"
                       " --lr 1e-2 --dropout 0 --threads 1 --log-every 1 --seed 1";
    check_graph_on_equals_off(tmp, "train_lm", args + " --freeze '*.bias,tok_emb.*'", 6);
    std::string cpu = cpu_app("train_lm");
    REQUIRE(run((cpu.empty() ? device_app("train_lm") : cpu) + " " + args +
                    " --device cpu --max-steps 1 --train-only blocks.0.norm1.weight --out " + (tmp / "init"),
                tmp / "log_init") == 0);
    auto init = engine::load_safetensors(tmp / "init/last.safetensors");
    auto on = engine::load_safetensors(tmp / "on/last.safetensors");
    auto same = [](const engine::Tensor& a, const engine::Tensor& b) {
        return a.numel() == b.numel() && std::equal(a.data_f32(), a.data_f32() + a.numel(), b.data_f32());
    };
    int frozen = 0;
    for (const auto& [name, t] : init) {
        bool is_frozen = name == "tok_emb.weight" || (name.size() > 5 && name.substr(name.size() - 5) == ".bias");
        if (!is_frozen) continue;
        INFO(name);
        CHECK(same(on.at(name), t));
        frozen++;
    }
    CHECK(frozen >= 7);  // the embedding, q k v proj fc1 fc2 and two norms' biases
    CHECK(!same(on.at("blocks.0.attn.q.weight"), init.at("blocks.0.attn.q.weight")));  // trained
}

// The LSTM's state carried from batch to batch stays in place (nn::CarriedState) and --loss-scale
// time-sum's factor reaches the graph through device memory: Zaremba's recipe (SGD, lr 1, clip 5)
// with dropout, two epochs (the state reset between them), an evaluation mid-epoch (its own state).
TEST_CASE("cuda apps: train_lm --cuda-graph on equals off bit for bit (LSTM, BPTT, time-sum)", "[cuda][graph]") {
    std::string text;
    for (int i = 0; i < 6; i++) text += "the cat sat on the mat and the dog sat on the log\n";
    test::TempDir tmp;
    for (const char* split : {"train", "valid", "test"})
        test::write_file(tmp / ("text/" + std::string(split) + ".txt"), text);
    check_graph_on_equals_off(tmp, "train_lm",
                              "--dataset text --data-dir " + (tmp / "text") +
                                  " --model lstm --dim 16 --depth 2 --seq-len 8 --batch-size 2 --epochs 2 --opt sgd"
                                  " --lr 1 --loss-scale time-sum --clip-grad 5 --dropout 0.1 --eval-every 3"
                                  " --threads 1 --log-every 1 --seed 1",
                              12);
}
