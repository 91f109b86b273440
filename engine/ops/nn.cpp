// engine/ops/nn.cpp: the fused neural-network ops, forward and backward side by side. Each op
// checks its arguments, runs one forward kernel and attaches a backward that runs one backward
// kernel, from what the forward saved. The kernels run on the inputs' device (ON_DEVICE:
// engine/cpu/nn.cpp or engine/cuda/nn.cu); every tensor made here is on that device, and inputs on
// different devices are an error naming the op and the devices.
#include "engine/ops/nn.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string>
#include "engine/autograd.h"
#include "engine/cpu/elementwise.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/nn.h"
#include "engine/cpu/reduce.h"
#include "engine/ops/common.h"
#include "engine/ops/dispatch.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/reduce.h"
#include "engine/ops/shape.h"
#ifdef ENGINE_CUDA
#include "engine/cuda/elementwise.h"
#include "engine/cuda/flash_attention.h"
#include "engine/cuda/matmul.h"
#include "engine/cuda/nn.h"
#include "engine/cuda/reduce.h"
#include "engine/cuda/runtime.h"
#include "engine/cuda/shape.h"
#endif

namespace engine {

// x viewed as [rows, n] over its last dim.
struct Rows {
    int64_t rows, n;
};

static Rows last_dim_rows(const char* op, const Tensor& x) {
    check(x.ndim() >= 1, "{}: input must have at least 1 dim, got {}", op, x.shape().str());
    int64_t n = x.size(-1);
    return {n > 0 ? x.numel() / n : 0, n};
}

// Fills t with the next t.numel() values of a uniform [0, 1) draw from the global generator, on t's
// device. On the CPU that is global_generator().uniform; on CUDA the op reserves the same Philox
// blocks (advance((n + 3) / 4)) and a kernel computes them from (seed, first block): the same bits
// as on the CPU, and the generator's offset ends where the CPU's would.
static void draw_uniform(const Tensor& t) {
    int64_t n = t.numel();
#ifdef ENGINE_CUDA
    if (t.is_cuda()) {
        Generator& gen = global_generator();
        uint64_t base = gen.advance((uint64_t)(n + 3) / 4);
        cuda::uniform_fill(t.raw_f32(), n, gen.seed(), base, cuda::rng_shift());
        return;
    }
#endif
    global_generator().uniform(t.data_f32(), n, 0.f, 1.f);
}

static void expect_probability(const char* op, float p, const char* what) {
    check(p >= 0.f && p <= 1.f, "{}: {} must be in [0, 1], got {}", op, what, p);  // also rejects NaN
}

// ---------------------------------------------------------------------------------------------
// softmax, log_softmax: the backward needs only the output y.

Tensor softmax(const Tensor& x) {
    expect_f32("softmax", x);
    Rows r = last_dim_rows("softmax", x);
    const Device dev = x.device();
    Tensor y = x.new_empty(x.shape());
    ON_DEVICE(dev, softmax_forward)(x.raw_f32(), y.raw_f32(), r.rows, r.n);
    Tensor y_saved = y.detach();
    return attach(y, "softmax", {x}, [y_saved, r, dev](const Tensor& g) {
        Tensor dx = y_saved.new_empty(y_saved.shape());
        ON_DEVICE(dev, softmax_backward)(y_saved.raw_f32(), g.raw_f32(), dx.raw_f32(), r.rows, r.n);
        return std::vector<Tensor>{dx};
    });
}

Tensor log_softmax(const Tensor& x) {
    expect_f32("log_softmax", x);
    Rows r = last_dim_rows("log_softmax", x);
    const Device dev = x.device();
    Tensor y = x.new_empty(x.shape());
    ON_DEVICE(dev, log_softmax_forward)(x.raw_f32(), y.raw_f32(), r.rows, r.n);
    Tensor y_saved = y.detach();
    return attach(y, "log_softmax", {x}, [y_saved, r, dev](const Tensor& g) {
        Tensor dx = y_saved.new_empty(y_saved.shape());
        ON_DEVICE(dev, log_softmax_backward)(y_saved.raw_f32(), g.raw_f32(), dx.raw_f32(), r.rows, r.n);
        return std::vector<Tensor>{dx};
    });
}

// ---------------------------------------------------------------------------------------------
// layer_norm: the forward saves per-row mean and rstd, so the backward need not recompute them.

static Rows expect_layer_norm_args(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   float eps) {
    expect_f32(op, x);
    Rows r = last_dim_rows(op, x);
    expect_layer_norm_params(op, x, weight, bias, eps);
    return r;
}

// y's node: the backward of y = layer_norm(x) from the saved mean and rstd (layer_norm's, and
// add_layer_norm's with x = the sum).
static Tensor attach_layer_norm(Tensor y, const Tensor& x, const Tensor& weight, const Tensor& bias,
                                const Tensor& mean, const Tensor& rstd, Rows r) {
    const Device dev = x.device();
    return attach(y, "layer_norm", {x, weight, bias}, [x, weight, bias, mean, rstd, r, dev](const Tensor& g) {
        Tensor dx, dw, db;
        // dx adds into the gradient x already has where autograd allows it (engine/autograd.h): in a
        // Pre-LN block the residual add's gradient, which autograd would otherwise add dx to.
        bool add_dx = false;
        if (x.requires_grad()) dx = grad_target(x, x, add_dx);
        if (weight.defined() && weight.requires_grad()) dw = x.new_empty(weight.shape());
        if (bias.defined() && bias.requires_grad()) db = x.new_empty(bias.shape());
        ON_DEVICE(dev, layer_norm_backward)(x.raw_f32(), weight.defined() ? weight.raw_f32() : nullptr,
                                            mean.raw_f32(), rstd.raw_f32(), g.raw_f32(),
                                            dx.defined() ? dx.raw_f32() : nullptr, add_dx,
                                            dw.defined() ? dw.raw_f32() : nullptr,
                                            db.defined() ? db.raw_f32() : nullptr, r.rows, r.n);
        return std::vector<Tensor>{dx, dw, db};
    });
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
    Rows r = expect_layer_norm_args("layer_norm", x, weight, bias, eps);
    Tensor y = x.new_empty(x.shape());
    Tensor mean = x.new_empty({r.rows}), rstd = x.new_empty({r.rows});
    const float* pw = weight.defined() ? weight.raw_f32() : nullptr;
    const float* pb = bias.defined() ? bias.raw_f32() : nullptr;
    ON_DEVICE(x.device(), layer_norm_forward)(x.raw_f32(), pw, pb, y.raw_f32(), mean.raw_f32(), rstd.raw_f32(),
                                              r.rows, r.n, eps);
    return attach_layer_norm(y, x, weight, bias, mean, rstd, r);
}

// add_layer_norm: one forward kernel writes sum and y; the graph it records is the unfused one,
// sum = add(x, residual) and y = layer_norm(sum), so sum's gradient is what its later uses send
// plus the LayerNorm's dx (the engine accumulates both into sum.grad), and sum's node passes it to
// x and residual unchanged. The autograd has one output per node: a single node for both outputs
// would need them stacked in one tensor (as lstm_cell's [2, B, H]), and the narrow views' backward
// would then zero-fill and copy a [2, rows, n] gradient per use, more traffic than the add pass
// the fusion saves. So the backward runs the same kernels as before; the forward reads x and
// residual once and writes sum and y, instead of add's pass plus layer_norm's re-read of the sum.

AddLayerNorm add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                            float eps) {
    Rows r = expect_layer_norm_args("add_layer_norm", x, weight, bias, eps);
    expect_f32("add_layer_norm", residual, "residual");
    expect_same_device("add_layer_norm", x, residual);
    check(x.shape() == residual.shape(), "add_layer_norm: x {} and residual {} must have the same shape",
          x.shape().str(), residual.shape().str());
    Tensor sum = x.new_empty(x.shape()), y = x.new_empty(x.shape());
    Tensor mean = x.new_empty({r.rows}), rstd = x.new_empty({r.rows});
    const float* pw = weight.defined() ? weight.raw_f32() : nullptr;
    const float* pb = bias.defined() ? bias.raw_f32() : nullptr;
    ON_DEVICE(x.device(), add_layer_norm_forward)(x.raw_f32(), residual.raw_f32(), pw, pb, sum.raw_f32(), y.raw_f32(),
                                                  mean.raw_f32(), rstd.raw_f32(), r.rows, r.n, eps);
    // The profiler charges the fused kernel to "add_layer_norm" (the first boundary after it).
    sum = attach(sum, "add_layer_norm", {x, residual}, [](const Tensor& g) { return std::vector<Tensor>{g, g}; });
    return {sum, attach_layer_norm(y, sum, weight, bias, mean, rstd, r)};
}

