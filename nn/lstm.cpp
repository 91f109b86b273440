// nn/lstm.cpp: the LSTM layer (engine::lstm_layer: cuDNN's LSTM, or one GEMM for the input
// projections and then engine::lstm_sequence) and the LSTM LM.
#include "nn/lstm.h"

#include <cmath>
#include "engine/error.h"
#include "engine/ops.h"
#include "nn/graph_step.h"  // copy_into

namespace nn {

using namespace engine;

LSTMLayer::LSTMLayer(int64_t in_, int64_t h) : in(in_), hidden(h) {
    float bound = 1.f / std::sqrt((float)h);  // PyTorch's default: every tensor U(±1/√H)
    weight_ih = Tensor::uniform({4 * h, in_}, -bound, bound);
    weight_hh = Tensor::uniform({4 * h, h}, -bound, bound);
    bias_ih = Tensor::uniform({4 * h}, -bound, bound);
    bias_hh = Tensor::uniform({4 * h}, -bound, bound);
    register_parameter("weight_ih", weight_ih);
    register_parameter("weight_hh", weight_hh);
    register_parameter("bias_ih", bias_ih);
    register_parameter("bias_hh", bias_hh);
}

Tensor LSTMLayer::forward(const Tensor& x, LSTMState& state) const {
    check(x.ndim() == 3 && x.size(2) == in, "LSTMLayer: input {} is not [B, T, {}]", x.shape().str(), in);
    return transpose(forward_time_major(transpose(x, 0, 1), state), 0, 1);
}

Tensor LSTMLayer::forward_time_major(const Tensor& x, LSTMState& state) const {
    check(x.ndim() == 3 && x.size(2) == in, "LSTMLayer: time-major input {} is not [T, B, {}]", x.shape().str(), in);
    int64_t T = x.size(0), B = x.size(1);
    if (!state.h.defined()) state = {x.new_zeros({B, hidden}), x.new_zeros({B, hidden})};
    check(state.h.shape() == Shape({B, hidden}) && state.c.shape() == Shape({B, hidden}),
          "LSTMLayer: state {} does not match batch {} and hidden {}", state.h.shape().str(), B, hidden);
    // cuDNN's LSTM on a GPU that has it; otherwise the input projections of all steps in one GEMM,
    // then the recurrence as one op (engine::lstm_layer).
    Tensor out = lstm_layer(x, state.h, state.c, weight_ih, bias_ih, weight_hh, bias_hh);  // [T+1, B, H]
    state = {out.narrow(0, T - 1, 1).reshape({B, hidden}), out.narrow(0, T, 1).reshape({B, hidden})};
    return out.narrow(0, 0, T);
}

LSTMConfig LSTMConfig::small() { return LSTMConfig{10000, 200, 2, 0.f, false}; }
LSTMConfig LSTMConfig::medium() { return LSTMConfig{10000, 650, 2, 0.5f, false}; }
LSTMConfig LSTMConfig::large() { return LSTMConfig{10000, 1500, 2, 0.65f, false}; }

LSTMLM::LSTMLM(const LSTMConfig& c) : cfg(c) {
    tok_emb = register_module("tok_emb", std::make_shared<Embedding>(c.vocab, c.hidden));
    layers = register_module("layers", std::make_shared<ModuleList<LSTMLayer>>());
    for (int64_t i = 0; i < c.layers; i++) layers->push_back(std::make_shared<LSTMLayer>(c.hidden, c.hidden));
    drop = register_module("drop", std::make_shared<Dropout>(c.dropout));
    if (!c.tie_weights) head = register_module("head", std::make_shared<Linear>(c.hidden, c.vocab));
}

Tensor LSTMLM::trunk(const Tensor& ids, std::vector<LSTMState>& state) const {
    check(ids.ndim() == 2, "LSTMLM: ids {} are not [B, T]", ids.shape().str());
    state.resize(layers->size());
    // Time-major inside ([T, B, H]: each step's rows are contiguous), batch-major at both ends.
    Tensor x = drop->forward(transpose(tok_emb->forward(ids), 0, 1));
    for (size_t i = 0; i < layers->size(); i++) x = drop->forward((*layers)[i].forward_time_major(x, state[i]));
    return x;
}

Tensor LSTMLM::forward(const Tensor& ids, std::vector<LSTMState>& state) const {
    Tensor x = transpose(trunk(ids, state), 0, 1);
    return head ? head->forward(x) : linear(x, tok_emb->weight);
}

Tensor LSTMLM::loss(const Tensor& ids, const Tensor& targets, std::vector<LSTMState>& state) const {
    if (!output_loss_fused(head.get())) return cross_entropy(forward(ids, state), targets);
    // The loss is a mean over the tokens, whatever their order: the targets go time-major (an int32
    // transpose of [B, T]) rather than the features batch-major (a [T, B, H] copy and its gradient's).
    return linear_cross_entropy(trunk(ids, state), head ? head->weight : tok_emb->weight, head ? head->bias : Tensor(),
                                transpose(targets, 0, 1));
}

void LSTMLM::detach(std::vector<LSTMState>& state) {
    for (auto& s : state) s = {s.h.detach(), s.c.detach()};
}

Tensor CarriedState::forward(const LSTMLM& lm, const Tensor& ids) {
    return carry(lm, ids, [&](std::vector<LSTMState>& state) { return lm.forward(ids, state); });
}

Tensor CarriedState::loss(const LSTMLM& lm, const Tensor& ids, const Tensor& targets) {
    return carry(lm, ids, [&](std::vector<LSTMState>& state) { return lm.loss(ids, targets, state); });
}

Tensor CarriedState::carry(const LSTMLM& lm, const Tensor& ids,
                           const std::function<Tensor(std::vector<LSTMState>&)>& f) {
    check(ids.ndim() == 2, "LSTMLM: ids {} are not [B, T]", ids.shape().str());
    const int64_t B = ids.size(0), H = lm.cfg.hidden;
    const Device dev = lm.tok_emb->weight.device();
    std::vector<LSTMState> state;
    if (lm.layers->size() == 0) return f(state);  // no recurrence, no state
    if (next_.empty()) {
        for (size_t i = 0; i < lm.layers->size(); i++) {
            start_.push_back({Tensor::zeros({B, H}, DType::F32, dev), Tensor::zeros({B, H}, DType::F32, dev)});
            next_.push_back({Tensor::zeros({B, H}, DType::F32, dev), Tensor::zeros({B, H}, DType::F32, dev)});
        }
    }
    check(next_.size() == lm.layers->size() && next_[0].h.shape() == Shape({B, H}) && next_[0].h.device() == dev,
          "CarriedState: the carried state ({} layers of {} on {}) does not match the batch {} of an LSTM of {} layers "
          "of {} units on {} (reset() keeps the buffers; a new CarriedState makes new ones)",
          next_.size(), next_[0].h.shape().str(), device_name(next_[0].h.device()), ids.shape().str(),
          lm.layers->size(), H, device_name(dev));
    for (size_t i = 0; i < next_.size(); i++) {
        copy_into(start_[i].h, next_[i].h);
        copy_into(start_[i].c, next_[i].c);
    }
    state = start_;  // handles on the buffers; f replaces them with the final states
    Tensor out = f(state);
    for (size_t i = 0; i < next_.size(); i++) {
        copy_into(next_[i].h, state[i].h);
        copy_into(next_[i].c, state[i].c);
    }
    return out;
}

void CarriedState::reset() {
    for (LSTMState& s : next_) {
        copy_into(s.h, Tensor::zeros(s.h.shape(), DType::F32, s.h.device()));
        copy_into(s.c, Tensor::zeros(s.c.shape(), DType::F32, s.c.device()));
    }
}

std::vector<LSTMState> CarriedState::get() const {
    std::vector<LSTMState> out;
    for (const LSTMState& s : next_) out.push_back({s.h.clone(), s.c.clone()});
    return out;
}

void CarriedState::set(const std::vector<LSTMState>& s) {
    if (next_.empty()) {
        for (const LSTMState& layer : s) {
            start_.push_back({layer.h.detach().clone(), layer.c.detach().clone()});
            next_.push_back({layer.h.detach().clone(), layer.c.detach().clone()});
        }
        return;
    }
    check(s.size() == next_.size(), "CarriedState: {} layers of state set into a state of {}", s.size(), next_.size());
    for (size_t i = 0; i < s.size(); i++) {
        copy_into(next_[i].h, s[i].h);
        copy_into(next_[i].c, s[i].c);
    }
}

}  // namespace nn
