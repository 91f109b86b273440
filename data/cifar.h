// data/cifar.h: CIFAR-10 and CIFAR-100 in the original binary release.
//
// CIFAR-10 (cifar-10-batches-bin/): data_batch_1..5.bin (train), test_batch.bin (test);
//   record = 1 label byte (0..9) + 3072 pixel bytes (1024 R, 1024 G, 1024 B, row-major 32x32).
// CIFAR-100 (cifar-100-binary/): train.bin, test.bin;
//   record = 1 coarse label (0..19) + 1 fine label (0..99) + 3072 pixel bytes.
// Class names come from batches.meta.txt / {fine,coarse}_label_names.txt when present.
//
// Every file is checked record by record: its size must be a whole number of records (a
// truncated download or a CIFAR-100 file read as CIFAR-10 fails here) and every label must be
// in range; errors name the file, the record and its byte offset.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
#include "data/image.h"

namespace data {

enum class CifarKind { Cifar10, Cifar100 };

constexpr int64_t kCifarPixels = 3072;
inline int64_t cifar_record_bytes(CifarKind k) { return k == CifarKind::Cifar10 ? 3073 : 3074; }

// Append the records in `bytes` (the contents of `file`, named in messages) to `out`.
void parse_cifar(const uint8_t* bytes, size_t nbytes, CifarKind kind, const std::string& file, ImageSet& out);

// The files of a split ("train" or "test"). `dir` is the folder holding them or its parent
// (holding cifar-10-batches-bin/ or cifar-100-binary/).
std::vector<std::string> cifar_files(CifarKind kind, const std::string& dir, const std::string& split);

ImageSet load_cifar(CifarKind kind, const std::string& dir, const std::string& split);

}  // namespace data
