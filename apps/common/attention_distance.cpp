// apps/common/attention_distance.cpp: see the header.
#include "apps/common/attention_distance.h"

#include <cmath>
#include "engine/error.h"

namespace apps {

TokenPlaces sequence_places(int64_t T) {
    TokenPlaces p;
    for (int64_t t = 0; t < T; t++) p.push_back({(double)t});
    return p;
}

TokenPlaces patch_places(int64_t grid, bool class_token_first) {
    TokenPlaces p;
    if (class_token_first) p.push_back({});
    for (int64_t r = 0; r < grid; r++)
        for (int64_t c = 0; c < grid; c++) p.push_back({(double)r, (double)c});
    return p;
}

static double distance(const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t k = 0; k < a.size(); k++) s += (a[k] - b[k]) * (a[k] - b[k]);
    return std::sqrt(s);
}

double mean_attention_distance(const engine::Tensor& map, const TokenPlaces& places, bool skip_self) {
    int64_t T = (int64_t)places.size();
    engine::check(map.ndim() == 2 && map.size(0) == T && map.size(1) == T,
                  "mean_attention_distance: map {} is not [{}, {}] (one row and column per token place)",
                  map.shape().str(), T, T);
    size_t dims = 0;
    for (auto& p : places) {
        if (dims == 0) dims = p.size();
        engine::check(p.empty() || p.size() == dims, "mean_attention_distance: token places of {} and {} coordinates",
                      dims, p.size());
    }
    engine::Tensor h = map.to(engine::Device::CPU);
    const float* a = h.data_f32();
    double total = 0;
    int64_t queries = 0;
    for (int64_t i = 0; i < T; i++) {
        if (places[i].empty()) continue;
        double weight = 0, weighted = 0;
        for (int64_t j = 0; j < T; j++) {
            if (places[j].empty() || (skip_self && j == i)) continue;
            weight += a[i * T + j];
            weighted += a[i * T + j] * distance(places[i], places[j]);
        }
        if (weight <= 0) continue;
        total += weighted / weight;
        queries++;
    }
    engine::check(queries > 0, "mean_attention_distance: no query has weight on a key with a place");
    return total / queries;
}

}  // namespace apps