// ---------------------------------------------------------------------------------------------
// dropout: the scaled keep mask is drawn from the global Philox stream (value i is a function of
// (seed, offset, i), so a GPU kernel reproduces it) and saved; the backward is dy·mask.

Tensor dropout(const Tensor& x, float p, bool training) {
    expect_f32("dropout", x);
    expect_probability("dropout", p, "p");
    if (!training || p == 0.f) return x;
    int64_t n = x.numel();
    const Device dev = x.device();
    Tensor mask = x.new_empty(x.shape());
    draw_uniform(mask);
    Tensor y = x.new_empty(x.shape());
    ON_DEVICE(dev, dropout_forward)(x.raw_f32(), mask.raw_f32(), y.raw_f32(), n, p);
    return attach(y, "dropout", {x}, [mask, n, dev](const Tensor& g) {
        Tensor dx = mask.new_empty(mask.shape());
        ON_DEVICE(dev, dropout_backward)(mask.raw_f32(), g.raw_f32(), dx.raw_f32(), n);
        return std::vector<Tensor>{dx};
    });
}

// ---------------------------------------------------------------------------------------------
// cross_entropy: log-softmax and NLL in one kernel. The forward saves only the per-row
// log-sum-exp; the backward recomputes the probabilities from the logits (llm.c's fused
// classifier), so no [rows, C] probability tensor is kept alive between forward and backward.

