// tests/test_init_spatial.cpp: ConvMixer's random / impulse / box spatial filters, and freezing them.
#include <catch2/catch.hpp>

#include <cmath>
#include "engine/ops.h"
#include "init/spatial_filters.h"
#include "nn/optim.h"

using namespace engine;

static nn::ConvMixerConfig small_convmixer(int64_t kernel) {
    nn::ConvMixerConfig c;
    c.dim = 16;
    c.depth = 2;
    c.kernel = kernel;
    c.patch = 2;
    return c;
}

TEST_CASE("spatial filters: impulse is one tap of √(1/k) per channel, box all taps √(1/(k²k)), random in ±1/k",
          "[init]") {
    for (int64_t k : {3, 5}) {
        manual_seed(7);
        nn::ConvMixer net(small_convmixer(k));
        const int64_t taps = k * k;
        init::set_spatial_filters(net, "impulse");
        std::vector<int> where_hit(taps, 0);
        for (auto& b : *net.blocks) {
            const float* w = b->spatial->weight.data_f32();
            for (int64_t c = 0; c < 16; c++) {
                int nonzero = 0;
                for (int64_t t = 0; t < taps; t++) {
                    if (w[c * taps + t] != 0.f) {
                        nonzero++;
                        where_hit[t]++;
                        CHECK(w[c * taps + t] == Approx(std::sqrt(1.0 / k)));
                    }
                }
                CHECK(nonzero == 1);
            }
            const float* bias = b->spatial->bias.data_f32();
            for (int64_t c = 0; c < 16; c++) CHECK(std::abs(bias[c]) <= 1.f / k);
        }
        // 32 random positions over k² taps: not all in one place.
        CHECK(*std::max_element(where_hit.begin(), where_hit.end()) < 32);

        init::set_spatial_filters(net, "box");
        for (auto& b : *net.blocks) {
            const float* w = b->spatial->weight.data_f32();
            for (int64_t i = 0; i < 16 * taps; i++) REQUIRE(w[i] == Approx(std::sqrt(1.0 / (taps * k))));
        }

        init::set_spatial_filters(net, "random");
        double sum2 = 0;
        int64_t n = 0;
        for (auto& b : *net.blocks) {
            const float* w = b->spatial->weight.data_f32();
            for (int64_t i = 0; i < 16 * taps; i++, n++) {
                REQUIRE(std::abs(w[i]) <= 1.f / k);
                sum2 += (double)w[i] * w[i];
            }
        }
        // U(±1/k) has variance 1/(3k²).
        CHECK(sum2 / n == Approx(1.0 / (3.0 * k * k)).epsilon(0.25));
    }
}

TEST_CASE("spatial filters: same seed, same filters; 'train' leaves them; unknown kinds are refused", "[init]") {
    auto filters = [](uint64_t seed, const std::string& kind) {
        manual_seed(seed);
        nn::ConvMixer net(small_convmixer(3));
        init::set_spatial_filters(net, kind);
        return (*net.blocks)[1].spatial->weight.to_vector();
    };
    CHECK(filters(3, "impulse") == filters(3, "impulse"));
    CHECK(filters(3, "impulse") != filters(4, "impulse"));
    // 'train' keeps the constructor's own draw: the same as a net of that seed never touched.
    manual_seed(3);
    nn::ConvMixer untouched(small_convmixer(3));
    CHECK(filters(3, "train") == (*untouched.blocks)[1].spatial->weight.to_vector());
    manual_seed(0);
    nn::ConvMixer net(small_convmixer(3));
    CHECK_THROWS_WITH(init::set_spatial_filters(net, "gaussian"), Catch::Contains("train, random, impulse, box"));
}

TEST_CASE("frozen spatial filters keep their values through AdamW steps; the rest trains", "[init][nn]") {
    manual_seed(1);
    nn::ConvMixerConfig c = small_convmixer(3);
    c.freeze_spatial = true;
    nn::ConvMixer net(c);
    init::set_spatial_filters(net, "impulse");
    auto frozen = (*net.blocks)[0].spatial->weight.to_vector();
    auto frozen_bias = (*net.blocks)[0].spatial->bias.to_vector();
    auto pointwise = (*net.blocks)[0].pointwise->weight.to_vector();
    nn::Adam opt(nn::param_groups(net, 0.05f), 1e-2f, 0.9f, 0.999f, 1e-8f, true);
    Tensor images = Tensor::normal({4, 3, 8, 8});
    Tensor labels = Tensor::randint({4}, 0, 10);
    for (int step = 0; step < 3; step++) {
        opt.zero_grad();
        cross_entropy(net.forward(images), labels).backward();
        opt.step();
    }
    CHECK((*net.blocks)[0].spatial->weight.to_vector() == frozen);
    CHECK((*net.blocks)[0].spatial->bias.to_vector() == frozen_bias);
    CHECK((*net.blocks)[0].pointwise->weight.to_vector() != pointwise);
}
