// engine/ops/elementwise.cpp: pointwise ops, forward and backward side by side.
// The scalar math of each unary op is in engine/ops/pointwise.h; the loops in engine/cpu/ and the
// kernels in engine/cuda/elementwise.cu (ON_DEVICE picks the input's device). Outputs and
// gradients are made on the input's device; binary ops refuse inputs on different devices.
#include "engine/ops/elementwise.h"

#include "engine/autograd.h"
#include "engine/cpu/elementwise.h"
#include "engine/ops/common.h"
#include "engine/ops/dispatch.h"
#include "engine/ops/pointwise.h"
#include "engine/ops/reduce.h"
#ifdef ENGINE_CUDA
#include "engine/cuda/elementwise.h"
#endif

namespace engine {

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
    int nd = std::max(a.ndim, b.ndim);
    check(nd <= kMaxDims, "{}: broadcasting {} and {} needs more than {} dims", op, a.str(), b.str(), kMaxDims);
    Shape out;
    out.ndim = nd;
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - a.ndim), ib = i - (nd - b.ndim);
        int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
        check(da == db || da == 1 || db == 1, "{}: shapes {} and {} cannot be broadcast (dim {}: {} vs {})", op,
              a.str(), b.str(), i, da, db);
        out[i] = da == 1 ? db : da;
    }
    return out;
}

static Shape left_pad(const Shape& s, int nd) {
    Shape out;
    out.ndim = nd;
    for (int i = 0; i < nd; i++) out[i] = i < nd - s.ndim ? 1 : s[i - (nd - s.ndim)];
    return out;
}

static Tensor binary(cpu::BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
    expect_f32(name, a, "a");
    expect_f32(name, b, "b");
    expect_same_device(name, a, b);
    Shape os = broadcast_shapes(a.shape(), b.shape(), name);
    Tensor out = a.new_empty(os);
    ON_DEVICE(a.device(), binary)(op, a.raw_f32(), left_pad(a.shape(), os.ndim), b.raw_f32(),
                                  left_pad(b.shape(), os.ndim), out.raw_f32(), os);
    return out;
}