// Checks every target is ignore_index or a class in [0, C) and counts those that are not ignored.
// CPU targets: here, an error at once. CUDA targets: on the device (the host would have to wait for
// it to read them): cuda::check_indices records a bad one for the host's next wait to report
// (engine/cuda/runtime.h), and the kernels read the count from `on_device`.
struct TargetCount {
    int64_t on_host = 0;
    Tensor on_device;  // one int64 (as two int32), for CUDA targets
    const int64_t* device_ptr() const {
        return on_device.defined() ? reinterpret_cast<const int64_t*>(on_device.raw_i32()) : nullptr;
    }
};

static TargetCount count_targets(const Tensor& targets, int64_t C, int32_t ignore_index) {
    TargetCount count;
#ifdef ENGINE_CUDA
    if (targets.is_cuda()) {
        count.on_device = Tensor::empty({2}, DType::I32, targets.device());
        cuda::check_indices(targets.raw_i32(), targets.numel(), C, cuda::IndexOp::cross_entropy, &ignore_index);
        cuda::count_targets(targets.raw_i32(), targets.numel(), ignore_index,
                            reinterpret_cast<int64_t*>(count.on_device.raw_i32()));
        return count;
    }
#endif
    const int32_t* t = targets.data_i32();
    for (int64_t r = 0; r < targets.numel(); r++) {
        if (t[r] == ignore_index) continue;
        check(t[r] >= 0 && t[r] < C,
              "cross_entropy: target {} at position {} is out of range [0, {}) (ignore_index {})", t[r], r, C,
              ignore_index);
        count.on_host++;
    }
    return count;
}

// Where cross-entropy's backward writes dlogits: over the logits themselves where only this op
// holds them (input_memory_reusable: a model's output that nothing else reads; each element is
// read before it is written), else a new tensor. At the bench LM's 8192 tokens and 10,000 words
// that is a 328 MB buffer fewer at the backward's peak.
static Tensor logits_or_new(const Tensor& logits) {
    return input_memory_reusable(logits) ? logits.detach() : logits.new_empty(logits.shape());
}

// The loss kernels of the targets' device, with the count where count_targets left it.
static void cross_entropy_forward_on(const float* logits, const int32_t* t, float* loss, float* lse,
                                     int64_t rows, int64_t C, const TargetCount& count, int32_t ignore_index,
                                     float smoothing) {
#ifdef ENGINE_CUDA
    if (count.on_device.defined())
        return cuda::cross_entropy_forward_counted(logits, t, loss, lse, rows, C, ignore_index, smoothing,
                                                   count.device_ptr());
#endif
    cpu::cross_entropy_forward(logits, t, loss, lse, rows, C, count.on_host, ignore_index, smoothing);
}

static void cross_entropy_backward_on(const float* logits, const int32_t* t, const float* lse,
                                      const float* dloss, float* dlogits, int64_t rows, int64_t C,
                                      const TargetCount& count, int32_t ignore_index, float smoothing) {
#ifdef ENGINE_CUDA
    if (count.on_device.defined())
        return cuda::cross_entropy_backward_counted(logits, t, lse, dloss, dlogits, rows, C, ignore_index, smoothing,
                                                    count.device_ptr());
#endif
    cpu::cross_entropy_backward(logits, t, lse, dloss, dlogits, rows, C, count.on_host, ignore_index, smoothing);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int ignore_index, float label_smoothing) {
    expect_f32("cross_entropy", logits, "logits");
    expect_i32("cross_entropy", targets, "targets");
    expect_same_device("cross_entropy", logits, targets);
    check(logits.ndim() >= 1 && logits.size(-1) > 0, "cross_entropy: logits must be [..., C] with C > 0, got {}",
          logits.shape().str());
    Shape row_shape = logits.shape();
    row_shape.d[--row_shape.ndim] = 0;
    check(targets.shape() == row_shape, "cross_entropy: logits {} need targets {}, got {}", logits.shape().str(),
          row_shape.str(), targets.shape().str());
    expect_probability("cross_entropy", label_smoothing, "label_smoothing");
    int64_t C = logits.size(-1), rows = targets.numel();
    const TargetCount count = count_targets(targets, C, ignore_index);

    Tensor loss = logits.new_empty(Shape{});
    Tensor lse = logits.new_empty({rows});
    cross_entropy_forward_on(logits.raw_f32(), targets.raw_i32(), loss.raw_f32(), lse.raw_f32(), rows, C, count,
                             ignore_index, label_smoothing);
    return attach(loss, "cross_entropy", {logits, targets},
                  [logits, targets, lse, rows, C, count, ignore_index, label_smoothing](const Tensor& g) {
        Tensor dlogits = logits_or_new(logits);
        cross_entropy_backward_on(logits.raw_f32(), targets.raw_i32(), lse.raw_f32(), g.raw_f32(),
                                  dlogits.raw_f32(), rows, C, count, ignore_index, label_smoothing);
        return std::vector<Tensor>{dlogits, Tensor()};
    });
}

