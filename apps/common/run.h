// apps/common/run.h: what every training app shares: the run directory (config.json,
// metrics.jsonl, result.json, checkpoints), the progress display, stop signals, and NaN checks.
//
// Run directory (--out DIR):
//   config.json     every resolved flag, the git commit, the device, the start time
//   metrics.jsonl   one JSON object per line: periodic training lines and every evaluation
//   last.*, best.*  checkpoints (nn/checkpoint.h), written atomically
//   result.json     the final summary
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include "engine/tensor.h"
#include "init/init.h"

namespace nn {
class Module;
class Optimizer;
}

namespace apps {

using json = nlohmann::ordered_json;
class StepFlops;  // apps/common/mfu.h

class RunDir {
public:
    RunDir() = default;
    // Creates it; "" means no output at all. With `replace_run` (--overwrite) the files a run
    // writes there (config.json, metrics.jsonl, result.json, profile.json, vocab.txt, the
    // init/last/best checkpoints and their temporary files) are removed first, and nothing else.
    explicit RunDir(const std::string& dir, bool replace_run = false);
    bool enabled() const { return !dir_.empty(); }
    const std::string& dir() const { return dir_; }
    std::string path(const std::string& name) const { return dir_ + "/" + name; }
    void write_json(const std::string& name, const json& j) const;  // atomically (engine/atomic_file.h)
    void append_metrics(const json& j) const;                        // one line of metrics.jsonl
    // On --resume from the checkpoint of `step`: metrics.jsonl keeps its lines up to that step. A
    // run killed after its last checkpoint (SIGKILL, a crash) wrote lines the resumed run writes
    // again, and perhaps half a line at the end; those go (atomically), and a line says how many.
    void trim_metrics(int64_t step) const;
    // The evaluation of the model before its first step (--eval-init: the metrics line of kind
    // "eval" at step 0, epoch 0), or null. result.json repeats it, also when the run was resumed.
    json init_eval() const;

private:
    std::string dir_;
};

// The commit the binary was built from (the Makefile's `git rev-parse HEAD`, "+dirty" when the tree
// had uncommitted changes; "unknown" when built outside a git checkout).
std::string git_commit();
std::string now_iso8601();
double peak_rss_mb();  // the process's peak resident memory
// The peak of device memory in use (engine::cuda::peak_memory) when `dev` is CUDA, else nothing:
// `line` gets "peak_device_mb" only for a run on the device.
void add_peak_device_mb(json& line, engine::Device dev);
// Returns when the device has done the work queued so far (nothing to wait for on the CPU). The
// trainers call it before a logged step's clock starts: nothing in a CUDA step waits for the device
// (copies to it are staged, engine/cuda/runtime.cu), so the host runs steps ahead, and the logged
// step's read-back would wait for those too: its ms_per_step would hold several steps.
void wait_for_device(engine::Device dev);

// config.json's contents: the app, git commit, device (its description: "cpu", or
// "cuda: NVIDIA H100 ... (sm_90, 132 SMs)"), threads, start time, and every flag's value (given or default).
json run_config(const CLI::App& app, const std::string& app_name, int threads, const std::string& device = "cpu");

// The device this part of the run is on: config's "device", or on --resume its last "resumed" part's.
std::string part_device(const json& config);

// --overwrite: a new run may replace the run already in its --out folder. Without it a new run
// (not --resume) refuses a folder that holds one (its config.json), so that repeating a command
// never mixes two runs' metrics.jsonl or replaces a finished run's checkpoints.
void add_overwrite_flag(CLI::App& app, bool& overwrite);
// Why `out` cannot take this run ("" when it can): it holds a run, and none of --resume,
// --overwrite and --auto-resume was given; or more than one was; or --resume or --auto-resume
// has no --out.
std::string out_dir_conflict(const std::string& out, bool resume, bool overwrite, bool auto_resume);

// --auto-resume: make a command safe to repeat, so that a script of runs can simply be started
// again after an interruption. What it does depends on what --out holds:
//   nothing (no config.json)             a new run;
//   a finished run (result.json)         nothing: the app says so and exits 0;
//   an interrupted run (last checkpoint) --resume;
//   a run stopped before its first checkpoint: a new run in its place (--overwrite).
// (A run stopped by a NaN loss has no result.json: it is continued from its last good checkpoint,
// and being deterministic stops again where it did.)
// A run whose flags differ from this command's (other than those of kMachineFlags: threads,
// device, paths, logging) is refused, naming the first flag that differs: repeating a changed command
// must not skip it as done, nor continue another run's optimizer state with new settings.
void add_auto_resume_flag(CLI::App& app, bool& auto_resume);

// Checks for numeric flags, with a plain message ("--depth: -1 is not >= 0"): CLI11's own
// NonNegativeNumber and PositiveNumber name their range's upper end, a 300-digit number.
extern const CLI::Validator NonNegative;  // >= 0
extern const CLI::Validator Positive;     // > 0

// --dry-run: check the flags (every conflict the app refuses, the model they build, and --init on
// that model: dry_run_init) and print the configuration the run would record in config.json, then
// exit 0 before anything is read or written: no data, no --init-from or --resume checkpoint, no
// --out folder. run_config leaves the flag itself out of config.json (it is not a property of the
// run). tools/check_doc_commands.sh runs every training command of the docs and of
// bench/reproduce_cpu.sh this way.
void add_dry_run_flag(CLI::App& app, bool& dry_run);

// A flag given that changes nothing in this run (`why`: e.g. "--model lstm"): a note on stderr, not
// a refusal, so that one command can serve several models or schedules. Nothing when not given.
void note_unused_flag(const std::string& app_name, const CLI::App& app, const std::string& flag, const std::string& why);

// Between the resolved config and the run, as both trainers do it: --auto-resume's choice (printed
// as `app_name`; it sets `resume` or `overwrite`); on --resume (given or chosen) the flags checked
// against the run's config.json as --auto-resume does, and `config` replaced by that file with this
// part added to its "resumed" list (what the app writes back); then --dry-run's report (`config`, then
// `dry_run_model()`: the model the flags build, or what of it is a stand-in). Returns the app's exit
// status when it stops here (0 for a dry run or a finished run, 2 for a refusal or a model that
// does not build), else -1: go on and run.
int settle_run_start(const std::string& app_name, const std::string& out, json& config, bool auto_resume,
                     bool dry_run, bool& resume, bool& overwrite, const std::function<std::string()>& dry_run_model);

// --device cpu|cuda|auto and (when `precision` is given) --precision fp32|tf32|bf16.
void add_device_flags(CLI::App& app, std::string& device, std::string* precision);
// The device the flags pick. "auto" is cuda when one is there (engine::cuda_device_count() > 0;
// the emulated build counts its emulator), else cpu. On a CUDA device --precision tf32 turns on
// TF32 GEMMs and bf16 bf16-input GEMMs with fp32 accumulation (engine::cuda::set_gemm_precision;
// bf16 is refused on a GPU older than sm_80); on the CPU both only get a note (the CPU computes in
// fp32). `error` is empty when the choice is usable; else the app prints it and exits 2.
struct DeviceChoice {
    engine::Device device = engine::Device::CPU;
    std::string description = "cpu";  // for logs and config.json
    std::string error;
    std::string note;  // printed when not empty (e.g. tf32 or bf16 asked for on the CPU: no effect)
};
DeviceChoice resolve_device(const std::string& device, const std::string& precision = "fp32");

// --cuda-graph on|off (default on): capture the training step into a CUDA graph after one eager
// warm-up step and launch the graph at every step (nn/graph_step.h). It applies on a CUDA device
// to steps of fixed shapes; cuda_graph_applies says whether this run's does (on, and CUDA).
void add_cuda_graph_flag(CLI::App& app, std::string& mode);
bool cuda_graph_applies(const std::string& mode, engine::Device device);
// Applies the choice's precision (call after resolve_device succeeded).
void apply_precision(const DeviceChoice& choice, const std::string& precision);

// The running sum of a training loss (weighted by items or tokens). On the CPU each step's loss is
// read at once (it costs nothing); on a GPU it stays on the device and is added up there, and the
// host reads it (and waits for the device) only in read(): where a metrics line is written, at
// the end of an epoch, or at a stop. A NaN since the last read shows in sum().
class LossMeter {
public:
    explicit LossMeter(bool on_device, double sum = 0, double weight = 0)
        : deferred_(on_device), sum_(sum), weight_(weight) {}
    void add(const engine::Tensor& loss, double weight);  // loss: a one-element tensor
    float read();                                         // reads what was added; the latest loss
    bool deferred() const { return deferred_; }
    double sum() const { return sum_; }        // Σ loss·weight over what was read
    double weight() const { return weight_; }  // Σ weight over what was read
    double mean() const { return weight_ > 0 ? sum_ / weight_ : 0.0; }

private:
    bool deferred_;
    engine::Tensor pending_, latest_;
    double pending_weight_ = 0, sum_, weight_;
    float last_ = 0.f;
};
// --init (its help lists every registered scheme) and every option of the schemes
// (--mimetic-alpha1, --impulse-iters, --act-prob, ...), with the specs' defaults. init_note joins
// --init's help line (e.g. " (LayerScale is a model option: --layerscale)").
void add_init_flags(CLI::App& app, std::string& scheme, init::Options& opt, const std::string& init_note = "");
// --act: the MLP activation of a transformer (`which`: the models it applies to), one of
// nn::activation_names().
void add_act_flag(CLI::App& app, std::string& act, const std::string& which);
// --init-from CKPT: after --init, every weight is replaced by a checkpoint's (RUN/last.safetensors,
// a model of the same flags; nn::load_weights), and the report says so. The optimizer and the
// schedule start fresh: a two-stage run, or a fine-tuning. Nothing happens for an empty path.
void add_init_from_flag(CLI::App& app, std::string& path);
void init_from_checkpoint(nn::Module& model, const std::string& path, init::Report& report);
// --dry-run's check of --init: the scheme runs on the model the flags build, so one that cannot
// apply to it (smallemb on a ViT, impulse on an LSTM) is refused before any data is read, as the
// run would refuse it at its start. A data-dependent scheme sees `stand_in` (a random batch of the
// model's input shape, not the data); impulse's Adam fit takes a few steps, not --impulse-iters:
// the check is that the scheme applies, not its result. Returns a line for the dry run's report.
std::string dry_run_init(nn::Module& model, const std::string& scheme, init::Options opt,
                         const init::InitData& stand_in);
// RUN/init.safetensors: the weights a new run starts from (after --init and --init-from), with the
// scheme and the --init-from checkpoint (when there is one) in its metadata. To measure how far
// training moved each weight, or to edit the start (tools/edit_checkpoint.py) and train from the
// result with --init-from. Nothing without --out.
void save_init_weights(const RunDir& out, const nn::Module& model, const std::string& scheme,
                       const std::string& init_from);
// The eager training step after the forward, as both trainers take it: the backward from `loss`,
// the gradient norm, the optimizer's update. With clip > 0 the gradients are clipped to that norm;
// otherwise the norm is measured only when `need_norm` (a logged step: it costs a pass over the
// gradients). Returns the norm before clipping when `need_norm` or clipping on the CPU, else 0: on a
// GPU the clipping stays on the device and the host reads the norm only for a logged step.
float backward_and_update(const engine::Tensor& loss, const std::vector<engine::Tensor>& params, nn::Optimizer& opt,
                          float clip, bool need_norm);
// A "train" line of metrics.jsonl with the fields both trainers log (step, epoch, lr, loss,
// grad_norm, ms_per_step, peak_rss_mb, items_per_s; peak_device_mb on a GPU; gflop and mfu); an
// app appends its own fields after them.
json train_metrics(int64_t step, double epoch, float lr, float loss, float grad_norm, double ms, double items,
                   engine::Device dev, const StepFlops& flops);

// The message for a loss (`what`: "loss", "valid loss", ...) that is no longer finite, naming the
// last checkpoint the run wrote (if any); the caller stops the run.
void report_nan_loss(const std::string& app_name, float loss, int epoch, int64_t step, const RunDir& out,
                     const std::string& what = "loss");
// At a stop or an epoch's end: reads what `meter` holds (on a GPU the losses come back only now)
// and, when the check is on and their sum is not finite, reports it (report_nan_loss): false then,
// and the caller stops the run (exit 1).
bool epoch_loss_finite(const std::string& app_name, LossMeter& meter, bool nan_check, int epoch, int64_t step,
                       const RunDir& out);
// Before writing checkpoint `name`: true when the model's values are all finite (or the check is
// off); else says which tensor is not, that `name` is not written, and which checkpoint is the last
// good one, and the caller stops the run (exit 1) instead of saving a diverged model.
bool weights_finite_for_checkpoint(const std::string& app_name, const nn::Module& model, const std::string& name,
                                   int epoch, int64_t step, const RunDir& out, bool nan_check);

// Ctrl-C and SIGTERM set a flag; the training loop finishes its step, checkpoints and exits
// 130 / 143. A second Ctrl-C exits at once.
void install_stop_handlers();
bool stop_requested();
int stop_exit_code();
// After a stop's checkpoint: says where the run stopped and how to continue it; returns the exit
// status (stop_exit_code()).
int report_stop(const std::string& app_name, int epoch, int64_t batch, const RunDir& out);

// A one-line progress bar with rate and ETA on a terminal; on a pipe or file, a plain line
// every `plain_every` updates.
class Progress {
public:
    Progress(std::string label, int64_t total, std::string unit, int plain_every = 50);
    void update(int64_t done, int64_t items, const std::string& extra);  // `items` processed so far
    void finish();

private:
    std::string label_, unit_;
    int64_t total_;
    int plain_every_, calls_ = 0;
    bool tty_;
    std::chrono::steady_clock::time_point start_;
};

}  // namespace apps
