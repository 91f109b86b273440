// nn/checkpoint.h: model and optimizer checkpoints in the safetensors format.
//
// `save_checkpoint(prefix, ...)` writes two files, each atomically (engine/atomic_file.h):
//   prefix.safetensors        every parameter and buffer under its dotted name (PyTorch-readable)
//   prefix.optim.safetensors  the optimizer state ("<param>.exp_avg", ...), with the step count,
//                             the learning rate and each parameter's own update count where it
//                             differs ("param_steps.<param>") in the metadata
// Loading checks names, shapes and dtypes against the model and lists every difference.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include "nn/module.h"
#include "nn/optim.h"

namespace nn {

using Metadata = std::map<std::string, std::string>;

void save_checkpoint(const std::string& prefix, const Module& model, Optimizer* opt = nullptr,
                     const Metadata& metadata = {});
// The name of the model's first float parameter or buffer (in name order) holding a NaN or an
// infinity, or "" when every value is finite: the trainers check it before a checkpoint, so that a
// run that diverged stops without writing its weights over the last good ones.
std::string first_non_finite(const Module& model);
// Loads into the model's tensors in place (and the optimizer's, when given); returns the metadata.
Metadata load_checkpoint(const std::string& prefix, Module& model, Optimizer* opt = nullptr);
// The model's tensors only, from `path`: a checkpoint's prefix or its .safetensors file
// (RUN/best.safetensors). For weights that start a new run (--init-from) or are inspected.
Metadata load_weights(const std::string& path, Module& model);

// A metadata value as a number. Missing, or not a number (a checkpoint of another version, or one
// edited by hand): `fallback` when one is given for a missing key, else an error naming `file`
// and `key`.
int64_t meta_int(const Metadata& meta, const std::string& key, const std::string& file,
                 std::optional<int64_t> fallback = std::nullopt);
double meta_number(const Metadata& meta, const std::string& key, const std::string& file,
                   std::optional<double> fallback = std::nullopt);

}  // namespace nn