// ---------------------------------------------------------------------------------------------
// linear_cross_entropy: the output layer and the loss, chunk by chunk (engine/ops/nn.h).

static std::atomic<bool> g_linear_ce{[] {
    const char* s = std::getenv("INITLAB_LINEAR_CE");
    return !(s && std::string(s) == "0");
}()};
bool linear_cross_entropy_enabled() { return g_linear_ce.load(); }
bool set_linear_cross_entropy(bool on) { return g_linear_ce.exchange(on); }

// Rows a chunk takes: about 4 M logits, so that a chunk's logits stay in the GPU's L2 (and in the
// CPU's last-level cache at small vocabularies) between the GEMM that writes them, the kernel that
// turns them into their gradient and the two GEMMs that read that.
static int64_t lce_chunk_rows(int64_t V) { return std::max<int64_t>(1, ((int64_t)1 << 22) / V); }

Tensor linear_cross_entropy(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& targets,
                            int ignore_index, float label_smoothing) {
    const char* op = "linear_cross_entropy";
    expect_f32(op, x, "x");
    expect_f32(op, w, "w");
    expect_i32(op, targets, "targets");
    expect_same_device(op, x, w);
    expect_same_device(op, x, targets);
    check(x.ndim() >= 1 && w.ndim() == 2 && x.size(-1) == w.size(1) && w.size(0) > 0,
          "{}: x {} and w {} are not [..., D] and [V, D] with V > 0", op, x.shape().str(), w.shape().str());
    const int64_t D = x.size(-1), V = w.size(0), R = D > 0 ? x.numel() / D : 0;
    if (b.defined()) {
        expect_f32(op, b, "b");
        expect_same_device(op, x, b);
        check(b.shape() == Shape({V}), "{}: b {} is not [V] = [{}]", op, b.shape().str(), V);
    }
    Shape row_shape = x.shape();
    row_shape.d[--row_shape.ndim] = 0;
    check(targets.shape() == row_shape, "{}: x {} needs targets {}, got {}", op, x.shape().str(), row_shape.str(),
          targets.shape().str());
    expect_probability(op, label_smoothing, "label_smoothing");
    const Device dev = x.device();
    const bool want_dx = x.requires_grad(), want_dw = w.requires_grad(), want_db = b.defined() && b.requires_grad();
    const bool grads = grad_enabled() && (want_dx || want_dw || want_db);

    const TargetCount count = count_targets(targets, V, ignore_index);
    auto ce_forward = [&](const float* logits, const int32_t* t, float* loss, float* lse, int64_t n) {
        cross_entropy_forward_on(logits, t, loss, lse, n, V, count, ignore_index, label_smoothing);
    };
    auto ce_backward = [&](float* logits, const int32_t* t, const float* lse, const float* one, int64_t n) {
        cross_entropy_backward_on(logits, t, lse, one, logits, n, V, count, ignore_index, label_smoothing);
    };

    const int64_t chunk = std::min(lce_chunk_rows(V), std::max<int64_t>(R, 1));
    const int64_t chunks = (R + chunk - 1) / chunk;
    Tensor logits = x.new_empty({chunk, V});  // one chunk's logits, then their gradient in place
    Tensor lse = x.new_empty({chunk});
    Tensor parts = Tensor::zeros({std::max<int64_t>(chunks, 1)}, DType::F32, dev);  // each chunk's share of the mean
    Tensor one = Tensor::full(Shape{}, 1.f, DType::F32, dev);  // the gradient the chunks start from
    // dw and db are written by the first chunk; without rows they are zeros.
    Tensor dx = grads && want_dx ? x.new_empty(x.shape()) : Tensor();
    Tensor dw = grads && want_dw ? (chunks ? w.new_empty(w.shape()) : w.new_zeros(w.shape())) : Tensor();
    Tensor db = grads && want_db ? (chunks ? b.new_empty(b.shape()) : b.new_zeros(b.shape())) : Tensor();
    Tensor db_chunk = grads && want_db ? b.new_empty(b.shape()) : Tensor();
    const float* xp = x.raw_f32();
    const int32_t* tp = targets.raw_i32();
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t r0 = c * chunk, n = std::min(chunk, R - r0);
        const float* xc = xp + r0 * D;
        float* lp = logits.raw_f32();
        if (b.defined()) ON_DEVICE(dev, gemm_bias)(false, true, n, V, D, xc, w.raw_f32(), b.raw_f32(), lp, nullptr);
        else ON_DEVICE(dev, gemm)(false, true, n, V, D, 1.f, xc, w.raw_f32(), 0.f, lp);
        ce_forward(lp, tp + r0, parts.raw_f32() + c, lse.raw_f32(), n);
        if (!grads) continue;
        ce_backward(lp, tp + r0, lse.raw_f32(), one.raw_f32(), n);  // dlogits, over the logits
        if (dx.defined())
            ON_DEVICE(dev, gemm)(false, false, n, D, V, 1.f, lp, w.raw_f32(), 0.f, dx.raw_f32() + r0 * D);
        const float beta = c > 0 ? 1.f : 0.f;
        float* db_out = db.defined() ? (c > 0 ? db_chunk.raw_f32() : db.raw_f32()) : nullptr;
        if (dw.defined() && db_out)
            ON_DEVICE(dev, gemm_dbias)(true, false, V, D, n, lp, xc, beta, dw.raw_f32(), db_out);
        else if (dw.defined())
            ON_DEVICE(dev, gemm)(true, false, V, D, n, 1.f, lp, xc, beta, dw.raw_f32());
        else if (db_out)
            ON_DEVICE(dev, sum_dim)(lp, db_out, 1, n, V);
        if (db_out && c > 0) ON_DEVICE(dev, add_inplace)(db.raw_f32(), db_chunk.raw_f32(), V);
    }
    // The chunks' shares summed by the kernel, not the sum op: the profiler charges this op's time
    // at its attach (engine/profile.h), which makes no node where no gradient is wanted.
    Tensor loss = x.new_empty(Shape{});
    ON_DEVICE(dev, sum_dim)(parts.raw_f32(), loss.raw_f32(), 1, parts.numel(), 1);
    return attach(loss, op, {x, w, b, targets}, [dx, dw, db](const Tensor& g) {
        // Each gradient was made for a loss gradient of 1: g times it (exactly it when g is 1).
        auto times_g = [&g](const Tensor& t) { return t.defined() ? mul(t, g) : Tensor(); };
        return std::vector<Tensor>{times_g(dx), times_g(dw), times_g(db), Tensor()};
    });
}

