// apps/common/run.cpp: run directory, signals, progress display.
#include "apps/common/run.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include "engine/device.h"
#include "engine/atomic_file.h"
#include "engine/autograd.h"
#ifdef ENGINE_CUDA
#include "engine/cuda/matmul.h"
#include "engine/cuda/runtime.h"
#endif
#include "engine/error.h"
#include "engine/ops.h"
#include "engine/profile.h"
#include "apps/common/mfu.h"
#include "nn/layers.h"
#include "nn/checkpoint.h"
#include "nn/optim.h"
#include "init/init.h"
// The commit this binary was built from: the Makefile writes it into build/<config>/gen/.
#if __has_include("git_commit.h")
#include "git_commit.h"
#endif
#ifndef INITLAB_GIT_COMMIT
#define INITLAB_GIT_COMMIT "unknown"
#endif

namespace apps {

namespace fs = std::filesystem;

// --overwrite: the files a run writes, and their temporary files; nothing else in the folder.
static void remove_run_files(const std::string& out) {
    std::vector<std::string> names = {"config.json", "metrics.jsonl", "result.json", "profile.json", "vocab.txt",
                                      "init.safetensors"};
    for (const char* checkpoint : {"last", "best"})
        for (const char* part : {".safetensors", ".optim.safetensors", ".carry.safetensors"})
            names.push_back(std::string(checkpoint) + part);
    for (const std::string& name : names)
        for (const std::string& file : {name, name + ".tmp"}) {
            std::error_code ec;
            fs::remove(fs::path(out) / file, ec);
            engine::check(!ec, "--overwrite: cannot remove {} ({})", (fs::path(out) / file).string(), ec.message());
        }
}

RunDir::RunDir(const std::string& dir, bool replace_run) : dir_(dir) {
    if (dir_.empty()) return;
    if (replace_run) remove_run_files(dir_);
    std::error_code ec;
    fs::create_directories(dir_, ec);
    engine::check(!ec && fs::is_directory(dir_), "--out {}: cannot create the directory ({})", dir_, ec.message());
}

void RunDir::write_json(const std::string& name, const json& j) const {
    if (!enabled()) return;
    engine::write_file_atomically(path(name), j.dump(2) + "\n", "run directory");
}

void RunDir::append_metrics(const json& j) const {
    if (!enabled()) return;
    std::ofstream f(path("metrics.jsonl"), std::ios::app);
    f << j.dump() << "\n";
    f.close();
    engine::check(!f.fail(), "cannot append to {} (disk full?)", path("metrics.jsonl"));
}

void RunDir::trim_metrics(int64_t step) const {
    if (!enabled() || !fs::exists(path("metrics.jsonl"))) return;
    std::string kept, line;
    int64_t later = 0, unreadable = 0;
    {
        std::ifstream in(path("metrics.jsonl"));
        while (std::getline(in, line)) {
            json j = json::parse(line, nullptr, false);
            if (j.is_discarded() || !j.is_object()) {
                unreadable++;
            } else if (j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() > step) {
                later++;
            } else {
                kept += line + "\n";
            }
        }
    }
    if (later + unreadable == 0) return;
    engine::write_file_atomically(path("metrics.jsonl"), kept, "resume");
    std::printf("resume: removed %lld line(s) of %s written after the checkpoint (step %lld)%s\n", (long long)later,
                path("metrics.jsonl").c_str(), (long long)step,
                unreadable ? fmt::format(" and {} unreadable (cut short)", unreadable).c_str() : "");
}

json RunDir::init_eval() const {
    if (!enabled()) return nullptr;
    std::ifstream in(path("metrics.jsonl"));
    for (std::string line; std::getline(in, line);) {
        json j = json::parse(line, nullptr, false);
        if (j.is_object() && j.value("kind", "") == "eval" && j.value("step", -1) == 0 && j.value("epoch", -1.0) == 0)
            return j;
    }
    return nullptr;
}

std::string git_commit() { return INITLAB_GIT_COMMIT; }

std::string now_iso8601() {
    std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return buf;
}

double peak_rss_mb() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss / 1024.0;  // KiB on Linux
}

