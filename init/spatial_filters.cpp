// init/spatial_filters.cpp: random / impulse / box depthwise filters for ConvMixer (see the header).
#include "init/spatial_filters.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include "engine/error.h"
#include "engine/rng.h"

namespace init {

using namespace engine;

const std::vector<std::string>& spatial_filter_kinds() {
    static const std::vector<std::string> kinds = {"train", "random", "impulse", "box"};
    return kinds;
}

void set_spatial_filters(nn::ConvMixer& model, const std::string& kind, Report* report) {
    const auto& kinds = spatial_filter_kinds();
    check(std::find(kinds.begin(), kinds.end(), kind) != kinds.end(),
          "spatial filters '{}' unknown; valid: train, random, impulse, box", kind);
    if (kind == "train") return;
    const int64_t k = model.cfg.kernel, taps = k * k;
    const float bound = 1.f / (float)k;
    Generator& gen = global_generator();
    for (auto& block : *model.blocks) {
        Tensor& w = block->spatial->weight;  // [C, 1, k, k]
        const int64_t channels = w.size(0);
        float* p = w.data_f32();
        if (kind == "random") {
            gen.uniform(p, channels * taps, -bound, bound);
        } else if (kind == "box") {
            std::fill(p, p + channels * taps, std::sqrt(1.f / (float)(taps * k)));
        } else {  // impulse: one random tap per channel
            std::vector<int32_t> where(channels);
            gen.randint(where.data(), channels, 0, (int32_t)taps);
            std::fill(p, p + channels * taps, 0.f);
            for (int64_t c = 0; c < channels; c++) p[c * taps + where[c]] = std::sqrt(1.f / (float)k);
        }
        if (block->spatial->bias.defined())
            gen.uniform(block->spatial->bias.data_f32(), block->spatial->bias.numel(), -bound, bound);
    }
    if (report)
        report->say(fmt::format("spatial filters: {} {}x{} depthwise filters in {} blocks", kind, k, k,
                                model.blocks->size()));
}

}  // namespace init
