// nn/checkpoint.cpp: checkpoints on top of engine/safetensors.
#include "nn/checkpoint.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <random>
#include "engine/error.h"
#include "engine/safetensors.h"
#ifdef ENGINE_CUDA
#include "engine/cuda/runtime.h"
#endif

namespace nn {

using namespace engine;

static std::map<std::string, Tensor*> model_tensors(const Module& model) {
    std::map<std::string, Tensor*> out;
    for (auto& p : model.named_parameters()) out[p.name] = p.tensor;
    for (auto& b : model.named_buffers()) out[b.name] = b.tensor;
    return out;
}

static void save_named(const std::string& path, const std::map<std::string, Tensor*>& tensors, const Metadata& meta) {
    std::vector<std::pair<std::string, Tensor>> list;
    // Files hold host data: CUDA tensors are copied to the host first.
    for (auto& [name, t] : tensors) list.push_back({name, t->detach().to(Device::CPU)});
    save_safetensors(path, list, meta);
}

std::string first_non_finite(const Module& model) {
    for (auto& [name, t] : model_tensors(model)) {
        if (t->dtype() != DType::F32) continue;
        Tensor host = t->detach().to(Device::CPU);
        const float* v = host.data_f32();
        for (int64_t i = 0; i < host.numel(); i++)
            if (!std::isfinite(v[i])) return name;
    }
    return "";
}

// Copies the file's tensors into `into`, after checking the two sets of names, shapes and dtypes
// agree; the error lists every difference (up to a dozen) so a mismatched config is obvious.
static void load_named(const std::string& path, const std::map<std::string, Tensor*>& into, Metadata* meta) {
    std::map<std::string, Tensor> file = load_safetensors(path, meta);
    std::vector<std::string> problems;
    for (auto& [name, t] : into) {
        auto it = file.find(name);
        if (it == file.end()) problems.push_back("missing " + name);
        else if (it->second.shape() != t->shape() || it->second.dtype() != t->dtype())
            problems.push_back(fmt::format("{}: file has {} {}, model has {} {}", name, it->second.shape().str(),
                                           dtype_name(it->second.dtype()), t->shape().str(), dtype_name(t->dtype())));
    }
    for (auto& [name, t] : file)
        if (!into.count(name)) problems.push_back("unexpected " + name);
    if (!problems.empty()) {
        std::string list;
        for (size_t i = 0; i < problems.size() && i < 12; i++) list += "\n  " + problems[i];
        if (problems.size() > 12) list += fmt::format("\n  ... and {} more", problems.size() - 12);
        fail("load_checkpoint: {} does not match the model ({} differences):{}", path, problems.size(), list);
    }
    // Copied into the existing tensors (on whatever device the model is), so parameters keep their
    // identity, requires_grad and device.
    for (auto& [name, t] : into) {
        const Tensor& src = file.at(name);
        bool f32 = t->dtype() == DType::F32;
        size_t bytes = t->numel() * (f32 ? sizeof(float) : sizeof(int32_t));
        const void* from = f32 ? (const void*)src.data_f32() : (const void*)src.data_i32();
        void* to = f32 ? (void*)t->raw_f32() : (void*)t->raw_i32();
#ifdef ENGINE_CUDA
        if (t->is_cuda()) {
            engine::cuda::copy_to_device(to, from, bytes);
            continue;
        }
#endif
        std::memcpy(to, from, bytes);
    }
}

// Optimizer::param_steps that differ from "steps", in the optimizer file's metadata.
static const std::string kParamStepsKey = "param_steps.";
// The two files of one save share a random id: each is written atomically, but a stop between them
// (a crash, a second Ctrl-C) would pair the new weights with the last save's optimizer state.
static const std::string kPairKey = "checkpoint_pair";

void save_checkpoint(const std::string& prefix, const Module& model, Optimizer* opt, const Metadata& metadata) {
    Metadata meta = metadata;
    meta["model"] = model.type_name();
    // Not from the global generator: a checkpoint must not change the run's random draws.
    const std::string pair = opt ? fmt::format("{:016x}", std::random_device{}() * 0x100000000ull ^ std::random_device{}())
                                 : "";
    if (opt) meta[kPairKey] = pair;
    save_named(prefix + ".safetensors", model_tensors(model), meta);
    if (opt) {
        Metadata om = {{"steps", std::to_string(opt->steps)}, {"lr", fmt::format("{}", opt->lr)}, {kPairKey, pair}};
        for (auto& [name, n] : opt->param_steps_unlike_steps()) om[kParamStepsKey + name] = std::to_string(n);
        save_named(prefix + ".optim.safetensors", opt->state(), om);
    }
}

Metadata load_checkpoint(const std::string& prefix, Module& model, Optimizer* opt) {
    Metadata meta;
    load_named(prefix + ".safetensors", model_tensors(model), &meta);
    if (meta.count("model") && meta["model"] != model.type_name())
        fail("load_checkpoint: {}.safetensors holds a {}, not a {}", prefix, meta["model"], model.type_name());
    if (opt) {
        Metadata om;
        const std::string file = prefix + ".optim.safetensors";
        load_named(file, opt->state(), &om);
        // (Files from before the pair id have none: nothing to compare.)
        if (meta.count(kPairKey) && om.count(kPairKey) && meta[kPairKey] != om[kPairKey])
            fail("load_checkpoint: {}.safetensors and {} are not one save (pair ids {} and {}): the run stopped between "
                 "writing them; resume from another checkpoint (best.*), or restart the run",
                 prefix, file, meta[kPairKey], om[kPairKey]);
        opt->steps = meta_int(om, "steps", file, 0);
        check(opt->steps >= 0, "load_checkpoint: {}: \"steps\" is {}, not a step count", file, opt->steps);
        std::map<std::string, int64_t> counts;  // (a file from before per-parameter counts has none)
        for (auto& [key, value] : om)
            if (key.rfind(kParamStepsKey, 0) == 0) counts[key.substr(kParamStepsKey.size())] = meta_int(om, key, file);
        try {
            opt->restore_param_steps(counts);
        } catch (const Error& e) {
            fail("load_checkpoint: {}: {}", file, e.what());
        }
        opt->lr = (float)meta_number(om, "lr", file, opt->lr);
    }
    return meta;
}

// The whole value must be the number: "12abc" is as wrong as "abc".
template <typename T>
static T parse_meta(const Metadata& meta, const std::string& key, const std::string& file, std::optional<T> fallback,
                    const char* what) {
    auto it = meta.find(key);
    if (it == meta.end()) {
        if (fallback) return *fallback;
        fail("{}: the metadata has no '{}' (a checkpoint of another version?)", file, key);
    }
    const std::string& text = it->second;
    T value{};
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || text.empty())
        fail("{}: metadata '{}' is '{}', not {}", file, key, text, what);
    return value;
}

int64_t meta_int(const Metadata& meta, const std::string& key, const std::string& file, std::optional<int64_t> fallback) {
    return parse_meta<int64_t>(meta, key, file, fallback, "an integer");
}

double meta_number(const Metadata& meta, const std::string& key, const std::string& file, std::optional<double> fallback) {
    return parse_meta<double>(meta, key, file, fallback, "a number");
}

Metadata load_weights(const std::string& path, Module& model) {
    std::string prefix = path;
    const std::string ext = ".safetensors";
    if (prefix.size() > ext.size() && prefix.compare(prefix.size() - ext.size(), ext.size(), ext) == 0)
        prefix.resize(prefix.size() - ext.size());
    return load_checkpoint(prefix, model);
}

}  // namespace nn
