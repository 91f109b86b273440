// nn/lstm.cpp: the LSTM layer (precomputed input projections + fused cells) and the LSTM LM.
#include "nn/lstm.h"

#include <cmath>
#include "engine/error.h"
#include "engine/ops.h"

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
    int64_t B = x.size(0), T = x.size(1);
    if (!state.h.defined()) state = {x.new_zeros({B, hidden}), x.new_zeros({B, hidden})};
    check(state.h.shape() == Shape({B, hidden}) && state.c.shape() == Shape({B, hidden}),
          "LSTMLayer: state {} does not match batch {} and hidden {}", state.h.shape().str(), B, hidden);
    // All input projections at once, time-major so each step is a view.
    Tensor xw = transpose(linear(x, weight_ih, bias_ih), 0, 1);  // [T, B, 4H]
    Tensor h = state.h, c = state.c;
    std::vector<Tensor> outs;
    for (int64_t t = 0; t < T; t++) {
        Tensor gates = add(xw.narrow(0, t, 1).reshape({B, 4 * hidden}), linear(h, weight_hh, bias_hh));
        Tensor hc = lstm_cell(gates, c);
        h = hc.narrow(0, 0, 1).reshape({B, hidden});
        c = hc.narrow(0, 1, 1).reshape({B, hidden});
        outs.push_back(h.reshape({B, 1, hidden}));
    }
    state = {h, c};
    return concat(outs, 1);
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

Tensor LSTMLM::forward(const Tensor& ids, std::vector<LSTMState>& state) const {
    check(ids.ndim() == 2, "LSTMLM: ids {} are not [B, T]", ids.shape().str());
    state.resize(layers->size());
    Tensor x = drop->forward(tok_emb->forward(ids));
    for (size_t i = 0; i < layers->size(); i++) x = drop->forward((*layers)[i].forward(x, state[i]));
    return head ? head->forward(x) : linear(x, tok_emb->weight);
}

void LSTMLM::detach(std::vector<LSTMState>& state) {
    for (auto& s : state) s = {s.h.detach(), s.c.detach()};
}

}  // namespace nn
