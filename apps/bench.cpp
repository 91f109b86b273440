// apps/bench.cpp: time full training steps (forward, backward, AdamW) of the model families.
//
//   ./apps/bench vit --dim 192 --depth 6 --heads 3 --patch 4 --batch 64 --steps 5 --device cpu
//   ./apps/bench lm|gau|lstm --dim 256 --depth 4 --seq 128 --batch 16
//   ./apps/bench convmixer --dim 256 --depth 8 --kernel 9 --patch 2 --batch 64   (ConvMixer-256/8)
//   ./apps/bench vit --device cuda --precision tf32   (or bf16: bf16-input GEMMs, fp32 accumulation)
//
// On a GPU the model is built on the CPU and moved, the inputs are made on the CPU and copied once,
// and each timed step ends with a device synchronize (the kernels are asynchronous).
//
// Prints one JSON line: the config, ms_per_step (median over --steps timed steps after --warmup
// untimed ones), items_per_s (images or tokens), peak_rss_mb, peak_tensor_mb (the host memory
// CPU tensors held at their peak: peak_rss_mb less the libraries and the allocator's slack), and
// peak_device_mb on a GPU (the device memory pool's peak in use), and there cudnn_calls (calls that
// went through cuDNN in the whole run: 0 where the own kernels ran) and, for vit and lm,
// attention_kernels: the attention path the run took ("unfused", with "edge-keys" and "pointers"
// where those ran, or "flash" with fp32 / tf32 / bf16 and "async", "narrow-fwd" and "split-dq"
// where those ran; engine/cuda/flash_attention.h), with INITLAB_GEMM_AUTOTUNE=1 gemm_tunings
// (the GEMM shapes tuned in the process), and with INITLAB_LT_BIAS=1 lt_bias_calls (the GEMMs of
// the run that took a cuBLASLt bias or bias-gradient epilogue). tools/bench_torch.py builds
// the same models in PyTorch and prints the same fields, for a same-machine comparison.
//
// --profile N: after the timed steps, N more steps under the op-level profiler (engine/profile.h):
// its table on stderr and its JSON as the line's "profile" field (the timed steps run without it).
//
// --cuda-graph on (the default on CUDA; the LSTM's state is carried from step to step in buffers
// that stay, nn::CarriedState): the eager steps are timed first (ms_per_step_eager), then the same step
// captured into a CUDA graph (nn/graph_step.h; its warm-up and capture run as untimed steps) is
// timed the same way (ms_per_step_graph); ms_per_step is the graph's. The GEMM FLOPs (and the MFU)
// are those of the eager step: a replay calls no op on the host to count them.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <omp.h>
#include "apps/common/mfu.h"
#include "apps/common/profile_report.h"
#include "apps/common/run.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "engine/profile.h"
#include "engine/rng.h"
#include "nn/convmixer.h"
#include "nn/gau.h"
#include "nn/lstm.h"
#include "nn/graph_step.h"
#include "nn/optim.h"
#include "nn/transformer.h"
#ifdef ENGINE_CUDA
#include "engine/cuda/cudnn.h"
#include "engine/cuda/flash_attention.h"
#include "engine/cuda/matmul.h"
#include "engine/cuda/nn.h"
#include "engine/cuda/runtime.h"
#endif

using namespace engine;
using namespace nn;

#ifdef ENGINE_CUDA
// The attention path of a run, from the backend's call counters before and after it: no fused
// call is the unfused path (with "edge-keys" and "pointers" where those ran: engine/cuda/nn.h,
// engine/cuda/matmul.h); else the fused kernels' kind.
struct AttentionCounters {
    engine::cuda::FlashAttentionCalls flash = engine::cuda::flash_attention_calls();
    uint64_t edge = engine::cuda::attention_edge_key_calls(), pointers = engine::cuda::pointer_batch_calls();
};
static std::string attention_kernels(const AttentionCounters& b, const AttentionCounters& a) {
    const engine::cuda::FlashAttentionCalls &before = b.flash, &after = a.flash;
    if (after.forward == before.forward) {
        std::string path = "unfused";
        if (a.edge > b.edge) path += " edge-keys";
        if (a.pointers > b.pointers) path += " pointers";
        return path;
    }
    if (after.tc_forward == before.tc_forward) return "flash fp32";
    std::string path = after.bf16_forward > before.bf16_forward ? "flash bf16" : "flash tf32";
    if (after.async_forward > before.async_forward) path += " async";
    if (after.narrow_forward > before.narrow_forward) path += " narrow-fwd";
    if (after.split_dq > before.split_dq) path += " split-dq";
    return path;
}
#endif

