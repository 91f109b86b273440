// fuzz/seeds.h: small valid inputs the fuzz targets write as their starting corpus
// (FUZZ_WRITE_SEEDS=DIR ./fuzz_x), so the fuzzer starts from real formats.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace fuzz {

inline void write_seed(const std::string& dir, const std::string& name, const std::string& bytes) {
    std::ofstream(dir + "/" + name, std::ios::binary).write(bytes.data(), (std::streamsize)bytes.size());
}

inline void write_seed(const std::string& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
    write_seed(dir, name, std::string(bytes.begin(), bytes.end()));
}

inline std::vector<uint8_t> cifar_records(bool cifar100, int count) {
    std::vector<uint8_t> out;
    for (int r = 0; r < count; r++) {
        if (cifar100) out.push_back((uint8_t)(r % 20));
        out.push_back((uint8_t)(r % 10));
        for (int i = 0; i < 3072; i++) out.push_back((uint8_t)(i * 7 + r));
    }
    return out;
}

inline std::vector<uint8_t> pattern_image(int h, int w) {
    std::vector<uint8_t> rgb((size_t)h * w * 3);
    for (size_t i = 0; i < rgb.size(); i++) rgb[i] = (uint8_t)(i * 13 % 251);
    return rgb;
}

}  // namespace fuzz
