// bench/ops.cpp: CPU op benchmark. Prints one JSON line per kernel with the median time of
// --reps repetitions after warm-up, next to a reference measured in the same run:
//   GEMMs (ViT-Tiny shapes): engine::matmul / engine::linear vs cblas_sgemm called directly on
//     the same operands; GFLOP/s of each and ratio = ref_ms / ms (1 = as fast as raw sgemm).
//   memory-bound ops (gelu, softmax, layer_norm, cross_entropy, depthwise_conv2d; forward and backward): GB/s
//     over the bytes the op must read and write once (the model is printed), vs an OpenMP copy
//     moving the same number of bytes; ratio = gb_s / ref_gb_s.
// Timings are relative: compare ratios, and figures only within one run on one machine.
//
//   make CUDA=0 bench/ops && ./bench/ops [--reps 20] [--threads N] [--filter NAME] [--warmup 3]
#include <cblas.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>
#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/rng.h"

using namespace engine;
using json = nlohmann::json;

namespace {

struct Options {
    int reps = 20;
    int warmup = 3;
    int threads = 0;  // 0: OpenMP's default
    std::string filter;
};

struct Timing {
    double median_ms = 0, min_ms = 0;  // wall clock
    double cpu_ms = 0;                 // median CPU time of the process (all threads)
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double process_cpu_ms() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// One call of f: its wall time and the process CPU time it used.
std::pair<double, double> measure(const std::function<void()>& f) {
    double c0 = process_cpu_ms();
    auto t0 = std::chrono::steady_clock::now();
    f();
    double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return {wall, process_cpu_ms() - c0};
}

// Times `ours` and `ref` alternately, rep by rep, so that a burst of load from other processes
// hits both about equally and their ratio stays meaningful.
std::pair<Timing, Timing> time_pair(const std::function<void()>& ours, const std::function<void()>& ref,
                                    const Options& opt) {
    for (int i = 0; i < opt.warmup; i++) ours(), ref();
    std::vector<double> wall[2], cpu[2];
    for (int i = 0; i < opt.reps; i++) {
        int k = 0;
        for (const auto* f : {&ours, &ref}) {
            auto [w, c] = measure(*f);
            wall[k].push_back(w);
            cpu[k++].push_back(c);
        }
    }
    auto summary = [&](int k) {
        return Timing{median(wall[k]), *std::min_element(wall[k].begin(), wall[k].end()), median(cpu[k])};
    };
    return {summary(0), summary(1)};
}

void emit(const json& j) {
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
}

Tensor random_tensor(const Shape& s, uint64_t seed, float lo = -1.f, float hi = 1.f) {
    Generator g(seed);
    Tensor t = Tensor::empty(s);
    g.uniform(t.data_f32(), t.numel(), lo, hi);
    return t;
}

std::string cpu_model() {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    return "unknown";
}

std::string load_average() {
    std::ifstream f("/proc/loadavg");
    std::string a, b, c;
    f >> a >> b >> c;
    return a + " " + b + " " + c;
}

double round3(double x) { return std::round(x * 1000) / 1000; }

// ---------------------------------------------------------------------------------------------
// GEMMs: C[M,N] = op(A)·op(B), our op vs cblas_sgemm on the same operands, `batch` times.

struct GemmCase {
    std::string name, op, shape;  // kernel name, our call, shape in words
    int64_t batch, M, N, K;
    bool ta, tb;
    std::function<void()> ours;
    const float *A, *B;  // the operands our call reads, for the reference
};

void bench_gemm(const GemmCase& c, const Options& opt) {
    std::vector<float> C(c.batch * c.M * c.N);
    int lda = c.ta ? (int)c.M : (int)c.K, ldb = c.tb ? (int)c.K : (int)c.N;
    auto ref = [&] {
        for (int64_t i = 0; i < c.batch; i++)
            cblas_sgemm(CblasRowMajor, c.ta ? CblasTrans : CblasNoTrans, c.tb ? CblasTrans : CblasNoTrans, (int)c.M,
                        (int)c.N, (int)c.K, 1.f, c.A + i * c.M * c.K, lda, c.B + i * c.K * c.N, ldb, 0.f,
                        C.data() + i * c.M * c.N, (int)c.N);
    };
    auto [ours, r] = time_pair(c.ours, ref, opt);
    double flops = 2.0 * c.batch * c.M * c.N * c.K;
    emit({{"kernel", c.name}, {"op", c.op}, {"shape", c.shape}, {"flops", flops}, {"ms", round3(ours.median_ms)},
          {"ms_min", round3(ours.min_ms)},
          {"cpu_ms", round3(ours.cpu_ms)}, {"gflops", round3(flops / ours.median_ms / 1e6)},
          {"ref", fmt::format("cblas_sgemm {}{}{}", c.ta ? "T" : "N", c.tb ? "T" : "N",
                              c.batch > 1 ? fmt::format(", serial loop of {}", c.batch) : "")},
          {"ref_ms", round3(r.median_ms)}, {"ref_ms_min", round3(r.min_ms)},
          {"ref_cpu_ms", round3(r.cpu_ms)}, {"ref_gflops", round3(flops / r.median_ms / 1e6)},
          {"ratio", round3(r.median_ms / ours.median_ms)}});
}

void matmul_benches(const Options& opt, const std::function<bool(const std::string&)>& wanted) {
    // ViT-Tiny at batch 64: 65 tokens (64 patches + class token), width 192, 3 heads of 64, MLP 768.
    const int64_t B = 64, T = 65, D = 192, H = 3, Dh = 64, F = 768, R = B * T;
    NoGrad ng;

    auto row_gemm = [&](const std::string& name, int64_t K, int64_t N, uint64_t seed) {
        if (wanted("matmul." + name)) {
            Tensor x = random_tensor({R, K}, seed), w = random_tensor({K, N}, seed + 1);
            bench_gemm({"matmul." + name, "engine::matmul(x, w)",
                        fmt::format("[{}·{},{}]x[{},{}]", B, T, K, K, N), 1, R, N, K, false, false,
                        [&] { matmul(x, w); }, x.data_f32(), w.data_f32()},
                       opt);
        }
        if (wanted("linear." + name)) {  // PyTorch layout W [out, in]: x·Wᵀ + b
            Tensor x = random_tensor({B, T, K}, seed), w = random_tensor({N, K}, seed + 1),
                   b = random_tensor({N}, seed + 2);
            bench_gemm({"linear." + name, "engine::linear(x, W, b) (bias included)",
                        fmt::format("[{},{},{}]x[{},{}]ᵀ+b", B, T, K, N, K), 1, R, N, K, false, true,
                        [&] { linear(x, w, b); }, x.data_f32(), w.data_f32()},
                       opt);
        }
    };
    row_gemm("qkv", D, 3 * D, 10);
    row_gemm("fc1", D, F, 20);
    row_gemm("fc2", F, D, 30);
    row_gemm("proj", D, D, 40);

    const int64_t BH = B * H;
    if (wanted("matmul.attn_qk")) {  // the brief's shape: q [BH,T,Dh] x kᵀ stored [BH,Dh,T]
        Tensor q = random_tensor({BH, T, Dh}, 50), kt = random_tensor({BH, Dh, T}, 51);
        bench_gemm({"matmul.attn_qk", "engine::matmul(q, kT) batched",
                    fmt::format("[{}·{},{},{}]x[{}·{},{},{}]", B, H, T, Dh, B, H, Dh, T), BH, T, T, Dh, false,
                    false, [&] { matmul(q, kt); }, q.data_f32(), kt.data_f32()},
                   opt);
    }
    if (wanted("matmul.attn_qkT")) {  // as attention does it: k stored [BH,T,Dh], transposed in the GEMM
        Tensor q = random_tensor({BH, T, Dh}, 52), k = random_tensor({BH, T, Dh}, 53);
        bench_gemm({"matmul.attn_qkT", "engine::matmul(q, k, false, true) batched",
                    fmt::format("[{}·{},{},{}]x[{}·{},{},{}]ᵀ", B, H, T, Dh, B, H, T, Dh), BH, T, T, Dh, false,
                    true, [&] { matmul(q, k, false, true); }, q.data_f32(), k.data_f32()},
                   opt);
    }
    if (wanted("matmul.attn_pv")) {  // probabilities [BH,T,T] x v [BH,T,Dh]
        Tensor p = random_tensor({BH, T, T}, 54, 0.f, 1.f), v = random_tensor({BH, T, Dh}, 55);
        bench_gemm({"matmul.attn_pv", "engine::matmul(p, v) batched",
                    fmt::format("[{}·{},{},{}]x[{}·{},{},{}]", B, H, T, T, B, H, T, Dh), BH, T, Dh, T, false, false,
                    [&] { matmul(p, v); }, p.data_f32(), v.data_f32()},
                   opt);
    }
}

// ---------------------------------------------------------------------------------------------
// Memory-bound ops: GB/s over a stated byte model, vs an OpenMP copy of the same byte count.

// An OpenMP copy of bytes/2 from one buffer to another (so `bytes` move in all), split over
// the threads the way our kernels split rows: the bandwidth the op could reach at this size.
struct CopyReference {
    int64_t n;
    std::vector<float> src, dst;
    explicit CopyReference(double bytes)
        : n(std::max<int64_t>(1, (int64_t)(bytes / 2 / sizeof(float)))), src(n, 1.f), dst(n) {}
    void operator()() {
        #pragma omp parallel
        {
            int nt = omp_get_num_threads(), t = omp_get_thread_num();
            int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
            std::memcpy(dst.data() + lo, src.data() + lo, (hi - lo) * sizeof(float));
        }
    }
};

void bench_memory(const std::string& name, const std::string& shape, double bytes, const std::string& model,
                  const std::function<void()>& f, const Options& opt) {
    CopyReference copy(bytes);
    auto [t, r] = time_pair(f, [&] { copy(); }, opt);
    double gbs = bytes / t.median_ms / 1e6, ref_gbs = bytes / r.median_ms / 1e6;
    emit({{"kernel", name}, {"shape", shape}, {"bytes", bytes}, {"bytes_model", model},
          {"ms", round3(t.median_ms)}, {"ms_min", round3(t.min_ms)}, {"cpu_ms", round3(t.cpu_ms)},
          {"gb_s", round3(gbs)},
          {"ref", "OpenMP memcpy of the same byte count"}, {"ref_ms", round3(r.median_ms)},
          {"ref_ms_min", round3(r.min_ms)}, {"ref_cpu_ms", round3(r.cpu_ms)}, {"ref_gb_s", round3(ref_gbs)},
          {"ratio", round3(gbs / ref_gbs)}});
}

// Times the backward closure of y's node on its own: no forward, and the graph is not released
// (Tensor::backward would free it after one call).
std::function<void()> backward_of(const Tensor& y, const Tensor& grad_out) {
    std::shared_ptr<Node> node = y.impl()->grad_fn;
    if (!node) throw std::runtime_error("bench: output has no grad_fn (did an input require grad?)");
    return [node, grad_out] {
        NoGrad ng;
        node->backward(grad_out);
    };
}

void pointwise_benches(const Options& opt, const std::function<bool(const std::string&)>& wanted) {
    const int64_t B = 64, T = 65, D = 192;
    const Shape s{B, T, D};
    const double n = (double)s.numel(), f = sizeof(float);
    const std::string shape = s.str();

    if (wanted("gelu.forward")) {
        Tensor x = random_tensor(s, 60, -3.f, 3.f);
        bench_memory("gelu.forward", shape, 2 * n * f, "x read, y written", [&] { NoGrad ng; gelu(x); }, opt);
    }
    if (wanted("gelu.backward")) {
        Tensor x = random_tensor(s, 61, -3.f, 3.f).requires_grad_();
        Tensor y = gelu(x), g = random_tensor(s, 62);
        bench_memory("gelu.backward", shape, 4 * n * f, "x, y, dy read, dx written", backward_of(y, g), opt);
    }
}

// The fused nn ops (engine/ops/nn.cpp). Byte models count each tensor the kernel must touch
// once; per-row statistics and LayerNorm's weight/bias are included, though small.
void nn_benches(const Options& opt, const std::function<bool(const std::string&)>& wanted) {
    const int64_t B = 64, T = 65, D = 192, H = 3;
    const double f = sizeof(float);

    const Shape act{B, T, D}, scores{B * H, T, T};
    for (const Shape& s : {act, scores}) {
        double n = (double)s.numel();
        std::string tag = s == act ? "" : ".scores";
        if (wanted("softmax.forward" + tag)) {
            Tensor x = random_tensor(s, 70, -4.f, 4.f);
            bench_memory("softmax.forward" + tag, s.str(), 2 * n * f, "x read, y written",
                         [&] { NoGrad ng; softmax(x); }, opt);
        }
        if (wanted("softmax.backward" + tag)) {
            Tensor x = random_tensor(s, 71, -4.f, 4.f).requires_grad_();
            Tensor y = softmax(x), g = random_tensor(s, 72);
            bench_memory("softmax.backward" + tag, s.str(), 3 * n * f, "y, dy read, dx written",
                         backward_of(y, g), opt);
        }
    }

    const double n = (double)act.numel(), rows = (double)(B * T), C = (double)D;
    if (wanted("layer_norm.forward")) {
        Tensor x = random_tensor(act, 73), w = random_tensor({D}, 74), b = random_tensor({D}, 75);
        bench_memory("layer_norm.forward", act.str(), (2 * n + 2 * C + 2 * rows) * f,
                     "x, weight, bias read; y, mean, rstd written", [&] { NoGrad ng; layer_norm(x, w, b); }, opt);
    }
    if (wanted("layer_norm.backward")) {
        Tensor x = random_tensor(act, 76).requires_grad_(), w = random_tensor({D}, 77).requires_grad_(),
               b = random_tensor({D}, 78).requires_grad_();
        Tensor y = layer_norm(x, w, b), g = random_tensor(act, 79);
        bench_memory("layer_norm.backward", act.str(), (3 * n + 3 * C + 2 * rows) * f,
                     "x, dy, weight, mean, rstd read; dx, dweight, dbias written", backward_of(y, g), opt);
    }

    // A word-level language model's output: 32 sequences x 32 tokens over a 10,000-word vocabulary.
    const int64_t N = 1024, V = 10000;
    const double nv = (double)(N * V);
    const std::string ce_shape = fmt::format("[{},{}] logits, [{}] int32 targets", N, V, N);
    if (wanted("cross_entropy.forward")) {
        Tensor logits = random_tensor({N, V}, 80, -5.f, 5.f), targets = Tensor::randint({N}, 0, (int32_t)V);
        bench_memory("cross_entropy.forward", ce_shape, (nv + 2 * N) * f, "logits, targets read; lse written",
                     [&] { NoGrad ng; cross_entropy(logits, targets); }, opt);
    }
    if (wanted("cross_entropy.backward")) {
        Tensor logits = random_tensor({N, V}, 81, -5.f, 5.f).requires_grad_();
        Tensor targets = Tensor::randint({N}, 0, (int32_t)V);
        Tensor loss = cross_entropy(logits, targets);
        bench_memory("cross_entropy.backward", ce_shape, (2 * nv + 2 * N) * f,
                     "logits, targets, lse read; dlogits written", backward_of(loss, Tensor::ones({})), opt);
    }
}

// ConvMixer-256/8's spatial mixing on CIFAR at patch 2 ([64, 256, 16, 16]), with k = 3 (the
// frozen-filter experiments) and k = 9 (the ConvMixer paper's CIFAR kernel). A k×k depthwise conv
// does k² multiply-adds per element, so at k = 9 it is no longer only memory-bound.
void conv_benches(const Options& opt, const std::function<bool(const std::string&)>& wanted) {
    const int64_t N = 64, C = 256, H = 16, W = 16;
    const double n = (double)(N * C * H * W), f = sizeof(float);
    for (int64_t k : {3, 9}) {
        const std::string tag = fmt::format(".k{}", k), shape = fmt::format("[{},{},{},{}], k = {}", N, C, H, W, k);
        if (wanted("depthwise_conv2d.forward" + tag)) {
            Tensor x = random_tensor({N, C, H, W}, 90), w = random_tensor({C, 1, k, k}, 91), b = random_tensor({C}, 92);
            bench_memory("depthwise_conv2d.forward" + tag, shape, 2 * n * f, "x read, y written",
                         [&] { NoGrad ng; depthwise_conv2d(x, w, b); }, opt);
        }
        if (wanted("depthwise_conv2d.backward" + tag)) {
            Tensor x = random_tensor({N, C, H, W}, 93).requires_grad_(), w = random_tensor({C, 1, k, k}, 94).requires_grad_(),
                   b = random_tensor({C}, 95).requires_grad_();
            Tensor y = depthwise_conv2d(x, w, b), g = random_tensor({N, C, H, W}, 96);
            bench_memory("depthwise_conv2d.backward" + tag, shape, 3 * n * f, "x, dy read, dx written",
                         backward_of(y, g), opt);
        }
    }
    // ConvMixer's batch norms (training mode: the batch's statistics), the same activations.
    const std::string shape = fmt::format("[{},{},{},{}]", N, C, H, W);
    if (wanted("batch_norm.forward")) {
        Tensor x = random_tensor({N, C, H, W}, 97), w = random_tensor({C}, 98), b = random_tensor({C}, 99);
        Tensor rm = Tensor::zeros({C}), rv = Tensor::ones({C});
        bench_memory("batch_norm.forward", shape, 2 * n * f, "x read, y written (the statistics read x twice more)",
                     [&] { NoGrad ng; batch_norm(x, w, b, rm, rv, true); }, opt);
    }
    if (wanted("batch_norm.backward")) {
        Tensor x = random_tensor({N, C, H, W}, 100).requires_grad_(), w = random_tensor({C}, 101).requires_grad_(),
               b = random_tensor({C}, 102).requires_grad_();
        Tensor rm = Tensor::zeros({C}), rv = Tensor::ones({C});
        Tensor y = batch_norm(x, w, b, rm, rv, true), g = random_tensor({N, C, H, W}, 103);
        bench_memory("batch_norm.backward", shape, 3 * n * f, "x, dy read, dx written (the sums read them once more)",
                     backward_of(y, g), opt);
    }
}

}  // namespace

int main(int argc, char** argv) {
    Options opt;
    CLI::App app{"bench/ops: CPU op timings against cblas_sgemm / memcpy references, one JSON line per kernel"};
    app.add_option("--reps", opt.reps, "timed repetitions per kernel (the median is reported)")
        ->check(CLI::PositiveNumber);
    app.add_option("--warmup", opt.warmup, "untimed calls before timing")->check(CLI::NonNegativeNumber);
    app.add_option("--threads", opt.threads, "OpenMP (and OpenBLAS) threads; default: OpenMP's default")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--filter", opt.filter, "run only kernels whose name contains this (e.g. matmul, gelu)");
    CLI11_PARSE(app, argc, argv);

    if (opt.threads > 0) {
        omp_set_num_threads(opt.threads);
        openblas_set_num_threads(opt.threads);
    }
    emit({{"machine",
           {{"cpu", cpu_model()},
            {"cores", std::thread::hardware_concurrency()},
            {"omp_threads", omp_get_max_threads()},
            {"openblas_threads", openblas_get_num_threads()},
            {"openblas", openblas_get_config()},
            {"loadavg_at_start", load_average()}}},
          {"reps", opt.reps},
          {"warmup", opt.warmup},
          {"statistic", "ms: median wall time over reps; cpu_ms: median process CPU time (all threads); "
                        "ratio: against the reference timed alternately in the same run"}});

    auto wanted = [&](const std::string& name) { return name.find(opt.filter) != std::string::npos; };
    matmul_benches(opt, wanted);
    pointwise_benches(opt, wanted);
    nn_benches(opt, wanted);
    conv_benches(opt, wanted);
    emit({{"done", true}, {"loadavg_at_end", load_average()}});
    return 0;
}
