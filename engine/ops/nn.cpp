// engine/ops/nn.cpp: the fused neural-network ops, forward and backward side by side. Each op
// checks its arguments, runs one forward kernel (engine/cpu/nn.cpp) and attaches a backward that
// runs one backward kernel, from what the forward saved.
#include "engine/ops/nn.h"

#include <cmath>
#include "engine/autograd.h"
#include "engine/cpu/nn.h"
#include "engine/ops/common.h"

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

static void expect_probability(const char* op, float p, const char* what) {
    check(p >= 0.f && p <= 1.f, "{}: {} must be in [0, 1], got {}", op, what, p);  // also rejects NaN
}

// ---------------------------------------------------------------------------------------------
// softmax, log_softmax: the backward needs only the output y.

Tensor softmax(const Tensor& x) {
    expect_f32("softmax", x);
    Rows r = last_dim_rows("softmax", x);
    Tensor y = Tensor::empty(x.shape());
    cpu::softmax_forward(x.data_f32(), y.data_f32(), r.rows, r.n);
    Tensor y_saved = y.detach();
    return attach(y, "softmax", {x}, [y_saved, r](const Tensor& g) {
        Tensor dx = Tensor::empty(y_saved.shape());
        cpu::softmax_backward(y_saved.data_f32(), g.data_f32(), dx.data_f32(), r.rows, r.n);
        return std::vector<Tensor>{dx};
    });
}

Tensor log_softmax(const Tensor& x) {
    expect_f32("log_softmax", x);
    Rows r = last_dim_rows("log_softmax", x);
    Tensor y = Tensor::empty(x.shape());
    cpu::log_softmax_forward(x.data_f32(), y.data_f32(), r.rows, r.n);
    Tensor y_saved = y.detach();
    return attach(y, "log_softmax", {x}, [y_saved, r](const Tensor& g) {
        Tensor dx = Tensor::empty(y_saved.shape());
        cpu::log_softmax_backward(y_saved.data_f32(), g.data_f32(), dx.data_f32(), r.rows, r.n);
        return std::vector<Tensor>{dx};
    });
}

// ---------------------------------------------------------------------------------------------
// layer_norm: the forward saves per-row mean and rstd, so the backward need not recompute them.

static void expect_norm_param(const Tensor& p, const char* what, const Tensor& x) {
    if (!p.defined()) return;
    expect_f32("layer_norm", p, what);
    expect_same_device("layer_norm", x, p);
    check(p.ndim() == 1 && p.size(0) == x.size(-1), "layer_norm: {} {} does not match the last dim of input {}",
          what, p.shape().str(), x.shape().str());
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
    expect_f32("layer_norm", x);
    Rows r = last_dim_rows("layer_norm", x);
    expect_norm_param(weight, "weight", x);
    expect_norm_param(bias, "bias", x);
    check(eps >= 0.f, "layer_norm: eps must be >= 0, got {}", eps);
    Tensor y = Tensor::empty(x.shape());
    Tensor mean = Tensor::empty({r.rows}), rstd = Tensor::empty({r.rows});
    const float* pw = weight.defined() ? weight.data_f32() : nullptr;
    const float* pb = bias.defined() ? bias.data_f32() : nullptr;
    cpu::layer_norm_forward(x.data_f32(), pw, pb, y.data_f32(), mean.data_f32(), rstd.data_f32(), r.rows, r.n, eps);

    return attach(y, "layer_norm", {x, weight, bias}, [x, weight, bias, mean, rstd, r](const Tensor& g) {
        Tensor dx, dw, db;
        if (x.requires_grad()) dx = Tensor::empty(x.shape());
        if (weight.defined() && weight.requires_grad()) dw = Tensor::empty(weight.shape());
        if (bias.defined() && bias.requires_grad()) db = Tensor::empty(bias.shape());
        cpu::layer_norm_backward(x.data_f32(), weight.defined() ? weight.data_f32() : nullptr, mean.data_f32(),
                                 rstd.data_f32(), g.data_f32(), dx.defined() ? dx.data_f32() : nullptr,
                                 dw.defined() ? dw.data_f32() : nullptr, db.defined() ? db.data_f32() : nullptr,
                                 r.rows, r.n);
        return std::vector<Tensor>{dx, dw, db};
    });
}

// ---------------------------------------------------------------------------------------------
// dropout: the scaled keep mask is drawn from the global Philox stream (value i is a function of
// (seed, offset, i), so a GPU kernel reproduces it) and saved; the backward is dy·mask.

Tensor dropout(const Tensor& x, float p, bool training) {
    expect_f32("dropout", x);
    expect_probability("dropout", p, "p");
    if (!training || p == 0.f) return x;
    int64_t n = x.numel();
    Tensor mask = Tensor::empty(x.shape());
    global_generator().uniform(mask.data_f32(), n, 0.f, 1.f);
    Tensor y = Tensor::empty(x.shape());
    cpu::dropout_forward(x.data_f32(), mask.data_f32(), y.data_f32(), n, p);
    return attach(y, "dropout", {x}, [mask, n](const Tensor& g) {
        Tensor dx = Tensor::empty(mask.shape());
        cpu::dropout_backward(mask.data_f32(), g.data_f32(), dx.data_f32(), n);
        return std::vector<Tensor>{dx};
    });
}

// ---------------------------------------------------------------------------------------------
// cross_entropy: log-softmax and NLL in one kernel. The forward saves only the per-row
// log-sum-exp; the backward recomputes the probabilities from the logits (llm.c's fused
// classifier), so no [rows, C] probability tensor is kept alive between forward and backward.

