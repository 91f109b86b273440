// nn/lstm.h: LSTM layers and the Zaremba et al. (2014) LSTM language model.
//
// Parameters use PyTorch's names and layout (weight_ih [4H, in], weight_hh [4H, H], bias_ih,
// bias_hh; gate order i, f, g, o, which is also cuDNN's), so a checkpoint maps one to one and the
// CUDA backend hands the same weights to cuDNN. A layer is one engine::lstm_layer: on a GPU with
// cuDNN, cuDNN's LSTM; otherwise one GEMM computes the input projections of all time steps, then
// engine::lstm_sequence runs the recurrence (per step one GEMM h·W_hhᵀ plus the fused cell) and, in
// the backward, gets W_hh's gradient from one GEMM over all steps.
#pragma once
#include <functional>
#include "nn/layers.h"

namespace nn {

struct LSTMState {
    Tensor h, c;  // [B, H] each
};

class LSTMLayer : public Module {
public:
    LSTMLayer(int64_t in, int64_t hidden);
    std::string type_name() const override { return "LSTMLayer"; }
    // x [B, T, in], state (undefined h/c: zeros) -> outputs [B, T, H]; `state` becomes the last.
    Tensor forward(const Tensor& x, LSTMState& state) const;
    // The same on time-major x [T, B, in] -> [T, B, H] (what LSTMLM uses: no transposes between layers).
    Tensor forward_time_major(const Tensor& x, LSTMState& state) const;
    Tensor weight_ih, weight_hh, bias_ih, bias_hh;
    int64_t in, hidden;
};

struct LSTMConfig {
    int64_t vocab = 10000, hidden = 200, layers = 2;
    float dropout = 0.f;      // on non-recurrent connections (Zaremba)
    bool tie_weights = false;
    static LSTMConfig small();   // 200 units, no dropout
    static LSTMConfig medium();  // 650 units, dropout 0.5
    static LSTMConfig large();   // 1500 units, dropout 0.65
};

class LSTMLM : public Module {
public:
    explicit LSTMLM(const LSTMConfig& c);
    std::string type_name() const override { return "LSTMLM"; }
    // ids [B, T] -> logits [B, T, vocab]; `state` (one per layer, empty to start from zeros) is
    // replaced by the final states. Truncated BPTT: the caller detaches them between batches.
    Tensor forward(const Tensor& ids, std::vector<LSTMState>& state) const;
    // cross_entropy(forward(ids, state), targets) without the logits (engine::linear_cross_entropy)
    // where output_loss_fused.
    Tensor loss(const Tensor& ids, const Tensor& targets, std::vector<LSTMState>& state) const;
    static void detach(std::vector<LSTMState>& state);
    LSTMConfig cfg;
    std::shared_ptr<Embedding> tok_emb;
    std::shared_ptr<ModuleList<LSTMLayer>> layers;
    std::shared_ptr<Dropout> drop;
    std::shared_ptr<Linear> head;

private:
    Tensor trunk(const Tensor& ids, std::vector<LSTMState>& state) const;  // time-major [T, B, H]
};

// The state truncated BPTT hands from batch to batch, kept in memory that stays: a training step
// that starts from it and leaves its final state there reads and writes the same addresses every
// time, so it can be captured into a CUDA graph and replayed (nn/graph_step.h). Two buffers a
// layer, because the step's backward still reads the state it started from (h0 for W_hh's
// gradient, c0 for the first cell) after its forward has made the next one. The values are those
// of carrying the detached final states (LSTMLM::detach), bit for bit.
class CarriedState {
public:
    // ids [B, T] -> logits, starting from the state the last call left (zeros at first and after
    // reset()) and leaving this batch's final state for the next call. B may not change while
    // buffers exist: a captured step holds their addresses.
    Tensor forward(const LSTMLM& lm, const Tensor& ids);
    Tensor loss(const LSTMLM& lm, const Tensor& ids, const Tensor& targets);  // LSTMLM::loss, so carried
    void reset();  // zeros, in the buffers where they are
    // What the next forward starts from (copies; empty before the first forward or set()).
    std::vector<LSTMState> get() const;
    // Copied into the buffers (made at these shapes on s's device where there are none yet).
    void set(const std::vector<LSTMState>& s);

private:
    // f(state) (a forward from `state`, which it replaces by the final states) from the carried state.
    Tensor carry(const LSTMLM& lm, const Tensor& ids, const std::function<Tensor(std::vector<LSTMState>&)>& f);
    std::vector<LSTMState> start_, next_;
};

}  // namespace nn