// ---------------------------------------------------------------------------------------------
// mse_loss

Tensor mse_loss(const Tensor& pred, const Tensor& target) {
    expect_f32("mse_loss", pred, "pred");
    expect_f32("mse_loss", target, "target");
    expect_same_device("mse_loss", pred, target);
    check(pred.shape() == target.shape(), "mse_loss: pred {} and target {} must have the same shape",
          pred.shape().str(), target.shape().str());
    int64_t n = pred.numel();
    const Device dev = pred.device();
    Tensor loss = pred.new_empty(Shape{});
    ON_DEVICE(dev, mse_forward)(pred.raw_f32(), target.raw_f32(), loss.raw_f32(), n);
    return attach(loss, "mse_loss", {pred, target}, [pred, target, n, dev](const Tensor& g) {
        Tensor dpred, dtarget;
        if (pred.requires_grad()) dpred = pred.new_empty(pred.shape());
        if (target.requires_grad()) dtarget = pred.new_empty(target.shape());
        ON_DEVICE(dev, mse_backward)(pred.raw_f32(), target.raw_f32(), g.raw_f32(),
                                     dpred.defined() ? dpred.raw_f32() : nullptr,
                                     dtarget.defined() ? dtarget.raw_f32() : nullptr, n);
        return std::vector<Tensor>{dpred, dtarget};
    });
}

// ---------------------------------------------------------------------------------------------
// attention: scores, masked softmax, dropout and the value product in one op. The forward saves
// the dropout mask and, on CUDA, the probabilities P [B·H, T, S] (rows padded); on the CPU only
// each row's softmax max and 1/sum [B·H, T, 2], from which the backward recomputes P bit for bit
// (engine/cpu/nn.h). The backward is one fused kernel. Three entry points, one path: attention
// (q, k, v [B, H, T, D]), attention_tokens (q, k, v [B, T, H·D]) and attention_qkv (q, k, v column
// blocks of one [B, T, 3·H·D]); the layouts are engine/attention_layout.h's.
//
// On CUDA, when the fused path is switched on (cuda::set_fused_attention(true) or
// INITLAB_FUSED_ATTENTION=1; off by default, being the slower one on an H200, see
// engine/cuda/flash_attention.h), without a dropout mask (dropout_p == 0, or not training) and with
// a head dim that has a fused kernel (32, 64, 128), the fused path runs instead: P is never stored;
// the forward saves lse [B·H, T] (and the backward reads the output itself), and the backward
// recomputes P tile by tile. It takes the heads in the same layouts as the unfused path (no
// permutes). The unfused path stays the reference.

#ifdef ENGINE_CUDA
// The fused path; q, k, v (and out) as the unfused path takes them (attention_unfused below).
static Tensor attention_fused(const Tensor& q, const Tensor& k, const Tensor& v, int64_t BH, int64_t T, int64_t S,
                              int64_t D, int64_t heads, bool causal, float scale) {
    const AttentionHeads L = heads ? AttentionHeads::token_major(heads, D) : AttentionHeads::head_major(D);
    Tensor out = q.new_empty(q.shape());
    Tensor lse = q.new_empty({BH, T});
    cuda::flash_attention_forward(q.raw_f32(), k.raw_f32(), v.raw_f32(), out.raw_f32(), lse.raw_f32(), BH, T, S, D,
                                  causal, scale, L, L);
    // The closure keeps out.detach() (shares the storage, no node): capturing out itself would be a
    // cycle out -> node -> closure -> out.
    return attach(out, "attention", {q, k, v},
                  [q, k, v, lse, o = out.detach(), BH, T, S, D, causal, scale, L](const Tensor& g) {
        Tensor dq, dk, dv;
        if (q.requires_grad()) dq = q.new_empty(q.shape());
        if (k.requires_grad()) dk = q.new_empty(k.shape());
        if (v.requires_grad()) dv = q.new_empty(v.shape());
        cuda::flash_attention_backward(q.raw_f32(), k.raw_f32(), v.raw_f32(), o.raw_f32(), lse.raw_f32(),
                                       g.raw_f32(), dq.defined() ? dq.raw_f32() : nullptr,
                                       dk.defined() ? dk.raw_f32() : nullptr, dv.defined() ? dv.raw_f32() : nullptr,
                                       BH, T, S, D, causal, scale, L, L);
        return std::vector<Tensor>{dq, dk, dv};
    });
}

