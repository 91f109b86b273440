// engine/ops/matmul.cpp: matmul, linear, gelu_linear and layer_norm_linear, forward and backward
// side by side. The GEMMs run on the operands' device (ON_DEVICE: OpenBLAS on the CPU, cuBLAS on the
// GPU, engine/cuda/matmul.cu); every tensor made here is on that device.
#include "engine/ops/matmul.h"

#include "engine/autograd.h"
#include "engine/cpu/elementwise.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/nn.h"
#include "engine/cpu/reduce.h"
#include "engine/ops/common.h"
#include "engine/ops/dispatch.h"
#include "engine/ops/reduce.h"
#ifdef ENGINE_CUDA
#include "engine/cuda/elementwise.h"
#include "engine/cuda/matmul.h"
#include "engine/cuda/nn.h"
#include "engine/cuda/reduce.h"
#endif

namespace engine {

// For C = op(A)·op(B):
//   dA = dC·op(B)ᵀ       (A stored untransposed)   or  op(B)·dCᵀ (A stored transposed)
//   dB = op(A)ᵀ·dC       (B stored untransposed)   or  dCᵀ·op(A) (B stored transposed)
// An operand shared across a batch gets its gradient summed over the batch (sum_to).
Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
    expect_f32("matmul", a, "a");
    expect_f32("matmul", b, "b");
    expect_same_device("matmul", a, b);
    const Shape &as = a.shape(), &bs = b.shape();
    check(as.ndim >= 2 && bs.ndim >= 2, "matmul: {} x {}: both operands need at least 2 dims", as.str(), bs.str());
    int64_t M = ta ? as[as.ndim - 1] : as[as.ndim - 2], K = ta ? as[as.ndim - 2] : as[as.ndim - 1];
    int64_t Kb = tb ? bs[bs.ndim - 1] : bs[bs.ndim - 2], N = tb ? bs[bs.ndim - 2] : bs[bs.ndim - 1];
    check(K == Kb, "matmul: {}{} x {}{}: inner dims differ ({} vs {})", as.str(), ta ? "ᵀ" : "", bs.str(),
          tb ? "ᵀ" : "", K, Kb);

    // Batch dims: equal on both sides, or one operand is a plain matrix shared by the batch.
    bool a_batched = as.ndim > 2, b_batched = bs.ndim > 2;
    const Shape& batch_src = a_batched ? as : bs;
    if (a_batched && b_batched) {
        bool same = as.ndim == bs.ndim;
        for (int i = 0; same && i < as.ndim - 2; i++) same = as[i] == bs[i];
        check(same, "matmul: {} x {}: batch dims differ", as.str(), bs.str());
    }
    std::vector<int64_t> out_dims;
    int64_t batch = 1;
    for (int i = 0; i < batch_src.ndim - 2; i++) {
        out_dims.push_back(batch_src[i]);
        batch *= batch_src[i];
    }
    out_dims.push_back(M);
    out_dims.push_back(N);
    Tensor out = a.new_empty(Shape(out_dims));
    Device dev = a.device();
    if (a_batched && !b_batched && !ta)  // rows of all batch entries form one tall GEMM
        ON_DEVICE(dev, gemm)(false, tb, batch * M, N, K, 1.f, a.raw_f32(), b.raw_f32(), 0.f, out.raw_f32());
    else
        ON_DEVICE(dev, gemm_batched)(ta, tb, batch, M, N, K, a.raw_f32(), a_batched ? M * K : 0, b.raw_f32(),
                                     b_batched ? K * N : 0, out.raw_f32(), M * N);

    return attach(out, "matmul", {a, b}, [a, b, ta, tb](const Tensor& g) {
        Tensor da, db;
        if (a.requires_grad())
            da = sum_to(ta ? matmul(b, g, tb, true) : matmul(g, b, false, !tb), a.shape());
        if (b.requires_grad())
            db = sum_to(tb ? matmul(g, a, true, ta) : matmul(a, g, !ta, false), b.shape());
        return std::vector<Tensor>{da, db};
    });
}

