// engine/ops/rnn.cpp: the LSTM cell op, forward and backward side by side. The kernels run on the
// inputs' device (ON_DEVICE: engine/cpu/rnn.cpp or engine/cuda/rnn.cu); every tensor made here is
// on that device.
#include "engine/ops/rnn.h"

#include "engine/autograd.h"
#include "engine/cpu/rnn.h"
#include "engine/ops/common.h"
#include "engine/ops/dispatch.h"
#ifdef ENGINE_CUDA
#include "engine/cuda/rnn.h"
#endif

namespace engine {

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
    ON_DEVICE(dev, lstm_cell_forward)(gates.raw_f32(), c_prev.raw_f32(), hc.raw_f32(), B, H);
    Tensor hc_saved = hc.detach();
    return attach(hc, "lstm_cell", {gates, c_prev}, [gates, c_prev, hc_saved, B, H, dev](const Tensor& g) {
        Tensor dgates = gates.requires_grad() ? gates.new_empty(gates.shape()) : Tensor();
        Tensor dc_prev = c_prev.requires_grad() ? c_prev.new_empty(c_prev.shape()) : Tensor();
        ON_DEVICE(dev, lstm_cell_backward)(gates.raw_f32(), c_prev.raw_f32(), hc_saved.raw_f32(), g.raw_f32(),
                                           dgates.defined() ? dgates.raw_f32() : nullptr,
                                           dc_prev.defined() ? dc_prev.raw_f32() : nullptr, B, H);
        return std::vector<Tensor>{dgates, dc_prev};
    });
}

}  // namespace engine