// attention_qkv's fused path: q, k, v read from qkv's column blocks, out written token-major, dq,
// dk and dv straight into d(qkv)'s column blocks (no permute, narrow or concat on either side).
static Tensor attention_qkv_fused(const Tensor& qkv, int64_t B, int64_t T, int64_t heads, int64_t D, bool causal,
                                  float scale) {
    const int64_t W = heads * D, BH = B * heads;
    const AttentionHeads in = AttentionHeads::token_major(heads, D, 3 * W), L = AttentionHeads::token_major(heads, D);
    Tensor out = qkv.new_empty({B, T, W});
    Tensor lse = qkv.new_empty({BH, T});
    const float* x = qkv.raw_f32();
    cuda::flash_attention_forward(x, x + W, x + 2 * W, out.raw_f32(), lse.raw_f32(), BH, T, T, D, causal, scale, in,
                                  L);
    return attach(out, "attention", {qkv},
                  [qkv, lse, o = out.detach(), BH, T, W, D, causal, scale, in, L](const Tensor& g) {
        Tensor dqkv = qkv.new_empty(qkv.shape());  // every column written: dq, dk and dv
        const float* x = qkv.raw_f32();
        float* d = dqkv.raw_f32();
        cuda::flash_attention_backward(x, x + W, x + 2 * W, o.raw_f32(), lse.raw_f32(), g.raw_f32(), d, d + W,
                                       d + 2 * W, BH, T, T, D, causal, scale, in, L);
        return std::vector<Tensor>{dqkv};
    });
}
#endif

// The unfused path's forward into out, and what its backward needs: the dropout mask and P (the
// CPU's row statistics of P).
// q, k, v are pointers: with attention_qkv, column blocks of one tensor (engine/attention_layout.h).
struct AttentionSaved {
    Tensor p, mask;
};
static AttentionSaved attention_unfused_forward(const Tensor& like, const float* q, const float* k, const float* v,
                                                float* out, int64_t BH, int64_t T, int64_t S, int64_t D,
                                                AttentionHeads in, AttentionHeads out_layout, bool causal,
                                                float dropout_p, bool dropout, float scale) {
    const Device dev = like.device();
    AttentionSaved saved;
    if (dropout) {
        saved.mask = like.new_empty({BH, T, S});
        draw_uniform(saved.mask);
        ON_DEVICE(dev, dropout_forward)(nullptr, saved.mask.raw_f32(), nullptr, saved.mask.numel(), dropout_p);
    }
    // The CUDA path keeps P, its rows padded to 16 bytes (engine/cuda/nn.h: attention_p_stride); the
    // CPU's keeps two floats a row.
    int64_t ldp = 2;
#ifdef ENGINE_CUDA
    if (dev == Device::CUDA) ldp = cuda::attention_p_stride(S);
#endif
    saved.p = like.new_empty({BH, T, ldp});
    ON_DEVICE(dev, attention_forward)(q, k, v, saved.mask.defined() ? saved.mask.raw_f32() : nullptr,
                                      saved.p.raw_f32(), out, BH, T, S, D, causal, scale, in, out_layout);
    return saved;
}

// The unfused path, q, k, v (and out) head-major or token-major ([B, rows, H·D]).
static Tensor attention_unfused(const Tensor& q, const Tensor& k, const Tensor& v, int64_t BH, int64_t T, int64_t S,
                                int64_t D, int64_t heads, bool causal, float dropout_p, bool dropout, float scale) {
    const Device dev = q.device();
    const AttentionHeads L = heads ? AttentionHeads::token_major(heads, D) : AttentionHeads::head_major(D);
    Tensor out = q.new_empty(q.shape());
    AttentionSaved saved = attention_unfused_forward(q, q.raw_f32(), k.raw_f32(), v.raw_f32(), out.raw_f32(), BH, T, S,
                                                     D, L, L, causal, dropout_p, dropout, scale);
    Tensor p = saved.p, mask = saved.mask;
    return attach(out, "attention", {q, k, v}, [q, k, v, p, mask, BH, T, S, D, causal, scale, L, dev](const Tensor& g) {
        Tensor dq, dk, dv;
        if (q.requires_grad()) dq = q.new_empty(q.shape());
        if (k.requires_grad()) dk = q.new_empty(k.shape());
        if (v.requires_grad()) dv = q.new_empty(v.shape());
        ON_DEVICE(dev, attention_backward)(q.raw_f32(), k.raw_f32(), v.raw_f32(),
                                           mask.defined() ? mask.raw_f32() : nullptr, p.raw_f32(), g.raw_f32(),
                                           dq.defined() ? dq.raw_f32() : nullptr,
                                           dk.defined() ? dk.raw_f32() : nullptr,
                                           dv.defined() ? dv.raw_f32() : nullptr, BH, T, S, D, causal, scale, L, L);
        return std::vector<Tensor>{dq, dk, dv};
    });
}