void wait_for_device(engine::Device dev) {
#ifdef ENGINE_CUDA
    if (dev == engine::Device::CUDA) engine::cuda::synchronize();
#else
    (void)dev;
#endif
}

void add_peak_device_mb(json& line, engine::Device dev) {
#ifdef ENGINE_CUDA
    if (dev == engine::Device::CUDA) line["peak_device_mb"] = (double)engine::cuda::peak_memory() / (1 << 20);
#else
    (void)line;
    (void)dev;
#endif
}

json run_config(const CLI::App& app, const std::string& app_name, int threads, const std::string& device) {
    json config = {{"app", app_name}, {"git_commit", git_commit()}, {"device", device}, {"threads", threads},
                   {"started", now_iso8601()}};
    for (const CLI::Option* o : app.get_options()) {
        if (o->get_name() == "--help" || o->get_name() == "--dry-run") continue;
        auto r = o->results();
        config[o->get_name()] = r.empty() ? o->get_default_str() : r.back();
    }
    return config;
}

std::string part_device(const json& config) {
    if (config.contains("resumed") && config["resumed"].is_array() && !config["resumed"].empty())
        return config["resumed"].back().value("device", "cpu");
    return config.value("device", "cpu");
}

void add_overwrite_flag(CLI::App& app, bool& overwrite) {
    app.add_flag("--overwrite", overwrite,
                 "replace the run already in --out (without it a new run refuses a folder that holds one)");
}

std::string out_dir_conflict(const std::string& out, bool resume, bool overwrite, bool auto_resume) {
    if ((int)resume + (int)overwrite + (int)auto_resume > 1)
        return "--resume continues the run in --out, --overwrite replaces it, --auto-resume picks one of them: give one";
    if (resume && out.empty()) return "--resume needs --out (the run directory to continue)";
    if (auto_resume && out.empty()) return "--auto-resume needs --out (the run directory to start or continue)";
    if (out.empty() || resume || overwrite || auto_resume || !fs::exists(fs::path(out) / "config.json")) return "";
    return "--out " + out + " already holds a run (config.json): --resume continues it, --overwrite replaces it, "
           "or give another --out";
}

void add_auto_resume_flag(CLI::App& app, bool& auto_resume) {
    app.add_flag("--auto-resume", auto_resume,
                 "start the run in --out, or continue it if it was interrupted, or do nothing if it finished "
                 "(refused if it ran with other flags): a script of runs can be started again");
}

// The flags a run may change between its parts: where it runs and how fast, where its data and
// folder are (paths differ between machines), what it logs, and how it was started. Every other
// flag must be the run's own.
static const char* const kMachineFlags[] = {"--threads",   "--workers",      "--device",   "--cuda-graph",
                                            "--data-dir",  "--out",          "--profile",  "--log-every",
                                            "--no-nan-check", "--resume",    "--overwrite", "--auto-resume"};

namespace {
struct AutoResume {
    bool skip = false, resume = false, overwrite = false;
    std::string error;  // the app refuses the command with it
    std::string note;   // what --auto-resume chose, for the log
};
}  // namespace

static bool machine_flag(const std::string& flag) {
    return std::find(std::begin(kMachineFlags), std::end(kMachineFlags), flag) != std::end(kMachineFlags);
}

// Two values of a flag are the same when their text is, or when both are numbers of equal value
// (--lr 1e-3 and a stored "0.001").
static bool same_value(const json& a, const json& b) {
    if (a == b) return true;
    if (!a.is_string() || !b.is_string()) return false;
    auto number = [](const std::string& s, double& v) {
        char* end = nullptr;
        v = std::strtod(s.c_str(), &end);
        return !s.empty() && end == s.c_str() + s.size();
    };
    double x = 0, y = 0;
    return number(a.get<std::string>(), x) && number(b.get<std::string>(), y) && x == y;
}