// d(a+b) = (g, g); d(a-b) = (g, -g); d(a·b) = (g·b, g·a); d(a/b) = (g/b, -g·a/b²).
// Each is summed back to its input's shape when the input was broadcast.
// add and sub keep their inputs' shapes, not the inputs: a closure holding an input would keep its
// data alive until the backward (engine/tensor.h, TensorImpl::node_refs), and in a residual block
// the inputs are the branch outputs, which nothing else needs. An input that needs no gradient
// gets none: a broadcast one (ViT's fixed position table) would cost a sum over the batch.
Tensor add(const Tensor& a, const Tensor& b) {
    return attach(binary(cpu::BinaryOp::Add, "add", a, b), "add", {a, b},
                  [as = a.shape(), bs = b.shape(), ga = a.requires_grad(), gb = b.requires_grad()](const Tensor& g) {
                      return std::vector<Tensor>{ga ? sum_to(g, as) : Tensor(), gb ? sum_to(g, bs) : Tensor()};
                  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
    return attach(binary(cpu::BinaryOp::Sub, "sub", a, b), "sub", {a, b},
                  [as = a.shape(), bs = b.shape(), ga = a.requires_grad(), gb = b.requires_grad()](const Tensor& g) {
                      return std::vector<Tensor>{ga ? sum_to(g, as) : Tensor(), gb ? sum_to(neg(g), bs) : Tensor()};
                  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
    return attach(binary(cpu::BinaryOp::Mul, "mul", a, b), "mul", {a, b}, [a, b](const Tensor& g) {
        return std::vector<Tensor>{a.requires_grad() ? sum_to(mul(g, b), a.shape()) : Tensor(),
                                   b.requires_grad() ? sum_to(mul(g, a), b.shape()) : Tensor()};
    });
}

Tensor div(const Tensor& a, const Tensor& b) {
    return attach(binary(cpu::BinaryOp::Div, "div", a, b), "div", {a, b}, [a, b](const Tensor& g) {
        Tensor ga = div(g, b);
        return std::vector<Tensor>{a.requires_grad() ? sum_to(ga, a.shape()) : Tensor(),
                                   b.requires_grad() ? sum_to(neg(mul(ga, div(a, b))), b.shape()) : Tensor()};
    });
}

static Tensor scalar_op(cpu::BinaryOp op, const char* name, const Tensor& a, float s) {
    expect_f32(name, a);
    Tensor out = a.new_empty(a.shape());
    ON_DEVICE(a.device(), binary_scalar)(op, a.raw_f32(), s, out.raw_f32(), a.numel());
    return out;
}

Tensor add(const Tensor& a, float s) {
    return attach(scalar_op(cpu::BinaryOp::Add, "add", a, s), "add_scalar", {a},
                  [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor mul(const Tensor& a, float s) {
    return attach(scalar_op(cpu::BinaryOp::Mul, "mul", a, s), "mul_scalar", {a},
                  [s](const Tensor& g) { return std::vector<Tensor>{mul(g, s)}; });
}

Tensor rsub(float s, const Tensor& a) { return add(neg(a), s); }

Tensor rdiv(float s, const Tensor& a) { return mul(pow(a, -1.f), s); }

// ---------------------------------------------------------------------------------------------
// Unary ops: y = F::f(x), dx = g·F::df(x, y). The backward keeps x and y only where df reads them
// (F::kReadsX, F::kReadsY: engine/ops/pointwise.h), so relu2's output or tanh's input is not
// held until the backward for nothing.

template <typename F>
static Tensor unary(const char* name, const Tensor& x) {
    expect_f32(name, x);
    Tensor y = x.new_empty(x.shape());
    ON_DEVICE(x.device(), unary_forward<F>)(x.raw_f32(), y.raw_f32(), x.numel());
    Tensor x_saved = F::kReadsX ? x : Tensor();
    Tensor y_saved = F::kReadsY ? y.detach() : Tensor();  // not y itself: the node must not own its output
    return attach(y, name, {x}, [name, x_saved, y_saved, device = x.device()](const Tensor& g) {
        check(g.device() == device, "{}: the gradient is on {} but the input was on {}", name,
              device_name(g.device()), device_name(device));
        Tensor dx = g.new_empty(g.shape());
        ON_DEVICE(device, unary_backward<F>)(x_saved.defined() ? x_saved.raw_f32() : nullptr,
                                             y_saved.defined() ? y_saved.raw_f32() : nullptr, g.raw_f32(),
                                             dx.raw_f32(), g.numel());
        return std::vector<Tensor>{dx};
    });
}

Tensor neg(const Tensor& x) { return unary<pointwise::Neg>("neg", x); }
Tensor exp(const Tensor& x) { return unary<pointwise::Exp>("exp", x); }
Tensor log(const Tensor& x) { return unary<pointwise::Log>("log", x); }
Tensor sqrt(const Tensor& x) { return unary<pointwise::Sqrt>("sqrt", x); }
Tensor rsqrt(const Tensor& x) { return unary<pointwise::Rsqrt>("rsqrt", x); }
Tensor abs(const Tensor& x) { return unary<pointwise::Abs>("abs", x); }
Tensor tanh(const Tensor& x) { return unary<pointwise::Tanh>("tanh", x); }
Tensor sigmoid(const Tensor& x) { return unary<pointwise::Sigmoid>("sigmoid", x); }
Tensor relu(const Tensor& x) { return unary<pointwise::Relu>("relu", x); }
Tensor relu2(const Tensor& x) { return unary<pointwise::Relu2>("relu2", x); }
Tensor gelu(const Tensor& x) { return unary<pointwise::Gelu>("gelu", x); }
Tensor gelu_tanh(const Tensor& x) { return unary<pointwise::GeluTanh>("gelu_tanh", x); }
Tensor silu(const Tensor& x) { return unary<pointwise::Silu>("silu", x); }

// bias_gelu and bias_silu save nothing of their own: the backward recomputes x + bias from x and
// bias. The node holds its inputs x and bias anyway, so that costs no memory; saving x + bias
// instead would keep a second [rows, n] tensor alive until the backward (and write it in the
// forward). Nor do they need the output y: the derivatives are functions of the input only.
static Tensor bias_activation(const char* name, const Tensor& x, const Tensor& bias, pointwise::BiasAct act) {
    expect_f32(name, x);
    expect_f32(name, bias, "bias");
    expect_same_device(name, x, bias);
    check(x.ndim() >= 1 && bias.ndim() == 1 && bias.size(0) == x.size(-1),
          "{}: bias {} does not match the last dim of input {}", name, bias.shape().str(), x.shape().str());
    int64_t n = x.size(-1), rows = n > 0 ? x.numel() / n : 0;
    Tensor y = x.new_empty(x.shape());
    ON_DEVICE(x.device(), bias_act_forward)(x.raw_f32(), bias.raw_f32(), y.raw_f32(), rows, n, act);
    return attach(y, name, {x, bias}, [name, x, bias, rows, n, act](const Tensor& g) {
        expect_same_device(name, x, g);
        Tensor dx = x.new_empty(x.shape());  // also when only dbias is wanted: CUDA sums it from dx
        Tensor dbias = bias.requires_grad() ? bias.new_empty(bias.shape()) : Tensor();
        ON_DEVICE(x.device(), bias_act_backward)(x.raw_f32(), bias.raw_f32(), g.raw_f32(), dx.raw_f32(),
                                                 dbias.defined() ? dbias.raw_f32() : nullptr, nullptr, rows, n,
                                                 act);
        return std::vector<Tensor>{x.requires_grad() ? dx : Tensor(), dbias};
    });
}

Tensor bias_gelu(const Tensor& x, const Tensor& bias, bool approximate) {
    return bias_activation("bias_gelu", x, bias, approximate ? pointwise::BiasAct::GeluTanh : pointwise::BiasAct::Gelu);
}

Tensor bias_silu(const Tensor& x, const Tensor& bias) {
    return bias_activation("bias_silu", x, bias, pointwise::BiasAct::Silu);
}

Tensor bias_silu_gate(const Tensor& x, const Tensor& bias, const Tensor& gate) {
    const char* name = "bias_silu_gate";
    expect_f32(name, x);
    expect_f32(name, bias, "bias");
    expect_f32(name, gate, "gate");
    expect_same_device(name, x, bias);
    expect_same_device(name, x, gate);
    check(x.ndim() >= 1 && bias.ndim() == 1 && bias.size(0) == x.size(-1),
          "{}: bias {} does not match the last dim of input {}", name, bias.shape().str(), x.shape().str());
    check(gate.shape() == x.shape(), "{}: gate {} is not the input's shape {}", name, gate.shape().str(),
          x.shape().str());
    const pointwise::BiasAct act = pointwise::BiasAct::Silu;
    int64_t n = x.size(-1), rows = n > 0 ? x.numel() / n : 0;
    Tensor y = x.new_empty(x.shape());
    ON_DEVICE(x.device(), bias_act_gate_forward)(x.raw_f32(), bias.raw_f32(), gate.raw_f32(), y.raw_f32(), rows, n,
                                                 act);
    return attach(y, name, {x, bias, gate}, [name, x, bias, gate, rows, n, act](const Tensor& g) {
        expect_same_device(name, x, g);
        Tensor dx = x.new_empty(x.shape());  // also when only dbias is wanted: CUDA sums it from dx
        Tensor dbias = bias.requires_grad() ? bias.new_empty(bias.shape()) : Tensor();
        Tensor dgate = gate.requires_grad() ? gate.new_empty(gate.shape()) : Tensor();
        auto raw = [](Tensor& t) { return t.defined() ? t.raw_f32() : nullptr; };
        ON_DEVICE(x.device(), bias_act_gate_backward)(x.raw_f32(), bias.raw_f32(), gate.raw_f32(), g.raw_f32(),
                                                      dx.raw_f32(), raw(dbias), raw(dgate), rows, n, act);
        return std::vector<Tensor>{x.requires_grad() ? dx : Tensor(), dbias, dgate};
    });
}

// masked_relu2 keeps x, which its derivative reads; the mask is a function of the position only.
Tensor masked_relu2(const Tensor& x, float scale, bool causal) {
    const char* name = "masked_relu2";
    expect_f32(name, x);
    check(x.ndim() >= 2, "masked_relu2: input {} needs at least 2 dims (queries, keys)", x.shape().str());
    int64_t T = x.size(-2), S = x.size(-1), outer = T * S > 0 ? x.numel() / (T * S) : 0;
    Tensor y = x.new_empty(x.shape());
    ON_DEVICE(x.device(), masked_relu2_forward)(x.raw_f32(), y.raw_f32(), outer, T, S, scale, causal);
    return attach(y, name, {x}, [x, outer, T, S, scale, causal](const Tensor& g) {
        expect_same_device("masked_relu2", x, g);
        Tensor dx = x.new_empty(x.shape());
        ON_DEVICE(x.device(), masked_relu2_backward)(x.raw_f32(), g.raw_f32(), dx.raw_f32(), outer, T, S, scale,
                                                     causal);
        return std::vector<Tensor>{dx};
    });
}

Tensor pow(const Tensor& x, float p) {
    expect_f32("pow", x);
    Tensor y = x.new_empty(x.shape());
    ON_DEVICE(x.device(), pow_forward)(x.raw_f32(), p, y.raw_f32(), x.numel());
    return attach(y, "pow", {x}, [x, p](const Tensor& g) {
        expect_same_device("pow", x, g);
        Tensor dx = x.new_empty(x.shape());
        ON_DEVICE(x.device(), pow_backward)(x.raw_f32(), p, g.raw_f32(), dx.raw_f32(), x.numel());
        return std::vector<Tensor>{dx};
    });
}

}  // namespace engine
