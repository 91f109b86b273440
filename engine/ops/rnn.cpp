// engine/ops/rnn.cpp: the LSTM ops, forward and backward side by side. The kernels run on the
// inputs' device (ON_DEVICE: engine/cpu/rnn.cpp or engine/cuda/rnn.cu for the cell, OpenBLAS or
// cuBLAS for the GEMMs); every tensor made here is on that device.
#include "engine/ops/rnn.h"

#include <algorithm>
#include <initializer_list>
#include <utility>
#include "engine/autograd.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/rnn.h"
#include "engine/ops/common.h"
#include "engine/ops/dispatch.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/matmul.h"
#include "engine/ops/reduce.h"
#ifdef ENGINE_CUDA
#include "engine/cuda/cudnn_rnn.h"
#include "engine/cuda/matmul.h"
#include "engine/cuda/rnn.h"
#endif

namespace engine {

static float* raw_or_null(Tensor& t) { return t.defined() ? t.raw_f32() : nullptr; }

Tensor lstm_cell(const Tensor& gates, const Tensor& c_prev) {
    expect_f32("lstm_cell", gates, "gates");
    expect_f32("lstm_cell", c_prev, "c_prev");
    expect_same_device("lstm_cell", gates, c_prev);
    check(gates.ndim() == 2 && c_prev.ndim() == 2 && gates.size(0) == c_prev.size(0) &&
              gates.size(1) == 4 * c_prev.size(1),
          "lstm_cell: gates {} and c_prev {} are not [B, 4H] and [B, H]", gates.shape().str(), c_prev.shape().str());
    int64_t B = c_prev.size(0), H = c_prev.size(1);
    const Device dev = gates.device();
    Tensor hc = gates.new_empty({2, B, H});
    ON_DEVICE(dev, lstm_cell_forward)(gates.raw_f32(), c_prev.raw_f32(), hc.raw_f32(), hc.raw_f32() + B * H, B, H);
    Tensor hc_saved = hc.detach();
    return attach(hc, "lstm_cell", {gates, c_prev}, [gates, c_prev, hc_saved, B, H, dev](const Tensor& g) {
        Tensor dgates = gates.requires_grad() ? gates.new_empty(gates.shape()) : Tensor();
        Tensor dc_prev = c_prev.requires_grad() ? c_prev.new_empty(c_prev.shape()) : Tensor();
        ON_DEVICE(dev, lstm_cell_backward)(gates.raw_f32(), c_prev.raw_f32(), hc_saved.raw_f32() + B * H, g.raw_f32(),
                                           g.raw_f32() + B * H, raw_or_null(dgates), raw_or_null(dc_prev), B, H);
        return std::vector<Tensor>{dgates, dc_prev};
    });
}

// lstm_sequence's and lstm_layer's first checks: every tensor float32 on the first one's device,
// w_hh [4H, H]. Returns H.
static int64_t expect_lstm_args(const char* op, std::initializer_list<std::pair<const Tensor*, const char*>> named,
                                const Tensor& w_hh) {
    for (const auto& [t, name] : named) {
        expect_f32(op, *t, name);
        expect_same_device(op, *named.begin()->first, *t);
    }
    check(w_hh.ndim() == 2 && w_hh.size(0) == 4 * w_hh.size(1), "{}: w_hh {} is not [4H, H]", op, w_hh.shape().str());
    return w_hh.size(1);
}

Tensor lstm_sequence(const Tensor& x_proj, const Tensor& h0, const Tensor& c0, const Tensor& w_hh,
                     const Tensor& b_hh) {
    const char* op = "lstm_sequence";
    const int64_t H = expect_lstm_args(op, {{&x_proj, "x_proj"}, {&h0, "h0"}, {&c0, "c0"}, {&w_hh, "w_hh"},
                                           {&b_hh, "b_hh"}}, w_hh);
    check(x_proj.ndim() == 3 && x_proj.size(0) >= 1 && x_proj.size(2) == 4 * H,
          "{}: x_proj {} is not [T, B, 4H] with T >= 1 and H = {} (w_hh {})", op, x_proj.shape().str(), H,
          w_hh.shape().str());
    const int64_t T = x_proj.size(0), B = x_proj.size(1);
    check(h0.shape() == Shape({B, H}) && c0.shape() == Shape({B, H}), "{}: h0 {} and c0 {} are not [B, H] = [{}, {}]",
          op, h0.shape().str(), c0.shape().str(), B, H);
    check(b_hh.shape() == Shape({4 * H}), "{}: b_hh {} is not [4H] = [{}]", op, b_hh.shape().str(), 4 * H);
    const Device dev = x_proj.device();
    const int64_t BH = B * H, G = 4 * H;  // elements of one step's state and of its gates

    // Forward: the gates of all steps start as x_proj + b_hh; step t adds h_{t-1}·W_hhᵀ into its
    // slice (beta = 1) and runs the cell, which writes h_t into out[t] and c_t into cells[t]; the
    // last step's c goes straight to out[T]. (cells has T-1 slots, at least one.)
    Tensor gates;
    {
        NoGrad no_grad;
        gates = add(x_proj, b_hh);  // [T, B, 4H]
    }
    Tensor out = x_proj.new_empty({T + 1, B, H});
    Tensor cells = x_proj.new_empty({std::max<int64_t>(T - 1, 1), B, H});
    auto cell_state = [T, BH](const Tensor& out, const Tensor& cells, int64_t t) {
        return t == T - 1 ? out.raw_f32() + T * BH : cells.raw_f32() + t * BH;
    };
    for (int64_t t = 0; t < T; t++) {
        const float* h_prev = t ? out.raw_f32() + (t - 1) * BH : h0.raw_f32();
        const float* c_prev = t ? cell_state(out, cells, t - 1) : c0.raw_f32();
        float* g_t = gates.raw_f32() + t * B * G;
        ON_DEVICE(dev, gemm)(false, true, B, G, H, 1.f, h_prev, w_hh.raw_f32(), 1.f, g_t);
        ON_DEVICE(dev, lstm_cell_forward)(g_t, c_prev, out.raw_f32() + t * BH, cell_state(out, cells, t), B, H);
    }

    // The backward reads the gates, not x_proj: only whether x_proj wants a gradient is kept, so its
    // [T, B, 4H] is freed with the caller's handle (a captured x_proj held it until the backward).
    Tensor out_saved = out.detach();
    const bool x_proj_grad = x_proj.requires_grad();
    return attach(out, op, {x_proj, h0, c0, w_hh, b_hh},
                  [x_proj_grad, h0, c0, w_hh, b_hh, gates, cells, out_saved, cell_state, T, B, H, dev](const Tensor& g) {
        const int64_t BH = B * H, G = 4 * H;
        // Backward through time. dh holds, per step, the gradient reaching h_t: the upstream one,
        // plus dgates_{t+1}·W_hh added when step t+1 is done. dc carries the cell-state gradient
        // from step to step in place (the kernel reads dc before writing dc_prev into it).
        Tensor dgates = gates.new_empty(gates.shape());
        Tensor dh = g.narrow(0, 0, T).clone();
        Tensor dc = g.narrow(0, T, 1).clone();
        float *dgp = dgates.raw_f32(), *dhp = dh.raw_f32(), *dcp = dc.raw_f32();
        const float *gp = gates.raw_f32(), *w = w_hh.raw_f32();
        for (int64_t t = T - 1; t >= 0; t--) {
            const float* c_prev = t ? cell_state(out_saved, cells, t - 1) : c0.raw_f32();
            ON_DEVICE(dev, lstm_cell_backward)(gp + t * B * G, c_prev, cell_state(out_saved, cells, t), dhp + t * BH,
                                               dcp, dgp + t * B * G, dcp, B, H);
            if (t > 0) ON_DEVICE(dev, gemm)(false, false, B, H, G, 1.f, dgp + t * B * G, w, 1.f, dhp + (t - 1) * BH);
        }
        Tensor dh0, dc0, dw_hh, db_hh;
        if (h0.requires_grad()) {
            dh0 = h0.new_empty(h0.shape());
            ON_DEVICE(dev, gemm)(false, false, B, H, G, 1.f, dgp, w, 0.f, dh0.raw_f32());
        }
        if (c0.requires_grad()) dc0 = dc.reshape({B, H});
        if (w_hh.requires_grad()) {
            // dW_hh = Σ_t dgates_tᵀ·h_{t-1}: step 0 against h0, steps 1..T-1 against out[0..T-2].
            dw_hh = w_hh.new_empty(w_hh.shape());
            ON_DEVICE(dev, gemm)(true, false, G, H, B, 1.f, dgp, h0.raw_f32(), 0.f, dw_hh.raw_f32());
            if (T > 1)
                ON_DEVICE(dev, gemm)(true, false, G, H, (T - 1) * B, 1.f, dgp + B * G, out_saved.raw_f32(), 1.f,
                                     dw_hh.raw_f32());
        }
        if (b_hh.requires_grad()) db_hh = sum(dgates.reshape({T * B, G}), {0});
        return std::vector<Tensor>{x_proj_grad ? dgates : Tensor(), dh0, dc0, dw_hh, db_hh};
    });
}

#ifdef ENGINE_CUDA
// lstm_layer on cuDNN: the forward keeps cuDNN's weight space and reserve space (device tensors of
// the sizes cuDNN asks for) for the backward, which uses the reserve space up (once).
static Tensor lstm_layer_cudnn(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih,
                               const Tensor& b_ih, const Tensor& w_hh, const Tensor& b_hh, const cuda::CudnnLstm& g,
                               const cuda::CudnnLstmSizes& sizes) {
    auto floats = [](size_t bytes) { return (int64_t)((bytes + sizeof(float) - 1) / sizeof(float)); };
    Tensor weight_space = x.new_empty({floats(sizes.weight_bytes)});
    Tensor reserve = x.new_empty({std::max<int64_t>(floats(sizes.reserve_bytes), 1)});
    Tensor out = x.new_empty({g.T + 1, g.B, g.H});
    cuda::cudnn_lstm_forward(g, x.raw_f32(), h0.raw_f32(), c0.raw_f32(), w_ih.raw_f32(), b_ih.raw_f32(), w_hh.raw_f32(),
                             b_hh.raw_f32(), weight_space.raw_f32(), out.raw_f32(), reserve.raw_f32());
    Tensor out_saved = out.detach();
    return attach(out, "lstm_layer", {x, h0, c0, w_ih, b_ih, w_hh, b_hh},
                  [x, h0, c0, w_ih, b_ih, w_hh, b_hh, weight_space, reserve, out_saved, g](const Tensor& grad) {
        auto wanted = [](const Tensor& t) { return t.requires_grad() ? t.new_empty(t.shape()) : Tensor(); };
        Tensor dx = wanted(x), dh0 = wanted(h0), dc0 = wanted(c0), dw_ih = wanted(w_ih), db_ih = wanted(b_ih),
               dw_hh = wanted(w_hh), db_hh = wanted(b_hh);
        // cuDNN's backward writes into the reserve space: this node's backward runs once.
        cuda::cudnn_lstm_backward(g, x.raw_f32(), h0.raw_f32(), c0.raw_f32(), weight_space.raw_f32(),
                                  out_saved.raw_f32(), grad.raw_f32(), reserve.raw_f32(), raw_or_null(dx),
                                  raw_or_null(dh0), raw_or_null(dc0), raw_or_null(dw_ih), raw_or_null(db_ih),
                                  raw_or_null(dw_hh), raw_or_null(db_hh));
        return std::vector<Tensor>{dx, dh0, dc0, dw_ih, db_ih, dw_hh, db_hh};
    });
}
#endif

Tensor lstm_layer(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& b_ih,
                  const Tensor& w_hh, const Tensor& b_hh) {
    const char* op = "lstm_layer";
    const int64_t H = expect_lstm_args(op, {{&x, "x"}, {&h0, "h0"}, {&c0, "c0"}, {&w_ih, "w_ih"}, {&b_ih, "b_ih"},
                                           {&w_hh, "w_hh"}, {&b_hh, "b_hh"}}, w_hh);
    check(x.ndim() == 3 && x.size(0) >= 1, "{}: x {} is not [T, B, in] with T >= 1", op, x.shape().str());
    const int64_t B = x.size(1), in = x.size(2);
    check(w_ih.shape() == Shape({4 * H, in}) && b_ih.shape() == Shape({4 * H}) && b_hh.shape() == Shape({4 * H}),
          "{}: w_ih {}, b_ih {}, b_hh {} are not [4H, in] = [{}, {}], [4H] and [4H] (x {}, w_hh {})", op,
          w_ih.shape().str(), b_ih.shape().str(), b_hh.shape().str(), 4 * H, in, x.shape().str(), w_hh.shape().str());
    check(h0.shape() == Shape({B, H}) && c0.shape() == Shape({B, H}), "{}: h0 {} and c0 {} are not [B, H] = [{}, {}]",
          op, h0.shape().str(), c0.shape().str(), B, H);
#ifdef ENGINE_CUDA
    if (x.is_cuda()) {
        const cuda::CudnnLstm g{x.size(0), B, in, H};
        cuda::CudnnLstmSizes sizes;
        if (cuda::cudnn_lstm_sizes(g, sizes)) return lstm_layer_cudnn(x, h0, c0, w_ih, b_ih, w_hh, b_hh, g, sizes);
    }
#endif
    return lstm_sequence(linear(x, w_ih, b_ih), h0, c0, w_hh, b_hh);
}

}  // namespace engine
