// nn/convmixer.h: ConvMixer (Trockman & Kolter, "Patches Are All You Need?").
//   patch conv (kernel = stride = patch) → GELU → BN, then depth × [ depthwise k×k → GELU → BN,
//   residual; 1×1 conv → GELU → BN ], global average pooling, linear head.
// The spatial (depthwise) filters can be frozen (the structured-init paper's random / impulse /
// box filters; init/ sets their values).
#pragma once
#include "nn/layers.h"

namespace nn {

struct ConvMixerConfig {
    int64_t dim = 256, depth = 8, kernel = 3, patch = 1, in_channels = 3, num_classes = 10;
    bool freeze_spatial = false;
};

class ConvMixerBlock : public Module {
public:
    ConvMixerBlock(int64_t dim, int64_t kernel);
    std::string type_name() const override { return "ConvMixerBlock"; }
    Tensor forward(const Tensor& x);
    std::shared_ptr<DepthwiseConv2d> spatial;
    std::shared_ptr<BatchNorm2d> bn1, bn2;
    std::shared_ptr<Conv2d> pointwise;
};

class ConvMixer : public Module {
public:
    explicit ConvMixer(const ConvMixerConfig& c);
    std::string type_name() const override { return "ConvMixer"; }
    Tensor forward(const Tensor& images);  // [B, C, H, W] -> logits [B, classes]
    // Stop (or resume) training the depthwise filters: they keep their values and get no gradient.
    void freeze_spatial(bool frozen);
    ConvMixerConfig cfg;
    std::shared_ptr<Conv2d> stem;
    std::shared_ptr<BatchNorm2d> stem_bn;
    std::shared_ptr<ModuleList<ConvMixerBlock>> blocks;
    std::shared_ptr<Linear> head;
};

}  // namespace nn