// The stored config.json of the run in `out` (`flag` names the flag asking: --auto-resume or
// --resume). `error` says why it cannot be used: not JSON, or not this app's run (its flags would
// compare as nothing); or the first flag whose value differs from this command's, kMachineFlags
// aside (a flag newer than the run is not compared).
static json stored_config(const std::string& out, const json& config, const std::string& flag, std::string& error) {
    const fs::path stored_path = fs::path(out) / "config.json";
    json stored;
    try {
        stored = json::parse(std::ifstream(stored_path));
    } catch (const json::exception& e) {
        error = flag + ": " + stored_path.string() + " is not JSON (" + e.what() + "); --overwrite replaces the run";
        return stored;
    }
    if (!stored.is_object() || !stored.contains("app") || stored["app"] != config["app"]) {
        error = flag + ": " + stored_path.string() + " is not a " + config["app"].get<std::string>() +
                " run's config (its \"app\" is " +
                (stored.is_object() && stored.contains("app") ? stored["app"].dump() : "missing") +
                "); --overwrite replaces it, or give another --out";
        return stored;
    }
    for (const auto& [name, value] : config.items()) {
        if (name.rfind("--", 0) != 0 || !stored.contains(name) || machine_flag(name)) continue;
        if (!same_value(stored[name], value)) {
            error = flag + ": " + out + " holds a run with other flags: " + name + " " + stored[name].dump() +
                    " there, " + value.dump() + " here (";
            error += flag == "--resume"
                         ? "a run continues with its own flags; to go on from its weights with others, start a new "
                           "run with --init-from " + (fs::path(out) / "last.safetensors").string() + ")"
                         : "--overwrite replaces it, or give another --out)";
            return stored;
        }
    }
    return stored;
}

static AutoResume choose_auto_resume(const std::string& out, const json& config) {
    AutoResume r;
    fs::path dir(out);
    if (!fs::exists(dir / "config.json")) {
        r.note = "--auto-resume: no run in " + out + " yet: starting it";
        return r;
    }
    stored_config(out, config, "--auto-resume", r.error);
    if (!r.error.empty()) return r;
    if (fs::exists(dir / "result.json")) {
        r.skip = true;
        r.note = "--auto-resume: the run in " + out + " has finished (result.json): nothing to do";
    } else if (fs::exists(dir / "last.safetensors")) {
        r.resume = true;
        r.note = "--auto-resume: continuing the interrupted run in " + out;
    } else {
        r.overwrite = true;
        r.note = "--auto-resume: the run in " + out + " stopped before its first checkpoint: starting it again";
    }
    return r;
}

static CLI::Validator number_above(bool or_equal, const char* description) {
    return CLI::Validator(
        [or_equal](std::string& text) -> std::string {
            double v = 0;
            if (!CLI::detail::lexical_cast(text, v)) return "'" + text + "' is not a number";
            if (or_equal ? v >= 0 : v > 0) return "";
            return text + (or_equal ? " is not >= 0" : " is not > 0");
        },
        description);
}
const CLI::Validator NonNegative = number_above(true, "NONNEGATIVE");
const CLI::Validator Positive = number_above(false, "POSITIVE");

void add_dry_run_flag(CLI::App& app, bool& dry_run) {
    app.add_flag("--dry-run", dry_run,
                 "check the flags, the model they build and that --init applies to it, print the resolved "
                 "configuration, and exit without reading data or writing anything");
}

// --resume: the run's own config.json with this part noted in its "resumed" list (when it started,
// the commit, the device and threads, and the machine flags that changed); "" and `error` when the
// run's flags differ from this command's. A run's record stays its own: its flags, its start.
static json resumed_config(const std::string& out, const json& config, std::string& error) {
    if (!fs::exists(fs::path(out) / "config.json")) return config;  // a run from before config.json
    json stored = stored_config(out, config, "--resume", error);
    if (!error.empty()) return json();
    json part = {{"started", config.value("started", "")}, {"git_commit", config.value("git_commit", "")},
                 {"device", config.value("device", "")}, {"threads", config.value("threads", 0)}};
    for (const auto& [name, value] : config.items())
        if (machine_flag(name) && name != "--resume" && name != "--auto-resume" &&
            (!stored.contains(name) || stored[name] != value))
            part[name] = value;
    if (!stored.contains("resumed") || !stored["resumed"].is_array()) stored["resumed"] = json::array();
    stored["resumed"].push_back(part);
    return stored;
}

