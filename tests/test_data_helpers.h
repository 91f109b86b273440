// tests/test_data_helpers.h: helpers for the data tests: a temporary directory removed at the
// end of the test, file writers, and the location of the real data sets (INITLAB_DATA).
#pragma once
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>
#include "engine/error.h"

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
