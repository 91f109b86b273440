// engine/atomic_file.h: a file replaced whole or not at all (checkpoints, vocab.txt, run files).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace engine {

struct FileChunk {
    const void* data;
    size_t bytes;
};

// Writes the chunks, in order, to `path`.tmp, flushes them to disk (fsync), then renames the
// temporary file over `path`: a reader (or a resumed run) finds the old file or the new one whole,
// never a part, whatever stops the writer. On any failure (a full disk shows at the flush) the
// temporary file is removed, `path` is left as it was, and the error starts with `who` and names
// the file. `path` must not be a directory or a device.
void write_file_atomically(const std::string& path, const std::vector<FileChunk>& chunks, const std::string& who);
void write_file_atomically(const std::string& path, std::string_view text, const std::string& who);

}  // namespace engine