// Checks every target is ignore_index or a class in [0, C); returns how many are not ignored.
static int64_t count_targets(const Tensor& targets, int64_t C, int32_t ignore_index) {
    const int32_t* t = targets.data_i32();
    int64_t count = 0;
    for (int64_t r = 0; r < targets.numel(); r++) {
        if (t[r] == ignore_index) continue;
        check(t[r] >= 0 && t[r] < C,
              "cross_entropy: target {} at position {} is out of range [0, {}) (ignore_index {})", t[r], r, C,
              ignore_index);
        count++;
    }
    return count;
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
    int64_t count = count_targets(targets, C, ignore_index);

    Tensor loss = Tensor::empty(Shape{});
    Tensor lse = Tensor::empty({rows});
    cpu::cross_entropy_forward(logits.data_f32(), targets.data_i32(), loss.data_f32(), lse.data_f32(), rows, C,
                               count, ignore_index, label_smoothing);

    return attach(loss, "cross_entropy", {logits, targets},
                  [logits, targets, lse, rows, C, count, ignore_index, label_smoothing](const Tensor& g) {
        Tensor dlogits = Tensor::empty(logits.shape());
        cpu::cross_entropy_backward(logits.data_f32(), targets.data_i32(), lse.data_f32(), g.data_f32(),
                                    dlogits.data_f32(), rows, C, count, ignore_index, label_smoothing);
        return std::vector<Tensor>{dlogits, Tensor()};
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
    Tensor loss = Tensor::empty(Shape{});
    cpu::mse_forward(pred.data_f32(), target.data_f32(), loss.data_f32(), n);
    return attach(loss, "mse_loss", {pred, target}, [pred, target, n](const Tensor& g) {
        Tensor dpred, dtarget;
        if (pred.requires_grad()) dpred = Tensor::empty(pred.shape());
        if (target.requires_grad()) dtarget = Tensor::empty(target.shape());
        cpu::mse_backward(pred.data_f32(), target.data_f32(), g.data_f32(),
                          dpred.defined() ? dpred.data_f32() : nullptr,
                          dtarget.defined() ? dtarget.data_f32() : nullptr, n);
        return std::vector<Tensor>{dpred, dtarget};
    });
}

// ---------------------------------------------------------------------------------------------
// attention: scores, masked softmax, dropout and the value product in one op. The forward saves
// the probabilities P [B, H, T, S] and the dropout mask; the backward is one fused kernel.

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, float dropout_p, bool training,
                 float scale) {
    expect_f32("attention", q, "q");
    expect_f32("attention", k, "k");
    expect_f32("attention", v, "v");
    expect_same_device("attention", q, k);
    expect_same_device("attention", q, v);
    expect_ndim("attention", q, 4, "q [B,H,T,D]");
    expect_ndim("attention", k, 4, "k [B,H,S,D]");
    expect_ndim("attention", v, 4, "v [B,H,S,D]");
    const Shape &qs = q.shape(), &ks = k.shape();
    check(qs[0] == ks[0] && qs[1] == ks[1] && qs[3] == ks[3],
          "attention: q {} and k {} must agree on B, H and D", qs.str(), ks.str());
    check(v.shape() == ks, "attention: v {} must have the shape of k {}", v.shape().str(), ks.str());
    check(ks[2] > 0 && qs[3] > 0, "attention: q {} and k {}: no keys or empty head dim", qs.str(), ks.str());
    expect_probability("attention", dropout_p, "dropout_p");
    int64_t B = qs[0], H = qs[1], T = qs[2], S = ks[2], D = qs[3], BH = B * H;
    if (scale <= 0.f) scale = 1.f / std::sqrt((float)D);

    Tensor mask;
    if (training && dropout_p > 0.f) {
        mask = Tensor::empty({B, H, T, S});
        global_generator().uniform(mask.data_f32(), mask.numel(), 0.f, 1.f);
        cpu::dropout_forward(nullptr, mask.data_f32(), nullptr, mask.numel(), dropout_p);
    }
    Tensor p = Tensor::empty({B, H, T, S});
    Tensor out = Tensor::empty(qs);
    const float* pm = mask.defined() ? mask.data_f32() : nullptr;
    cpu::attention_forward(q.data_f32(), k.data_f32(), v.data_f32(), pm, p.data_f32(), out.data_f32(), BH, T, S, D,
                           causal, scale);

    return attach(out, "attention", {q, k, v}, [q, k, v, p, mask, BH, T, S, D, scale](const Tensor& g) {
        Tensor dq, dk, dv;
        if (q.requires_grad()) dq = Tensor::empty(q.shape());
        if (k.requires_grad()) dk = Tensor::empty(k.shape());
        if (v.requires_grad()) dv = Tensor::empty(v.shape());
        cpu::attention_backward(q.data_f32(), k.data_f32(), v.data_f32(), mask.defined() ? mask.data_f32() : nullptr,
                                p.data_f32(), g.data_f32(), dq.defined() ? dq.data_f32() : nullptr,
                                dk.defined() ? dk.data_f32() : nullptr, dv.defined() ? dv.data_f32() : nullptr, BH,
                                T, S, D, scale);
        return std::vector<Tensor>{dq, dk, dv};
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
    Tensor y = Tensor::empty(x.shape());
    cpu::rope_forward(x.data_f32(), y.data_f32(), outer, T, D, base, start_pos);
    return attach(y, "rope", {x}, [outer, T, D, base, start_pos](const Tensor& g) {
        Tensor dx = Tensor::empty(g.shape());
        cpu::rope_backward(g.data_f32(), dx.data_f32(), outer, T, D, base, start_pos);
        return std::vector<Tensor>{dx};
    });
}

}  // namespace engine