void note_unused_flag(const std::string& app_name, const CLI::App& app, const std::string& flag, const std::string& why) {
    if (app.count(flag))
        std::fprintf(stderr, "%s: note: %s changes nothing here (%s); config.json records it\n", app_name.c_str(),
                     flag.c_str(), why.c_str());
}

int settle_run_start(const std::string& app_name, const std::string& out, json& config, bool auto_resume,
                     bool dry_run, bool& resume, bool& overwrite, const std::function<std::string()>& dry_run_model) {
    auto refuse = [&](const std::string& why) {
        std::fprintf(stderr, "%s: %s\n", app_name.c_str(), why.c_str());
        return 2;
    };
    if (auto_resume) {
        AutoResume r = choose_auto_resume(out, config);
        if (!r.error.empty()) return refuse(r.error);
        std::printf("%s: %s\n", app_name.c_str(), r.note.c_str());
        resume = r.resume;
        overwrite = r.overwrite;
        if (r.skip && !dry_run) return 0;
    }
    if (resume && !dry_run) {
        std::string error;
        json merged = resumed_config(out, config, error);
        if (!error.empty()) return refuse(error);
        config = merged;
    }
    if (!dry_run) return -1;
    std::string model_line;
    try {
        model_line = dry_run_model();
    } catch (const engine::Error& e) {
        return refuse(e.what());
    }
    std::printf("%s\n", config.dump(2).c_str());
    std::printf("%s: model: %s\n", app_name.c_str(), model_line.c_str());
    std::printf("%s: --dry-run: the flags are valid; nothing was read or written\n", app_name.c_str());
    return 0;
}

void add_device_flags(CLI::App& app, std::string& device, std::string* precision) {
    app.add_option("--device", device,
                   "cpu | cuda | auto (cuda when a GPU is there, else cpu). The model is built and initialized on "
                   "the CPU, then moved")
        ->capture_default_str()->check(CLI::IsMember({"auto", "cpu", "cuda"}));
    if (precision)
        app.add_option("--precision", *precision,
                       "fp32 | tf32 (TF32 tensor-core GEMMs on the GPU) | bf16 (GEMM inputs rounded to bf16 on the GPU, "
                       "fp32 accumulation; weights, optimizer, activations and the loss stay fp32); the CPU computes "
                       "in fp32")
            ->capture_default_str()->check(CLI::IsMember({"fp32", "tf32", "bf16"}));
}

void add_cuda_graph_flag(CLI::App& app, std::string& mode) {
    app.add_option("--cuda-graph", mode,
                   "on | off: on a CUDA device, capture the training step into a CUDA graph after one eager step and "
                   "replay it (fewer kernel launches from the host; the same results bit for bit); steps of another "
                   "shape (a last partial batch) run eagerly. No effect on the CPU")
        ->capture_default_str()->check(CLI::IsMember({"on", "off"}));
}

bool cuda_graph_applies(const std::string& mode, engine::Device device) {
    return mode == "on" && device == engine::Device::CUDA;
}

DeviceChoice resolve_device(const std::string& device, const std::string& precision) {
    DeviceChoice c;
    bool have_cuda = engine::cuda_device_count() > 0;
    if (device == "cuda" && !engine::built_with_cuda()) {
        c.error = "--device cuda: this build has no CUDA backend (build with nvcc found, or make emu for the emulator)";
        return c;
    }
    if (device == "cuda" && !have_cuda) {
        c.error = "--device cuda: no CUDA device found (--device cpu or auto runs on the CPU)";
        return c;
    }
    if (device == "cuda" || (device == "auto" && have_cuda)) c.device = engine::Device::CUDA;
    if ((precision == "tf32" || precision == "bf16") && c.device != engine::Device::CUDA)
        c.note = "--precision " + precision + " has no effect on the CPU (it computes in fp32)";
#ifdef ENGINE_CUDA
    if (c.device == engine::Device::CUDA) {
        c.description = engine::cuda::device_description();
        // bf16 GEMMs need bf16 tensor cores (sm_80 and newer); an older GPU would fail at the
        // first GEMM, so refuse it here with the reason.
        if (precision == "bf16" && !engine::cuda::bf16_supported()) {
            c.error = "--precision bf16: " + c.description +
                      " has no bf16 tensor cores (compute capability 8.0 or newer needed); use fp32";
            return c;
        }
    }
#endif
    return c;
}