int main(int argc, char** argv) {
    CLI::App app{"Time training steps (forward + backward + AdamW) of a model; prints one JSON line."};
    std::string model = "vit", device = "cpu", precision = "fp32", cuda_graph = "on";
    int64_t dim = 192, depth = 6, heads = 3, patch = 4, image = 32, batch = 64, seq = 128, vocab = 10000, kernel = 9;
    int steps = 5, warmup = 2, threads = 0, profile_steps = 0;
    uint64_t seed = 0;
    app.add_option("model", model, "vit | lm | gau | lstm | convmixer")
        ->check(CLI::IsMember({"vit", "lm", "gau", "lstm", "convmixer"}))
        ->capture_default_str();
    app.add_option("--dim", dim, "model width")->capture_default_str();
    app.add_option("--depth", depth, "blocks (layers for lstm)")->capture_default_str();
    app.add_option("--heads", heads, "attention heads (vit, lm)")->capture_default_str();
    app.add_option("--patch", patch, "ViT / ConvMixer patch size")->capture_default_str();
    app.add_option("--image-size", image, "ViT / ConvMixer image size")->capture_default_str();
    app.add_option("--kernel", kernel, "ConvMixer depthwise kernel size (odd; 9 is the ConvMixer paper's CIFAR setting)")
        ->capture_default_str();
    app.add_option("--batch", batch, "batch size")->capture_default_str();
    app.add_option("--seq", seq, "sequence length (language models)")->capture_default_str();
    app.add_option("--vocab", vocab, "vocabulary size (language models)")->capture_default_str();
    app.add_option("--steps", steps, "timed steps")->capture_default_str()->check(apps::Positive);
    app.add_option("--warmup", warmup, "untimed steps first")->capture_default_str();
    app.add_option("--threads", threads, "OpenMP threads (0: all cores)")->capture_default_str();
    apps::add_profile_flag(app, profile_steps);
    apps::add_device_flags(app, device, &precision);
    apps::add_cuda_graph_flag(app, cuda_graph);
    app.add_option("--seed", seed, "random seed")->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    apps::DeviceChoice dc = apps::resolve_device(device, precision);
    if (!dc.error.empty()) {
        std::fprintf(stderr, "bench: %s\n", dc.error.c_str());
        return 2;
    }
    if (!dc.note.empty()) std::fprintf(stderr, "bench: %s\n", dc.note.c_str());  // stdout is the JSON line
    try {
        apps::apply_precision(dc, precision);
        Device dev = dc.device;
        auto sync = [dev] {
#ifdef ENGINE_CUDA
            if (dev == Device::CUDA) engine::cuda::synchronize();
#endif
        };
        if (threads > 0) omp_set_num_threads(threads);
        manual_seed(seed);
#ifdef ENGINE_CUDA
        const AttentionCounters counters_before;
#endif

        std::shared_ptr<Module> net;
        std::function<Tensor()> loss_fn;
        int64_t items = 0;
        if (model == "vit" || model == "convmixer") {
            // Random images, and labels of the model's classes.
            std::function<Tensor(const Tensor&)> forward;
            int64_t classes = 0;
            if (model == "vit") {
                ViTConfig c;
                c.dim = dim;
                c.depth = depth;
                c.heads = heads;
                c.patch = patch;
                c.image_size = image;
                auto vit = std::make_shared<ViT>(c);
                forward = [vit](const Tensor& images) { return vit->forward(images); };
                classes = c.num_classes;
                net = vit;
            } else {
                ConvMixerConfig c;
                c.dim = dim;
                c.depth = depth;
                c.kernel = kernel;
                c.patch = patch;
                auto cm = std::make_shared<ConvMixer>(c);
                forward = [cm](const Tensor& images) { return cm->forward(images); };
                classes = c.num_classes;
                net = cm;
            }
            Tensor x = Tensor::normal({batch, 3, image, image}).to(dev);
            Tensor y = Tensor::randint({batch}, 0, (int32_t)classes).to(dev);
            loss_fn = [forward, x, y] { return cross_entropy(forward(x), y); };
            items = batch;
        } else {
            Tensor x = Tensor::randint({batch, seq}, 0, (int32_t)vocab).to(dev),
                   y = Tensor::randint({batch, seq}, 0, (int32_t)vocab).to(dev);
            items = batch * seq;
            if (model == "lm") {
                LMConfig c;
                c.vocab = vocab;
                c.dim = dim;
                c.depth = depth;
                c.heads = heads;
                c.max_len = seq;
                auto lm = std::make_shared<TransformerLM>(c);
                loss_fn = [lm, x, y] { return lm->loss(x, y); };
                net = lm;
            } else if (model == "gau") {
                GAUConfig c;
                c.vocab = vocab;
                c.dim = dim;
                c.depth = depth;
                c.expansion = 2 * dim;
                auto lm = std::make_shared<GAULM>(c);
                loss_fn = [lm, x, y] { return lm->loss(x, y); };
                net = lm;
            } else {
                LSTMConfig c{vocab, dim, depth, 0.f, false};
                auto lm = std::make_shared<LSTMLM>(c);
                // The state carried from step to step in buffers that stay, as train_lm's BPTT: a
                // CUDA graph can replay the step.
                auto state = std::make_shared<CarriedState>();
                loss_fn = [lm, x, y, state] { return state->loss(*lm, x, y); };
                net = lm;
            }
        }
        net->to(dev);
        Adam opt(param_groups(*net, 0.05f), 1e-4f);
        // One training step; the profiler's marks cost one branch each while it is off.
        using profile::Phase;
        auto train_step = [&] {
            profile::step_begin();
            opt.zero_grad();
            profile::boundary("zero_grad", Phase::Outside);
            Tensor loss = loss_fn();
            loss.backward();
            opt.step();
            profile::boundary("optimizer step", Phase::Outside);
            sync();
            profile::step_end();
        };
        // The median ms of `steps` timed runs of `step` after `warmup` untimed ones (at least `min_warmup`).
        double flops_timed = 0;  // GEMM FLOPs of the timed eager steps (engine/profile.h's counter)
        auto time_steps = [&](const std::function<void()>& step, int min_warmup, bool count_flops) {
            std::vector<double> ms;
            for (int s = 0; s < std::max(warmup, min_warmup) + steps; s++) {
                double f0 = profile::gemm_flops_total();
                auto t0 = std::chrono::steady_clock::now();
                step();
                double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
                if (s >= std::max(warmup, min_warmup)) {
                    ms.push_back(dt);
                    if (count_flops) flops_timed += profile::gemm_flops_total() - f0;
                }
            }
            std::sort(ms.begin(), ms.end());
            return ms[ms.size() / 2];
        };
        double median = time_steps(train_step, 0, true), median_eager = median, median_graph = 0;
        bool graph = apps::cuda_graph_applies(cuda_graph, dev);
        if (graph) {
            GraphStep graph_step(opt, loss_fn);
            // Two untimed runs at least: the eager warm-up and the capture.
            median_graph = time_steps([&] { graph_step.run(); sync(); }, 2, false);
            median = median_graph;
        }
        profile::Report prof;
        if (profile_steps > 0) {
            profile::start(dev);
            for (int s = 0; s < profile_steps; s++) train_step();
            prof = profile::stop();
        }
        nlohmann::ordered_json out = {{"model", model},      {"dim", dim},       {"depth", depth},
                                      {"batch", batch},      {"params", net->num_parameters()},
                                      {"threads", omp_get_max_threads()}, {"device", dc.description},
                                      {"precision", precision},
                                      {"ms_per_step", median}, {"items_per_s", items / (median / 1000.0)},
                                      {"peak_rss_mb", apps::peak_rss_mb()},
                                      {"peak_tensor_mb", (double)engine::host_peak_memory() / (1 << 20)}};
        apps::add_peak_device_mb(out, dev);
#ifdef ENGINE_CUDA
        if (dev == Device::CUDA) {
            out["cudnn_calls"] = engine::cuda::cudnn_calls();
            if (model == "vit" || model == "lm")
                out["attention_kernels"] = attention_kernels(counters_before, AttentionCounters{});
            if (engine::cuda::gemm_autotune_enabled())
                out["gemm_tunings"] = engine::cuda::gemm_autotune_stats().tunings;
            if (engine::cuda::lt_bias_enabled()) out["lt_bias_calls"] = engine::cuda::lt_bias_calls();
        }
#endif
        if (graph) {
            out["cuda_graph"] = true;
            out["ms_per_step_eager"] = median_eager;
            out["ms_per_step_graph"] = median_graph;
        }
        // MFU of the median step against the device's peak (apps/common/mfu.h).
        out["gflop_per_step"] = flops_timed / steps / 1e9;
        const apps::Peak& peak = apps::peak_flops(dev, precision);
        if (peak.flops_per_s > 0) {
            out["mfu"] = flops_timed / steps / (median / 1000.0) / peak.flops_per_s;
            out["mfu_peak"] = peak.source;
        }
        if (model == "vit") {
            out["heads"] = heads;
            out["patch"] = patch;
        } else if (model == "convmixer") {
            out["kernel"] = kernel;
            out["patch"] = patch;
        } else {
            out["seq"] = seq;
            out["vocab"] = vocab;
        }
        if (profile_steps > 0) {
            std::fprintf(stderr, "%s", apps::profile_table(prof, "bench " + model + " --profile").c_str());
            out["profile"] = apps::profile_json(prof);
        }
        std::printf("%s\n", out.dump().c_str());
        return 0;
    } catch (const Error& e) {
        std::fprintf(stderr, "bench: %s\n", e.what());
        return 1;
    }
}