// y = x·Wᵀ + b over rows R = numel(x)/in:  dx = dy·W,  dW = dyᵀ·x,  db = Σ_rows dy.
// y = x·Wᵀ + b by gemm_bias: the bias tiled over the rows (bias_rows), then += x·Wᵀ (the GEMM with
// beta = 1), or on CUDA cuBLASLt's bias epilogue where it is on; db is the column-sum kernel's
// (sum_dim). Until session 12 the GPU did both as GEMMs with a filled column of ones, 1_R·bᵀ and
// 1_Rᵀ·dy: cuBLAS's rank-1 and reduction kernels, slower than these on an H100.
namespace {

// linear's argument checks (messages name `op`); returns the rows of x.
int64_t check_linear_args(const char* op, const Tensor& x, const Tensor& w, const Tensor& b) {
    expect_f32(op, x, "x");
    expect_f32(op, w, "weight");
    expect_same_device(op, x, w);
    if (b.defined()) expect_same_device(op, x, b);
    check(w.ndim() == 2, "{}: weight must be [out, in], got {}", op, w.shape().str());
    int64_t in = w.size(1), out_f = w.size(0);
    check(x.ndim() >= 1 && x.size(-1) == in, "{}: input {} does not end in in_features={} (weight {})", op,
          x.shape().str(), in, w.shape().str());
    if (b.defined()) {
        expect_f32(op, b, "bias");
        check(b.ndim() == 1 && b.size(0) == out_f, "{}: bias {} does not match weight {}", op, b.shape().str(),
              w.shape().str());
    }
    return in > 0 ? x.numel() / in : 0;
}

// The shape of linear's output: x's with the last dim out_features.
Shape linear_shape(const Tensor& x, const Tensor& w) {
    Shape os = x.shape();
    os[os.ndim - 1] = w.size(0);
    return os;
}

// A residual added by linear's GEMM (undefined: none) is a float tensor of the output's shape on
// x's device.
void check_residual(const char* op, const Tensor& x, const Tensor& w, const Tensor& residual) {
    if (!residual.defined()) return;
    expect_f32(op, residual, "residual");
    expect_same_device(op, x, residual);
    check(residual.shape() == linear_shape(x, w), "{}: residual {} is not the output's shape {} (input {}, weight {})",
          op, residual.shape().str(), linear_shape(x, w).str(), x.shape().str(), w.shape().str());
}

// y = residual + x·Wᵀ + b (residual, b optional), shaped as linear_shape. No node. With a residual,
// its rows plus the bias are written first and the GEMM adds into them (beta = 1).
Tensor linear_product(const Tensor& x, const Tensor& w, const Tensor& b, int64_t rows,
                      const Tensor& residual = Tensor()) {
    int64_t in = w.size(1), out_f = w.size(0);
    Tensor y = x.new_empty(linear_shape(x, w));
    Device dev = x.device();
    float* py = y.raw_f32();
    if (b.defined() || residual.defined())
        ON_DEVICE(dev, gemm_bias)(false, true, rows, out_f, in, x.raw_f32(), w.raw_f32(),
                                  b.defined() ? b.raw_f32() : nullptr, py,
                                  residual.defined() ? residual.raw_f32() : nullptr);
    else
        ON_DEVICE(dev, gemm)(false, true, rows, out_f, in, 1.f, x.raw_f32(), w.raw_f32(), 0.f, py);
    return y;
}

// Where a backward GEMM writes the gradient of input t: into the gradient autograd has already
// accumulated for t, adding to it (beta = 1; engine/autograd.h, accumulated_grad: intermediates
// only, so in practice dX), else into a new tensor (beta = 0).
Tensor grad_buffer(const Tensor& g, const Tensor& t, float& beta) {
    bool adding;
    Tensor buf = grad_target(t, g, adding);
    beta = adding ? 1.f : 0.f;
    return buf;
}

// linear's parameter gradients, dW = gᵀ·x and db = Σ_rows g (undefined where not wanted), for x
// viewed as [rows, in]; both at once by gemm_dbias (on CUDA the sums may come from the GEMM's own
// pass over g).
void linear_param_grads(const Tensor& g, const Tensor& x, const Tensor& w, const Tensor& b, int64_t rows, Tensor& dw,
                        Tensor& db) {
    Device dev = g.device();
    int64_t in = w.size(1), out_f = w.size(0);
    if (b.defined() && b.requires_grad()) db = g.new_empty(b.shape());
    if (w.requires_grad()) {
        float beta;
        dw = grad_buffer(g, w, beta);
        if (db.defined())
            ON_DEVICE(dev, gemm_dbias)(true, false, out_f, in, rows, g.raw_f32(), x.raw_f32(), beta, dw.raw_f32(),
                                       db.raw_f32());
        else
            ON_DEVICE(dev, gemm)(true, false, out_f, in, rows, 1.f, g.raw_f32(), x.raw_f32(), beta, dw.raw_f32());
    } else if (db.defined()) {
        ON_DEVICE(dev, sum_dim)(g.raw_f32(), db.raw_f32(), 1, rows, out_f);
    }
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& residual) {
    int64_t rows = check_linear_args("linear", x, w, b);
    check_residual("linear", x, w, residual);
    Tensor y = linear_product(x, w, b, rows, residual);
    // The residual's gradient is g itself, handed on as add hands it to its inputs (no copy).
    return attach(y, "linear", {x, w, b, residual}, [x, w, b, rows](const Tensor& g) {
        Tensor dx, dw, db;
        if (x.requires_grad()) {
            float beta;
            dx = grad_buffer(g, x, beta);
            ON_DEVICE(g.device(), gemm)(false, false, rows, w.size(1), w.size(0), 1.f, g.raw_f32(), w.raw_f32(), beta,
                                        dx.raw_f32());
        }
        linear_param_grads(g, x, w, b, rows, dw, db);
        return std::vector<Tensor>{dx, dw, db, g};
    });
}

// The GELU's output A = gelu(h + b1) is what fc2's weight gradient needs (dW = dyᵀ·A), and it is
// as large as h (4·width per token in a transformer MLP). Keeping h and recomputing A in the
// backward costs one more write of A, done by the pass that computes dh anyway (the GELU's erf is
// shared by gelu and gelu'), and no buffer: A is written over dA once dA is read.
Tensor gelu_linear(const Tensor& h, const Tensor& b1, const Tensor& w, const Tensor& b, bool approximate,
                   const Tensor& residual) {
    const char* name = "gelu_linear";
    int64_t rows = check_linear_args(name, h, w, b);
    check_residual(name, h, w, residual);
    expect_f32(name, b1, "gelu bias");
    expect_same_device(name, h, b1);
    check(b1.ndim() == 1 && b1.size(0) == h.size(-1), "gelu_linear: gelu bias {} does not match the last dim of input {}",
          b1.shape().str(), h.shape().str());
    int64_t hidden = h.size(-1);
    const pointwise::BiasAct act = approximate ? pointwise::BiasAct::GeluTanh : pointwise::BiasAct::Gelu;
    Tensor y;
    {
        Tensor a = h.new_empty(h.shape());  // freed here, not kept for the backward
        ON_DEVICE(h.device(), bias_act_forward)(h.raw_f32(), b1.raw_f32(), a.raw_f32(), rows, hidden, act);
        y = linear_product(a, w, b, rows, residual);
    }
    return attach(y, name, {h, b1, w, b, residual}, [h, b1, w, b, rows, hidden, act](const Tensor& g) {
        expect_same_device("gelu_linear", h, g);
        Device dev = g.device();
        Tensor buf = h.new_empty(h.shape());  // dA, then A
        Tensor dh, db1, dw, db;
        if (h.requires_grad() || b1.requires_grad()) {
            ON_DEVICE(dev, gemm)(false, false, rows, hidden, w.size(0), 1.f, g.raw_f32(), w.raw_f32(), 0.f,
                                 buf.raw_f32());
            dh = h.new_empty(h.shape());  // also when only db1 is wanted: CUDA sums it from dh
            if (b1.requires_grad()) db1 = b1.new_empty(b1.shape());
            ON_DEVICE(dev, bias_act_backward)(h.raw_f32(), b1.raw_f32(), buf.raw_f32(), dh.raw_f32(),
                                              db1.defined() ? db1.raw_f32() : nullptr,
                                              w.requires_grad() ? buf.raw_f32() : nullptr, rows, hidden, act);
            if (!h.requires_grad()) dh = Tensor();
        } else if (w.requires_grad()) {
            ON_DEVICE(dev, bias_act_forward)(h.raw_f32(), b1.raw_f32(), buf.raw_f32(), rows, hidden, act);
        }
        linear_param_grads(g, buf, w, b, rows, dw, db);
        return std::vector<Tensor>{dh, db1, dw, db, g};
    });
}

// The LayerNorm's output Y = layer_norm(x) is what the linear's weight gradient needs (dW = dyᵀ·Y),
// and it is as large as x, which the LayerNorm's own backward keeps anyway. So the op keeps x and
// the row statistics, and the backward runs the forward kernel again to rebuild Y (the same bits:
// the same kernel on the same x) into the buffer that then takes dY = dy·W, once dW has read Y.
// One more LayerNorm pass per step, and no [rows, in] tensor kept from the forward to the backward.
Tensor layer_norm_linear(const Tensor& x, const Tensor& norm_weight, const Tensor& norm_bias, float eps,
                         const Tensor& w, const Tensor& b) {
    const char* name = "layer_norm_linear";
    int64_t rows = check_linear_args(name, x, w, b);
    expect_layer_norm_params(name, x, norm_weight, norm_bias, eps, "norm weight", "norm bias");
    int64_t n = x.size(-1);
    const float* pnw = norm_weight.defined() ? norm_weight.raw_f32() : nullptr;
    const float* pnb = norm_bias.defined() ? norm_bias.raw_f32() : nullptr;
    Tensor mean = x.new_empty({rows}), rstd = x.new_empty({rows}), y;
    {
        Tensor normed = x.new_empty(x.shape());  // freed here, not kept for the backward
        ON_DEVICE(x.device(), layer_norm_forward)(x.raw_f32(), pnw, pnb, normed.raw_f32(), mean.raw_f32(),
                                                  rstd.raw_f32(), rows, n, eps);
        y = linear_product(normed, w, b, rows);
    }
    return attach(y, name, {x, norm_weight, norm_bias, w, b},
                  [x, norm_weight, norm_bias, w, b, mean, rstd, rows, n, eps](const Tensor& g) {
        expect_same_device("layer_norm_linear", x, g);
        Device dev = g.device();
        const float* pnw = norm_weight.defined() ? norm_weight.raw_f32() : nullptr;
        const float* pnb = norm_bias.defined() ? norm_bias.raw_f32() : nullptr;
        Tensor buf = x.new_empty(x.shape());  // the norm's output Y, then its gradient dY
        Tensor dx, dnw, dnb, dw, db;
        if (w.requires_grad()) {
            // The statistics come out as the forward's; they go to scratch, not over the saved ones.
            Tensor scratch = x.new_empty({2, rows});
            ON_DEVICE(dev, layer_norm_forward)(x.raw_f32(), pnw, pnb, buf.raw_f32(), scratch.raw_f32(),
                                               scratch.raw_f32() + rows, rows, n, eps);
        }
        linear_param_grads(g, buf, w, b, rows, dw, db);
        bool norm_weight_grad = norm_weight.defined() && norm_weight.requires_grad();
        bool norm_bias_grad = norm_bias.defined() && norm_bias.requires_grad();
        if (x.requires_grad() || norm_weight_grad || norm_bias_grad) {
            ON_DEVICE(dev, gemm)(false, false, rows, n, w.size(0), 1.f, g.raw_f32(), w.raw_f32(), 0.f, buf.raw_f32());
            // dx adds into the gradient x already has, as layer_norm's backward does (engine/ops/nn.cpp).
            bool add_dx = false;
            if (x.requires_grad()) dx = grad_target(x, x, add_dx);
            if (norm_weight_grad) dnw = x.new_empty(norm_weight.shape());
            if (norm_bias_grad) dnb = x.new_empty(norm_bias.shape());
            ON_DEVICE(dev, layer_norm_backward)(x.raw_f32(), pnw, mean.raw_f32(), rstd.raw_f32(), buf.raw_f32(),
                                                dx.defined() ? dx.raw_f32() : nullptr, add_dx,
                                                dnw.defined() ? dnw.raw_f32() : nullptr,
                                                dnb.defined() ? dnb.raw_f32() : nullptr, rows, n);
        }
        return std::vector<Tensor>{dx, dnw, dnb, dw, db};
    });
}

}  // namespace engine
