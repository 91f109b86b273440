// tests/test_data_helpers.h: helpers for the data tests: a temporary directory removed at the
// end of the test, file writers (a tiny CIFAR-10 release among them), and the location of the
// real data sets (INITLAB_DATA).
#pragma once
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>
#include "engine/error.h"
#include "engine/rng.h"

namespace test {

class TempDir {
public:
    TempDir() {
        std::string tmpl = (std::filesystem::temp_directory_path() / "initlab-data-XXXXXX").string();
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        REQUIRE(mkdtemp(buf.data()) != nullptr);
        path_ = buf.data();
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::string& path() const { return path_; }
    std::string operator/(const std::string& name) const { return path_ + "/" + name; }

private:
    std::string path_;
};

// `path`, after creating its parent folders (for writers that do not create them).
inline std::string made_parent(const std::string& path) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    return path;
}

inline void write_file(const std::string& path, const std::string& bytes) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream f(path, std::ios::binary);
    REQUIRE(f.good());
    f.write(bytes.data(), (std::streamsize)bytes.size());
}

inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
    write_file(path, std::string(bytes.begin(), bytes.end()));
}

// A tiny CIFAR-10 binary release: `per_class` images per class in each training batch file,
// images made of a class-dependent colour plus noise, so a small model can learn them (the apps'
// end-to-end tests, on the CPU and on the device).
inline void write_tiny_cifar10(const std::string& dir, int per_class_train, int per_class_test) {
    engine::Generator g(3);
    auto batch = [&](int per_class) {
        std::vector<uint8_t> bytes;
        for (int i = 0; i < per_class; i++)
            for (int c = 0; c < 10; c++) {
                bytes.push_back((uint8_t)c);
                std::vector<int32_t> noise(3072);
                g.randint(noise.data(), 3072, 0, 64);
                for (int ch = 0; ch < 3; ch++)
                    for (int p = 0; p < 1024; p++)
                        bytes.push_back((uint8_t)(((c * 37 + ch * 91) % 192) + noise[ch * 1024 + p]));
            }
        return bytes;
    };
    for (int k = 1; k <= 5; k++) test::write_file(dir + "/data_batch_" + std::to_string(k) + ".bin", batch(per_class_train));
    test::write_file(dir + "/test_batch.bin", batch(per_class_test));
}

// The real data sets (a folder with ptb/, ptb-char/, cifar10-jpeg/), or "" with a printed notice.
inline std::string real_data_dir(const char* what) {
    const char* d = std::getenv("INITLAB_DATA");
    if (d && *d && std::filesystem::is_directory(d)) return d;
    WARN("skipped " << what << ": set INITLAB_DATA to the data folder (e.g. INITLAB_DATA=/work/shared/data)");
    return "";
}

// Runs f and returns the engine::Error message it throws ("" and a failed check when none).
template <typename F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const engine::Error& e) {
        return e.what();
    }
    FAIL_CHECK("expected an engine::Error");
    return "";
}

}  // namespace test
