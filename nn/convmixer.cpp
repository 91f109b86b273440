// nn/convmixer.cpp: ConvMixer.
#include "nn/convmixer.h"

#include "engine/error.h"
#include "engine/ops.h"

namespace nn {

using namespace engine;

ConvMixerBlock::ConvMixerBlock(int64_t dim, int64_t kernel) {
    spatial = register_module("spatial", std::make_shared<DepthwiseConv2d>(dim, kernel));
    bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(dim));
    pointwise = register_module("pointwise", std::make_shared<Conv2d>(dim, dim, 1));
    bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(dim));
}

Tensor ConvMixerBlock::forward(const Tensor& x) {
    Tensor h = add(x, bn1->forward(gelu(spatial->forward(x))));
    return bn2->forward(gelu(pointwise->forward(h)));
}

ConvMixer::ConvMixer(const ConvMixerConfig& c) : cfg(c) {
    stem = register_module("stem", std::make_shared<Conv2d>(c.in_channels, c.dim, c.patch, c.patch));
    stem_bn = register_module("stem_bn", std::make_shared<BatchNorm2d>(c.dim));
    blocks = register_module("blocks", std::make_shared<ModuleList<ConvMixerBlock>>());
    for (int64_t i = 0; i < c.depth; i++) blocks->push_back(std::make_shared<ConvMixerBlock>(c.dim, c.kernel));
    head = register_module("head", std::make_shared<Linear>(c.dim, c.num_classes));
    if (c.freeze_spatial) freeze_spatial(true);
}

void ConvMixer::freeze_spatial(bool frozen) {
    for (auto& b : *blocks) {
        b->spatial->weight.requires_grad_(!frozen);
        if (b->spatial->bias.defined()) b->spatial->bias.requires_grad_(!frozen);
    }
}

Tensor ConvMixer::forward(const Tensor& images) {
    check(images.ndim() == 4 && images.size(1) == cfg.in_channels, "ConvMixer: images {} are not [B, {}, H, W]",
          images.shape().str(), cfg.in_channels);
    Tensor x = stem_bn->forward(gelu(stem->forward(images)));
    for (auto& b : *blocks) x = b->forward(x);
    return head->forward(mean(x, {2, 3}));
}

}  // namespace nn
