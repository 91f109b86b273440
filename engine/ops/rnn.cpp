// engine/ops/rnn.cpp: the LSTM cell op, forward and backward side by side.
#include "engine/ops/rnn.h"

#include "engine/autograd.h"
#include "engine/cpu/rnn.h"
#include "engine/ops/common.h"

namespace engine {

Tensor lstm_cell(const Tensor& gates, const Tensor& c_prev) {
    expect_f32("lstm_cell", gates, "gates");
    expect_f32("lstm_cell", c_prev, "c_prev");
    check(gates.ndim() == 2 && c_prev.ndim() == 2 && gates.size(0) == c_prev.size(0) &&
              gates.size(1) == 4 * c_prev.size(1),
          "lstm_cell: gates {} and c_prev {} are not [B, 4H] and [B, H]", gates.shape().str(), c_prev.shape().str());
    int64_t B = c_prev.size(0), H = c_prev.size(1);
    Tensor hc = Tensor::empty({2, B, H});
    cpu::lstm_cell_forward(gates.data_f32(), c_prev.data_f32(), hc.data_f32(), B, H);
    Tensor hc_saved = hc.detach();
    return attach(hc, "lstm_cell", {gates, c_prev}, [gates, c_prev, hc_saved, B, H](const Tensor& g) {
        Tensor dgates = gates.requires_grad() ? Tensor::empty(gates.shape()) : Tensor();
        Tensor dc_prev = c_prev.requires_grad() ? Tensor::empty(c_prev.shape()) : Tensor();
        cpu::lstm_cell_backward(gates.data_f32(), c_prev.data_f32(), hc_saved.data_f32(), g.data_f32(),
                                dgates.defined() ? dgates.data_f32() : nullptr,
                                dc_prev.defined() ? dc_prev.data_f32() : nullptr, B, H);
        return std::vector<Tensor>{dgates, dc_prev};
    });
}

}  // namespace engine