#ifdef ENGINE_CUDA
// Whether the fused (flash) path takes this call (see the top of this section).
static bool use_fused_attention(Device dev, bool dropout, int64_t D) {
    return dev == Device::CUDA && !dropout && cuda::flash_attention_supports(D) && cuda::fused_attention_enabled();
}
#endif

// attention's and attention_tokens's first checks: float32 on one device, each of rank ndim (what:
// the shapes expected, for the messages).
static void expect_attention_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, int ndim,
                                    std::array<const char*, 3> what) {
    const Tensor* inputs[3] = {&q, &k, &v};
    const char* names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) expect_f32(op, *inputs[i], names[i]);
    expect_same_device(op, q, k);
    expect_same_device(op, q, v);
    for (int i = 0; i < 3; i++) expect_ndim(op, *inputs[i], ndim, what[i]);
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, float dropout_p, bool training,
                 float scale) {
    expect_attention_inputs("attention", q, k, v, 4, {"q [B,H,T,D]", "k [B,H,S,D]", "v [B,H,S,D]"});
    const Shape &qs = q.shape(), &ks = k.shape();
    check(qs[0] == ks[0] && qs[1] == ks[1] && qs[3] == ks[3],
          "attention: q {} and k {} must agree on B, H and D", qs.str(), ks.str());
    check(v.shape() == ks, "attention: v {} must have the shape of k {}", v.shape().str(), ks.str());
    check(ks[2] > 0 && qs[3] > 0, "attention: q {} and k {}: no keys or empty head dim", qs.str(), ks.str());
    expect_probability("attention", dropout_p, "dropout_p");
    int64_t B = qs[0], H = qs[1], T = qs[2], S = ks[2], D = qs[3];
    if (scale <= 0.f) scale = 1.f / std::sqrt((float)D);
    const bool dropout = training && dropout_p > 0.f;
#ifdef ENGINE_CUDA
    if (use_fused_attention(q.device(), dropout, D)) return attention_fused(q, k, v, B * H, T, S, D, 0, causal, scale);
#endif
    return attention_unfused(q, k, v, B * H, T, S, D, 0, causal, dropout_p, dropout, scale);
}

Tensor attention_tokens(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, bool causal,
                        float dropout_p, bool training, float scale) {
    expect_attention_inputs("attention_tokens", q, k, v, 3, {"q [B,T,H·D]", "k [B,S,H·D]", "v [B,S,H·D]"});
    const Shape &qs = q.shape(), &ks = k.shape();
    check(heads > 0 && qs[2] % heads == 0, "attention_tokens: the width of q {} is not divisible by {} heads",
          qs.str(), heads);
    check(qs[0] == ks[0] && qs[2] == ks[2], "attention_tokens: q {} and k {} must agree on B and the width",
          qs.str(), ks.str());
    check(v.shape() == ks, "attention_tokens: v {} must have the shape of k {}", v.shape().str(), ks.str());
    check(ks[1] > 0 && qs[2] > 0, "attention_tokens: q {} and k {}: no keys or empty head dim", qs.str(), ks.str());
    expect_probability("attention_tokens", dropout_p, "dropout_p");
    int64_t B = qs[0], T = qs[1], S = ks[1], D = qs[2] / heads;
    const bool dropout = training && dropout_p > 0.f;
    if (scale <= 0.f) scale = 1.f / std::sqrt((float)D);
#ifdef ENGINE_CUDA
    if (use_fused_attention(q.device(), dropout, D))
        return attention_fused(q, k, v, B * heads, T, S, D, heads, causal, scale);
#endif
    return attention_unfused(q, k, v, B * heads, T, S, D, heads, causal, dropout_p, dropout, scale);
}