void apply_precision(const DeviceChoice& choice, const std::string& precision) {
#ifdef ENGINE_CUDA
    if (choice.device == engine::Device::CUDA) {
        using engine::cuda::GemmPrecision;
        engine::cuda::set_gemm_precision(precision == "bf16"   ? GemmPrecision::bf16
                                         : precision == "tf32" ? GemmPrecision::tf32
                                                               : GemmPrecision::fp32);
    }
#endif
}

void LossMeter::add(const engine::Tensor& loss, double weight) {
    if (!deferred_) {
        last_ = loss.item();
        sum_ += (double)last_ * weight;
        weight_ += weight;
        return;
    }
    engine::NoGrad ng;
    latest_ = loss.detach();
    engine::Tensor w = engine::mul(latest_, (float)weight);
    pending_ = pending_.defined() ? engine::add(pending_, w) : w;
    pending_weight_ += weight;
}

float LossMeter::read() {
    if (pending_.defined()) {
        last_ = latest_.item();
        sum_ += (double)pending_.item();
        weight_ += pending_weight_;
        pending_ = latest_ = engine::Tensor();
        pending_weight_ = 0;
    }
    return last_;
}

void add_init_from_flag(CLI::App& app, std::string& path) {
    app.add_option("--init-from", path, "after --init, replace every weight by a checkpoint's (RUN/last.safetensors, "
                                        "a model of the same flags); the optimizer and schedule start fresh");
}

void init_from_checkpoint(nn::Module& model, const std::string& path, init::Report& report) {
    if (path.empty()) return;
    try {
        nn::load_weights(path, model);
    } catch (const engine::Error& e) {
        engine::fail("--init-from {}: {}", path, e.what());
    }
    report.say("weights replaced by the checkpoint " + path);
}

std::string dry_run_init(nn::Module& model, const std::string& scheme, init::Options opt,
                         const init::InitData& stand_in) {
    opt.impulse_iters = std::min(opt.impulse_iters, 5);
    init::apply(model, scheme, opt, &stand_in);
    return fmt::format("--init {} applies to it{}", scheme,
                       init::needs_data(scheme) ? " (run on a random stand-in batch)" : "");
}

void save_init_weights(const RunDir& out, const nn::Module& model, const std::string& scheme,
                       const std::string& init_from) {
    if (!out.enabled()) return;
    nn::Metadata meta{{"init", scheme}, {"step", "0"}};
    if (!init_from.empty()) meta["init_from"] = init_from;
    nn::save_checkpoint(out.path("init"), model, nullptr, meta);
}

void add_act_flag(CLI::App& app, std::string& act, const std::string& which) {
    app.add_option("--act", act, which + ": the MLPs' activation: gelu | relu | relu2 (squared ReLU) | silu")
        ->capture_default_str()->check(CLI::IsMember(nn::activation_names()));
}

