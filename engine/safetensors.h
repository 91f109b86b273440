// engine/safetensors.h: read and write tensors in the safetensors format, the checkpoint format of
// the engine (PyTorch, NumPy and JAX users can open the files with the `safetensors` package).
//
// Layout of a file:
//   8 bytes      N, the header length, unsigned little-endian
//   N bytes      JSON: {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//                       "__metadata__": {"key": "value", ...}}   (metadata optional, strings only)
//   the rest     raw little-endian tensor data; offsets count from the start of this section and
//                the tensors tile it exactly (no gaps, no overlap, nothing after the last one).
//
// The writer stores float32 as F32 and int32 as I32; the reader also accepts F64 and I64 and
// narrows them to float32 / int32 (an I64 value outside int32's range is an error). Every
// problem in a file is an engine::Error naming the file and what is wrong with it.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>
#include "engine/tensor.h"

namespace engine {

// Writes `tensors` (in the given order) to `path + ".tmp"`, flushes it to disk, then renames it
// over `path`: a crash or a full disk never leaves a half-written file at `path`.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads every tensor of the file (CPU tensors, requires_grad off). When `metadata` is given it
// receives the "__metadata__" entries (cleared first; empty if the file has none).
std::map<std::string, Tensor> load_safetensors(const std::string& path,
                                               std::map<std::string, std::string>* metadata = nullptr);

}  // namespace engine
