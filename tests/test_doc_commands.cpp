// tests/test_doc_commands.cpp: `--dry-run` of train_vit and train_lm checks a command and touches
// nothing, and every training command of README.md, docs/REPRODUCE.md, docs/RESULTS.md and
// bench/reproduce_cpu.sh passes it (tools/check_doc_commands.sh). A flag renamed in an app then
// fails here, not in a researcher's first hour. Run from the repository root after `make`.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <string>
#include "tests/test_data_helpers.h"

namespace fs = std::filesystem;

namespace {

struct Result {
    int status = -1;
    std::string output;  // stdout and stderr
};

// Runs `command` with sh from the repository root, its output captured through a file in `tmp`.
Result shell(const test::TempDir& tmp, const std::string& command) {
    std::string log = tmp / "shell.log";
    int rc = std::system((command + " > " + log + " 2>&1").c_str());
    std::ifstream f(log);
    return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, std::string(std::istreambuf_iterator<char>(f), {})};
}

bool has(const Result& r, const std::string& text) { return r.output.find(text) != std::string::npos; }

}  // namespace

TEST_CASE("--dry-run checks the flags and the model, and reads and writes nothing", "[apps][docs]") {
    test::TempDir tmp;
    // No data anywhere, an --init-from that does not exist, a --resume with no checkpoint: a dry
    // run reads none of them, and creates no --out.
    Result vit = shell(tmp, "INITLAB_DATA=" + (tmp / "none") + " apps/train_vit --dataset cifar10 --init mimetic "
                                "--init-from " + (tmp / "missing.safetensors") + " --out " + (tmp / "run") + " --dry-run");
    INFO(vit.output);
    CHECK(vit.status == 0);
    CHECK(has(vit, "\"--init\": \"mimetic\""));
    CHECK(has(vit, "train_vit: model: vit-tiny, 5343178 parameters"));  // 192/12/3, patch 2, 10 classes
    CHECK_FALSE(has(vit, "\"--dry-run\""));  // not a property of the run: config.json leaves it out
    CHECK_FALSE(fs::exists(tmp / "run"));
    Result lm = shell(tmp, "apps/train_lm --dataset ptb --model lstm --preset small --resume --out " + (tmp / "lm") +
                               " --data-dir " + (tmp / "none") + " --dry-run");
    INFO(lm.output);
    CHECK(lm.status == 0);
    CHECK(has(lm, "train_lm: model: lstm builds"));
    CHECK_FALSE(fs::exists(tmp / "lm"));
    // A device that is not here is a note: the dry run checks the command, not the machine.
    CHECK(shell(tmp, "apps/train_vit --device cuda --dry-run").status == 0);

    // What a real run would refuse, a dry run refuses: the flag checks, and the model's own.
    auto refused_with = [&](const std::string& command, const std::string& message) {
        Result r = shell(tmp, command);
        UNSCOPED_INFO(command << ": " << r.output);
        return r.status == 2 && has(r, message);
    };
    CHECK(refused_with("apps/train_vit --heads 5 --dry-run", "width 192 is not divisible by 5 heads"));
    CHECK(refused_with("apps/train_lm --freeze 'nothing.*' --dry-run", "'nothing.*' matches no parameter"));
    CHECK(shell(tmp, "apps/train_vit --init impulse3 --pool cls --dry-run").status == 2);
    CHECK(shell(tmp, "apps/train_vit --fc-norm --pool cls --dry-run").status == 2);
    CHECK(shell(tmp, "apps/train_vit --fc-norm --model convmixer-256-8 --dry-run").status == 2);
    Result fc = shell(tmp, "apps/train_vit --fc-norm --dry-run");
    CHECK(fc.status == 0);
    CHECK(has(fc, "\"--fc-norm\": \"true\""));
    CHECK(shell(tmp, "apps/train_lm --model gau --emb-scale 2 --dry-run").status == 2);

    // --act: the transformers' MLP activation, recorded; a ConvMixer's is fixed (refused), an LSTM
    // has none (a note).
    Result act = shell(tmp, "apps/train_vit --act relu --init relu-quantile --dry-run");
    CHECK(act.status == 0);
    CHECK(has(act, "\"--act\": \"relu\""));
    CHECK(shell(tmp, "apps/train_vit --act silu --model convmixer-256-8 --dry-run").status == 2);
    CHECK(shell(tmp, "apps/train_vit --act tanh --dry-run").status == 2);
    Result lstm_act = shell(tmp, "apps/train_lm --model lstm --act relu2 --dry-run");
    CHECK(lstm_act.status == 0);
    CHECK(has(lstm_act, "note: --act changes nothing here (--model lstm)"));

    // The init runs on the model too: a scheme that does not apply to it is refused, by name.
    CHECK(has(vit, "--init mimetic applies to it"));
    CHECK(refused_with("apps/train_vit --init smallemb --dry-run",
                       "smallemb: model ViT has no token embedding followed by a LayerNorm"));
    CHECK(refused_with("apps/train_lm --model lstm --init impulse3 --dry-run", "impulse3: model LSTMLM is not a ViT"));
    // A data-dependent one runs on a random batch of the model's input (no data is read).
    Result lsuv = shell(tmp, "OMP_NUM_THREADS=1 apps/train_lm --init lsuv --depth 2 --dim 64 --heads 2 --dry-run");
    INFO(lsuv.output);
    CHECK(lsuv.status == 0);
    CHECK(has(lsuv, "--init lsuv applies to it (run on a random stand-in batch)"));
}

TEST_CASE("every training command of the docs is accepted by the apps", "[docs]") {
    test::TempDir tmp;
    Result r = shell(tmp, "tools/check_doc_commands.sh");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(has(r, "training command(s) in 4 file(s), all accepted"));
}

TEST_CASE("the doc command check finds a refused flag and two runs sharing an --out", "[docs]") {
    test::TempDir tmp;
    test::write_file(tmp / "doc.md",
                     "# A doc\n"
                     "\n"
                     "    for init in torch mimetic; do\n"
                     "      ./apps/train_lm --dataset ptb --init $init --out runs/a\n"
                     "    done\n"
                     "\n"
                     "Text between the blocks.\n"
                     "\n"
                     "    ./apps/train_vit --dataset cifar10 --init mimetic --pos-scale 2 --out runs/b\n"
                     "\n"
                     "    a block that calls no training app\n"
                     "      is not run\n");
    Result r = shell(tmp, "tools/check_doc_commands.sh " + (tmp / "doc.md"));
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(has(r, "doc.md:9: apps/train_vit --dataset cifar10 --init mimetic --pos-scale 2"));
    CHECK(has(r, "--pos-scale"));
    CHECK(has(r, "doc.md: --out runs/a is given to more than one command"));
    CHECK(has(r, "2 failure(s)"));

    // A script runs whole, from its folder's parent, as bench/reproduce_cpu.sh does.
    test::write_file(tmp / "bench/ok.sh", "set -eu\ncd \"$(dirname \"$0\")/..\"\nmake\n"
                                          "./apps/train_lm --dataset ptb-char --depth 2 --out runs/c\n");
    Result ok = shell(tmp, "tools/check_doc_commands.sh " + (tmp / "bench/ok.sh"));
    INFO(ok.output);
    CHECK(ok.status == 0);
    CHECK(has(ok, "1 training command(s) in 1 file(s)"));
}
