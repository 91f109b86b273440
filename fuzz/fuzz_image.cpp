// fuzz/fuzz_image.cpp: libFuzzer target for the image decode path (stb_image JPEG/PNG behind
// data::decode_image, then a resize). Any input must decode or throw engine::Error.
#include <cstdint>
#include <cstdlib>
#include "data/image_codec.h"
#include "engine/error.h"
#include "fuzz/seeds.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    if (const char* dir = std::getenv("FUZZ_WRITE_SEEDS")) {
        std::vector<uint8_t> rgb = fuzz::pattern_image(8, 12);
        fuzz::write_seed(dir, "a.png", data::encode_png(rgb.data(), 8, 12));
        fuzz::write_seed(dir, "a.jpg", data::encode_jpeg(rgb.data(), 8, 12, 80));
        fuzz::write_seed(dir, "b.jpg", data::encode_jpeg(rgb.data(), 8, 12, 20));
        std::exit(0);
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t n) {
    int h = 0, w = 0;
    std::vector<uint8_t> rgb;
    try {
        rgb = data::decode_image(bytes, n, "fuzz.img", h, w, int64_t(1) << 20);
    } catch (const engine::Error&) {
        return 0;
    }
    if (h <= 0 || w <= 0 || rgb.size() != (size_t)h * w * 3) std::abort();
    std::vector<uint8_t> small = data::resize_image(rgb.data(), h, w, 7, 5);
    if (small.size() != 7 * 5 * 3) std::abort();
    return 0;
}
