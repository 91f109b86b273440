// engine/atomic_file.cpp: write_file_atomically (atomic_file.h).
#include "engine/atomic_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <unistd.h>
#include "engine/error.h"

namespace engine {

void write_file_atomically(const std::string& path, const std::vector<FileChunk>& chunks, const std::string& who) {
    namespace fs = std::filesystem;
    std::error_code ec;
    // The temporary file is renamed over `path`: never over a directory or a device.
    check(!fs::exists(path, ec) || fs::is_regular_file(path, ec), "{}: {} exists and is not a regular file", who,
          path);
    const std::string tmp = path + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    check(f != nullptr, "{}: cannot create {}: {}", who, tmp, std::strerror(errno));
    // Every failure after the open: close, remove the temporary file, name what failed.
    auto give_up = [&](const char* what, int err, bool close) {
        if (close) std::fclose(f);
        std::remove(tmp.c_str());
        fail("{}: {}: {} failed: {}", who, tmp, what, std::strerror(err));
    };
    for (const FileChunk& c : chunks)
        if (c.bytes > 0 && std::fwrite(c.data, 1, c.bytes, f) != c.bytes) give_up("write", errno, true);
    // Data on disk before the rename, so the rename can never expose a file with missing bytes.
    if (std::fflush(f) != 0 || ::fsync(::fileno(f)) != 0) give_up("flush", errno, true);
    if (std::fclose(f) != 0) give_up("close", errno, false);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        std::remove(tmp.c_str());
        fail("{}: cannot rename {} to {}: {}", who, tmp, path, std::strerror(err));
    }
}

void write_file_atomically(const std::string& path, std::string_view text, const std::string& who) {
    write_file_atomically(path, {{text.data(), text.size()}}, who);
}

}  // namespace engine