Tensor attention_qkv(const Tensor& qkv, int64_t heads, bool causal, float dropout_p, bool training, float scale) {
    expect_f32("attention_qkv", qkv, "qkv");
    expect_ndim("attention_qkv", qkv, 3, "qkv [B,T,3·H·D]");
    const Shape& qs = qkv.shape();
    check(heads > 0 && qs[2] % (3 * heads) == 0, "attention_qkv: the width of qkv {} is not 3 × {} heads × a head dim",
          qs.str(), heads);
    check(qs[1] > 0 && qs[2] > 0, "attention_qkv: qkv {}: no tokens or empty head dim", qs.str());
    expect_probability("attention_qkv", dropout_p, "dropout_p");
    const int64_t B = qs[0], T = qs[1], W = qs[2] / 3, D = W / heads, BH = B * heads;
    const bool dropout = training && dropout_p > 0.f;
    if (scale <= 0.f) scale = 1.f / std::sqrt((float)D);
#ifdef ENGINE_CUDA
    if (use_fused_attention(qkv.device(), dropout, D)) return attention_qkv_fused(qkv, B, T, heads, D, causal, scale);
#endif
    // q, k and v: the column blocks [0, W), [W, 2W) and [2W, 3W) of qkv's rows.
    const AttentionHeads in = AttentionHeads::token_major(heads, D, 3 * W), out_layout = AttentionHeads::token_major(heads, D);
    Tensor out = qkv.new_empty({B, T, W});
    const float* x = qkv.raw_f32();
    AttentionSaved saved = attention_unfused_forward(qkv, x, x + W, x + 2 * W, out.raw_f32(), BH, T, T, D, in,
                                                     out_layout, causal, dropout_p, dropout, scale);
    const Device dev = qkv.device();
    return attach(out, "attention", {qkv},
                  [qkv, p = saved.p, mask = saved.mask, BH, T, W, D, causal, scale, in, out_layout,
                   dev](const Tensor& g) {
        Tensor dqkv = qkv.new_empty(qkv.shape());  // every column written: dq, dk and dv
        const float* x = qkv.raw_f32();
        float* d = dqkv.raw_f32();
        ON_DEVICE(dev, attention_backward)(x, x + W, x + 2 * W, mask.defined() ? mask.raw_f32() : nullptr, p.raw_f32(),
                                           g.raw_f32(), d, d + W, d + 2 * W, BH, T, T, D, causal, scale, in,
                                           out_layout);
        return std::vector<Tensor>{dqkv};
    });
}

// ---------------------------------------------------------------------------------------------
// rope: a rotation per (position, pair); its backward is the rotation by the negative angle.

Tensor rope(const Tensor& x, float base, int64_t start_pos) {
    expect_f32("rope", x);
    check(x.ndim() >= 2, "rope: input must be [..., T, D], got {}", x.shape().str());
    int64_t T = x.size(-2), D = x.size(-1);
    check(D % 2 == 0, "rope: last dim D must be even, got {}", x.shape().str());
    check(base > 0.f, "rope: base must be > 0, got {}", base);
    check(start_pos >= 0, "rope: start_pos must be >= 0, got {}", start_pos);
    int64_t outer = T * D > 0 ? x.numel() / (T * D) : 0;
    const Device dev = x.device();
    Tensor y = x.new_empty(x.shape());
    ON_DEVICE(dev, rope_forward)(x.raw_f32(), y.raw_f32(), outer, T, D, base, start_pos);
    return attach(y, "rope", {x}, [outer, T, D, base, start_pos, dev](const Tensor& g) {
        Tensor dx = g.new_empty(g.shape());
        ON_DEVICE(dev, rope_backward)(g.raw_f32(), dx.raw_f32(), outer, T, D, base, start_pos);
        return std::vector<Tensor>{dx};
    });
}

Tensor scale_shift_rope(const Tensor& x, const Tensor& gamma, const Tensor& beta, float base) {
    const char* name = "scale_shift_rope";
    expect_f32(name, x);
    check(x.ndim() >= 2, "scale_shift_rope: input must be [..., T, D], got {}", x.shape().str());
    check(gamma.defined() && beta.defined(), "scale_shift_rope: gamma and beta are both needed");
    expect_layer_norm_params(name, x, gamma, beta, 0.f, "gamma", "beta");
    int64_t T = x.size(-2), D = x.size(-1);
    check(base <= 0.f || D % 2 == 0, "scale_shift_rope: a rotation needs an even last dim, got {}", x.shape().str());
    int64_t outer = T * D > 0 ? x.numel() / (T * D) : 0;
    const Device dev = x.device();
    Tensor y = x.new_empty(x.shape());
    ON_DEVICE(dev, scale_shift_rope_forward)(x.raw_f32(), gamma.raw_f32(), beta.raw_f32(), y.raw_f32(), outer, T, D,
                                             base);
    return attach(y, name, {x, gamma, beta}, [x, gamma, beta, outer, T, D, base, dev](const Tensor& g) {
        Tensor dx, dgamma, dbeta;
        bool adding = false;
        if (x.requires_grad()) dx = grad_target(x, g, adding);
        if (gamma.requires_grad()) dgamma = gamma.new_empty(gamma.shape());
        if (beta.requires_grad()) dbeta = beta.new_empty(beta.shape());
        auto raw = [](Tensor& t) { return t.defined() ? t.raw_f32() : nullptr; };
        ON_DEVICE(dev, scale_shift_rope_backward)(x.raw_f32(), gamma.raw_f32(), g.raw_f32(), raw(dx), adding,
                                                  raw(dgamma), raw(dbeta), outer, T, D, base);
        return std::vector<Tensor>{dx, dgamma, dbeta};
    });
}

}  // namespace engine