void add_init_flags(CLI::App& app, std::string& scheme, init::Options& o, const std::string& init_note) {
    std::string help = "initialization scheme(s), '+' composes, applied left to right" + init_note + ":";
    for (auto& s : init::schemes()) help += "\n  " + s.name + ": " + s.summary;
    app.add_option("--init", scheme, help)->capture_default_str();
    app.add_option("--gain", o.gain, "xavier / kaiming / lecun / orthogonal gain")->capture_default_str();
    app.add_option("--mimetic-alpha1", o.mimetic_alpha1, "mimetic α₁ (Q/K noise)")->capture_default_str();
    app.add_option("--mimetic-beta1", o.mimetic_beta1, "mimetic β₁ (Q/K identity)")->capture_default_str();
    app.add_option("--mimetic-alpha2", o.mimetic_alpha2, "mimetic α₂ (V/proj noise)")->capture_default_str();
    app.add_option("--mimetic-beta2", o.mimetic_beta2, "mimetic β₂ (V/proj −identity)")->capture_default_str();
    app.add_option("--mimetic-noise", o.mimetic_noise, "mimetic Z: normal N(0,1/d) | uniform (same variance)")
        ->capture_default_str()->check(CLI::IsMember({"normal", "uniform"}));
    app.add_flag("!--no-mimetic-qk", o.mimetic_qk, "mimetic ablation: leave Q/K at their earlier values");
    app.add_flag("!--no-mimetic-vo", o.mimetic_vo, "mimetic ablation: leave V/proj at their earlier values");
    app.add_option("--impulse-iters", o.impulse_iters, "impulse: Adam steps of the fit")->capture_default_str()
        ->check(apps::Positive);
    app.add_option("--impulse-lr", o.impulse_lr, "impulse: Adam learning rate of the fit")->capture_default_str()
        ->check(apps::Positive);
    app.add_flag("--impulse-per-layer", o.impulse_per_layer, "impulse: a new fit for every layer");
    app.add_option("--closed-rcond", o.closed_rcond,
                   "impulse3-closed: drop singular values of LN(PE) below this × the largest (1e-5: only what "
                   "float32 cannot resolve; 0.1: sharp maps)")
        ->capture_default_str()->check(CLI::Range(0.f, 1.f));
    app.add_option("--closed-pe-scale", o.closed_pe_scale,
                   "impulse3-closed: multiply a learned position embedding by this after the solve (the "
                   "authors' norm_p; a fixed sin-cos PE is scaled by --pe-scale instead)")
        ->capture_default_str();
    app.add_option("--lsuv-tol", o.lsuv_tol, "lsuv: tolerance on |std − 1|")->capture_default_str()
        ->check(apps::Positive);
    app.add_option("--lsuv-max-iters", o.lsuv_max_iters, "lsuv: rescaling rounds per layer")->capture_default_str()
        ->check(apps::Positive);
    app.add_option("--act-prob", o.act_prob, "relu-quantile: fraction of units active on the init batch")
        ->capture_default_str()->check(CLI::Range(0.f, 1.f));
    app.add_option("--goal-std", o.goal_std, "relu-quantile: post-activation std")->capture_default_str()
        ->check(apps::Positive);
    app.add_flag("!--no-rq-bias", o.rq_bias, "relu-quantile ablation: biases 0 instead of the quantile");
    app.add_flag("!--no-rq-scale", o.rq_scale, "relu-quantile ablation: no per-unit scaling to --goal-std");
    app.add_option("--output-logit", o.output_logit,
                   "relu-quantile, output-fit: fit the output layer by least squares to logits ±this on the init "
                   "batch (image models; 0: off)")
        ->capture_default_str()->check(apps::NonNegative);
    app.add_option("--output-ridge", o.output_ridge,
                   "relu-quantile, output-fit: ridge penalty on the fitted output layer: W minimizes mean|XW - T|² + "
                   "this·|W|² (0: plain least squares)")
        ->capture_default_str()->check(apps::NonNegative);
    app.add_option("--tfixup-layers", o.tfixup_layers, "t-fixup: N in 0.67·N^(−1/4) (0: the model's depth)")
        ->capture_default_str()->check(apps::NonNegative);
}

float backward_and_update(const engine::Tensor& loss, const std::vector<engine::Tensor>& params, nn::Optimizer& opt,
                          float clip, bool need_norm) {
    loss.backward();
    float norm = 0.f;
    if (clip > 0 && !params.empty() && params.front().is_cuda()) {
        // On a GPU the norm stays on the device unless the log line wants it: reading it every step
        // would make the host wait for backward before it could queue the next step's kernels.
        engine::Tensor norm_and_scale = nn::clip_grad_norm_device(params, clip);
        if (need_norm) norm = norm_and_scale.to(engine::Device::CPU).data_f32()[0];
    } else if (clip > 0) {
        norm = nn::clip_grad_norm(params, clip);
    } else if (need_norm) {
        norm = nn::grad_norm(params);
    }
    engine::profile::boundary("gradient norm, clipping", engine::profile::Phase::Outside);
    opt.step();
    engine::profile::boundary("optimizer step", engine::profile::Phase::Outside);
    return norm;
}

json train_metrics(int64_t step, double epoch, float lr, float loss, float grad_norm, double ms, double items,
                   engine::Device dev, const StepFlops& flops) {
    json line = {{"kind", "train"}, {"step", step}, {"epoch", epoch}, {"lr", lr}, {"loss", loss},
                 {"grad_norm", grad_norm}, {"ms_per_step", ms}, {"peak_rss_mb", peak_rss_mb()},
                 {"items_per_s", items / (ms / 1000.0)}};
    add_peak_device_mb(line, dev);
    flops.add_to(line, ms);
    return line;
}

// The checkpoint a stopped run can go on from, as the messages name it.
static std::string last_good_checkpoint(const RunDir& out) {
    if (!out.enabled()) return "(none: no --out)";
    const std::string last = out.path("last.safetensors");
    return fs::exists(last) ? last : "(none written yet)";
}

void report_nan_loss(const std::string& app_name, float loss, int epoch, int64_t step, const RunDir& out,
                     const std::string& what) {
    std::fprintf(stderr, "\n%s: %s is %f at epoch %d, step %lld; stopping. Last good checkpoint: %s\n",
                 app_name.c_str(), what.c_str(), loss, epoch, (long long)step, last_good_checkpoint(out).c_str());
}

bool epoch_loss_finite(const std::string& app_name, LossMeter& meter, bool nan_check, int epoch, int64_t step,
                       const RunDir& out) {
    meter.read();
    if (!nan_check || std::isfinite(meter.sum())) return true;
    report_nan_loss(app_name, (float)meter.sum(), epoch, step, out);
    return false;
}

bool weights_finite_for_checkpoint(const std::string& app_name, const nn::Module& model, const std::string& name,
                                   int epoch, int64_t step, const RunDir& out, bool nan_check) {
    if (!nan_check || !out.enabled()) return true;
    const std::string bad = nn::first_non_finite(model);
    if (bad.empty()) return true;
    std::fprintf(stderr,
                 "\n%s: %s holds a NaN or an infinity at epoch %d, step %lld: the run diverged; not writing %s, "
                 "stopping. Last good checkpoint: %s\n",
                 app_name.c_str(), bad.c_str(), epoch, (long long)step, out.path(name).c_str(),
                 last_good_checkpoint(out).c_str());
    return false;
}

static std::atomic<int> g_signal{0};

static void on_signal(int sig) {
    if (g_signal.load() != 0) std::_Exit(128 + sig);  // second signal: give up at once
    g_signal = sig;
}

void install_stop_handlers() {
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
}

bool stop_requested() { return g_signal.load() != 0; }
int stop_exit_code() { return 128 + g_signal.load(); }

int report_stop(const std::string& app_name, int epoch, int64_t batch, const RunDir& out) {
    std::fprintf(stderr, "%s: stopped at epoch %d, batch %lld; checkpoint %s (continue with --resume)\n",
                 app_name.c_str(), epoch, (long long)batch, out.enabled() ? out.path("last").c_str() : "(none: no --out)");
    return stop_exit_code();
}

Progress::Progress(std::string label, int64_t total, std::string unit, int plain_every)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), plain_every_(plain_every),
      tty_(isatty(fileno(stdout))), start_(std::chrono::steady_clock::now()) {}

void Progress::update(int64_t done, int64_t items, const std::string& extra) {
    calls_++;
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    double rate = secs > 0 ? items / secs : 0;
    double eta = done > 0 ? secs * (total_ - done) / done : 0;
    if (tty_) {
        int width = 24, fill = total_ > 0 ? (int)(width * done / total_) : 0;
        std::printf("\r%s [%s%s] %lld/%lld %.0f %s/s ETA %.0fs %s\033[K", label_.c_str(), std::string(fill, '#').c_str(),
                    std::string(width - fill, '.').c_str(), (long long)done, (long long)total_, rate, unit_.c_str(),
                    eta, extra.c_str());
        std::fflush(stdout);
    } else if (calls_ % plain_every_ == 0 || done == total_) {
        std::printf("%s %lld/%lld %.0f %s/s ETA %.0fs %s\n", label_.c_str(), (long long)done, (long long)total_, rate,
                    unit_.c_str(), eta, extra.c_str());
        std::fflush(stdout);
    }
}

void Progress::finish() {
    if (tty_) std::printf("\n");
}

}  // namespace apps
