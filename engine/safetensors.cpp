// engine/safetensors.cpp: the safetensors reader and writer (format in engine/safetensors.h).
//
// The reader validates the whole header before it allocates or reads any tensor, so a corrupt or
// truncated file fails with one clear message instead of a crash or a silently wrong tensor.
#include "engine/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>
#include "engine/atomic_file.h"
#include "engine/error.h"

namespace engine {

// Tensor bytes are copied straight between memory and the file, which is little-endian.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

constexpr const char* kMetadataKey = "__metadata__";

// ---------------------------------------------------------------------------------------------
// dtypes: the on-disk name, its element size, and the engine dtype it loads as.

struct DiskType {
    const char* name;
    size_t size;
    DType loads_as;
};

constexpr DiskType kDiskTypes[] = {
    {"F32", 4, DType::F32},
    {"I32", 4, DType::I32},
    {"F64", 8, DType::F32},  // narrowed on load
    {"I64", 8, DType::I32},  // narrowed on load, range-checked
};

const DiskType* find_disk_type(const std::string& name) {
    for (const DiskType& t : kDiskTypes)
        if (name == t.name) return &t;
    return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Writing

std::string make_header(const std::vector<std::pair<std::string, Tensor>>& tensors,
                        const std::map<std::string, std::string>& metadata) {
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) header[kMetadataKey] = metadata;
    uint64_t offset = 0;
    for (const auto& [name, t] : tensors) {
        uint64_t nbytes = (uint64_t)t.numel() * 4;
        header[name] = {{"dtype", t.dtype() == DType::F32 ? "F32" : "I32"},
                        {"shape", t.shape().vec()},
                        {"data_offsets", {offset, offset + nbytes}}};
        offset += nbytes;
    }
    std::string text = header.dump();
    // Pad with spaces (valid JSON whitespace) so the data section starts 8-byte aligned, as the
    // reference writer does: a reader that maps the file can then use the data in place.
    text.append((8 - text.size() % 8) % 8, ' ');
    return text;
}

}  // namespace

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
    std::set<std::string> seen;
    std::vector<std::pair<std::string, Tensor>> host;  // CPU copies of any device tensors
    host.reserve(tensors.size());
    for (const auto& [name, t] : tensors) {
        check(!name.empty(), "save_safetensors: {}: a tensor has an empty name", path);
        check(name != kMetadataKey, "save_safetensors: {}: '{}' is reserved for metadata", path, name);
        check(seen.insert(name).second, "save_safetensors: {}: tensor name '{}' appears twice", path, name);
        check(t.defined(), "save_safetensors: {}: tensor '{}' is undefined", path, name);
        host.emplace_back(name, t.device() == Device::CPU ? t : t.to(Device::CPU));
    }
    std::string header = make_header(host, metadata);

    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)header.size() >> (8 * i));
    std::vector<FileChunk> chunks = {{len, 8}, {header.data(), header.size()}};
    for (const auto& [name, t] : host)
        chunks.push_back({t.dtype() == DType::F32 ? (const void*)t.data_f32() : (const void*)t.data_i32(),
                          (size_t)t.numel() * 4});
    write_file_atomically(path, chunks, "save_safetensors");
}

// ---------------------------------------------------------------------------------------------
// Reading

namespace {

// One tensor's header entry, validated.
struct Entry {
    std::string name;
    const DiskType* type;
    Shape shape;
    uint64_t begin, end;  // relative to the data section
};

using json = nlohmann::json;

bool is_count(const json& j) { return j.is_number_unsigned(); }

Entry parse_entry(const std::string& path, const std::string& name, const json& j, uint64_t data_size) {
    check(j.is_object(), "load_safetensors: {}: entry '{}' is not a JSON object", path, name);
    check(j.contains("dtype") && j["dtype"].is_string(), "load_safetensors: {}: tensor '{}' has no string \"dtype\"",
          path, name);
    check(j.contains("shape") && j["shape"].is_array(), "load_safetensors: {}: tensor '{}' has no \"shape\" array",
          path, name);
    check(j.contains("data_offsets") && j["data_offsets"].is_array() && j["data_offsets"].size() == 2 &&
              is_count(j["data_offsets"][0]) && is_count(j["data_offsets"][1]),
          "load_safetensors: {}: tensor '{}' needs \"data_offsets\": [begin, end] (two non-negative integers)", path,
          name);

    Entry e;
    e.name = name;
    std::string dtype = j["dtype"].get<std::string>();
    e.type = find_disk_type(dtype);
    check(e.type != nullptr,
          "load_safetensors: {}: tensor '{}' has unsupported dtype {} (supported: F32, I32, F64, I64)", path, name,
          dtype);

    const json& shape = j["shape"];
    check(shape.size() <= (size_t)kMaxDims,
          "load_safetensors: {}: tensor '{}' has {} dims, the engine supports up to {}", path, name, shape.size(),
          kMaxDims);
    // numel saturates instead of overflowing: anything past the data section is a mismatch anyway.
    uint64_t numel = 1;
    bool too_big = false;
    e.shape.ndim = (int)shape.size();
    for (size_t i = 0; i < shape.size(); i++) {
        check(is_count(shape[i]), "load_safetensors: {}: tensor '{}' has a shape entry that is not a non-negative "
              "integer: {}", path, name, shape.dump());
        uint64_t d = shape[i].get<uint64_t>();
        if (d > (uint64_t)INT64_MAX / 2) too_big = true;
        else if (d != 0 && numel > UINT64_MAX / 16 / d) too_big = true;
        else numel *= d;
        e.shape.d[i] = (int64_t)std::min<uint64_t>(d, INT64_MAX / 2);
    }
    if (too_big) numel = UINT64_MAX / 16;
    e.begin = j["data_offsets"][0].get<uint64_t>();
    e.end = j["data_offsets"][1].get<uint64_t>();
    check(e.begin <= e.end, "load_safetensors: {}: tensor '{}' has data_offsets [{}, {}] with begin after end", path,
          name, e.begin, e.end);
    check(e.end <= data_size, "load_safetensors: {}: tensor '{}' has data_offsets [{}, {}] past the end of the data "
          "section ({} bytes)", path, name, e.begin, e.end, data_size);
    uint64_t want = too_big ? UINT64_MAX : numel * e.type->size;
    check(e.end - e.begin == want, "load_safetensors: {}: tensor '{}' of shape {} and dtype {} needs {} bytes but its "
          "data_offsets [{}, {}] span {}", path, name, shape.dump(), dtype, too_big ? std::string("too many")
          : std::to_string(want), e.begin, e.end, e.end - e.begin);
    return e;
}

// The tensors must tile the data section exactly: sorted by offset, each starts where the last ended.
void check_tiling(const std::string& path, std::vector<Entry> entries, uint64_t data_size) {
    std::sort(entries.begin(), entries.end(),
              [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
    uint64_t pos = 0;
    const Entry* prev = nullptr;
    for (const Entry& e : entries) {
        if (e.begin < pos)
            fail("load_safetensors: {}: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", path, prev->name, prev->begin,
                 prev->end, e.name, e.begin, e.end);
        if (e.begin > pos)
            fail("load_safetensors: {}: {} unused bytes before tensor '{}' at offset {} (tensors must be packed)", path,
                 e.begin - pos, e.name, e.begin);
        pos = e.end;
        prev = &e;
    }
    check(pos == data_size, "load_safetensors: {}: {} bytes of trailing garbage after the last tensor (data section "
          "is {} bytes, tensors end at {})", path, data_size - pos, data_size, pos);
}

void read_exact(std::ifstream& in, const std::string& path, uint64_t at, void* out, uint64_t n) {
    in.seekg((std::streamoff)at);
    in.read(static_cast<char*>(out), (std::streamsize)n);
    check((bool)in, "load_safetensors: {}: read of {} bytes at offset {} failed (file changed or unreadable?)", path,
          n, at);
}

Tensor read_tensor(std::ifstream& in, const std::string& path, const Entry& e, uint64_t data_start) {
    Tensor t = Tensor::empty(e.shape, e.type->loads_as);
    uint64_t n = (uint64_t)t.numel(), at = data_start + e.begin;
    if (n == 0) return t;
    std::string name = e.type->name;
    if (name == "F32") {
        read_exact(in, path, at, t.data_f32(), n * 4);
    } else if (name == "I32") {
        read_exact(in, path, at, t.data_i32(), n * 4);
    } else if (name == "F64") {
        std::vector<double> buf(n);
        read_exact(in, path, at, buf.data(), n * 8);
        float* p = t.data_f32();
        for (uint64_t i = 0; i < n; i++) p[i] = (float)buf[i];
    } else {  // I64
        std::vector<int64_t> buf(n);
        read_exact(in, path, at, buf.data(), n * 8);
        int32_t* p = t.data_i32();
        for (uint64_t i = 0; i < n; i++) {
            check(buf[i] >= INT32_MIN && buf[i] <= INT32_MAX, "load_safetensors: {}: I64 tensor '{}' holds {} at "
                  "element {}, outside int32 range", path, e.name, buf[i], i);
            p[i] = (int32_t)buf[i];
        }
    }
    return t;
}

}  // namespace

std::map<std::string, Tensor> load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
    std::error_code ec;
    check(!std::filesystem::is_directory(path, ec), "load_safetensors: {} is a directory, not a file", path);
    std::ifstream in(path, std::ios::binary);
    check((bool)in, "load_safetensors: cannot open {}: {}", path, std::strerror(errno));
    in.seekg(0, std::ios::end);
    std::streamoff end = in.tellg();
    check(end >= 0, "load_safetensors: {}: cannot determine the file size", path);
    uint64_t file_size = (uint64_t)end;
    in.seekg(0);
    check(file_size >= 8, "load_safetensors: {}: file is {} bytes, shorter than the 8-byte header length", path,
          file_size);

    uint8_t len[8];
    read_exact(in, path, 0, len, 8);
    uint64_t header_len = 0;
    for (int i = 0; i < 8; i++) header_len |= (uint64_t)len[i] << (8 * i);
    check(header_len <= file_size - 8, "load_safetensors: {}: header length {} goes past the end of the file ({} "
          "bytes)", path, header_len, file_size);

    std::string text(header_len, '\0');
    read_exact(in, path, 8, text.data(), header_len);
    json header;
    try {
        header = json::parse(text);
    } catch (const json::parse_error& e) {
        fail("load_safetensors: {}: the header is not valid JSON: {}", path, e.what());
    }
    check(header.is_object(), "load_safetensors: {}: the header is JSON but not an object", path);

    uint64_t data_start = 8 + header_len, data_size = file_size - data_start;
    std::vector<Entry> entries;
    if (metadata) metadata->clear();
    for (const auto& [key, value] : header.items()) {
        if (key == kMetadataKey) {
            check(value.is_object(), "load_safetensors: {}: \"__metadata__\" is not an object", path);
            for (const auto& [mk, mv] : value.items()) {
                check(mv.is_string(), "load_safetensors: {}: metadata value of '{}' is not a string", path, mk);
                if (metadata) (*metadata)[mk] = mv.get<std::string>();
            }
            continue;
        }
        entries.push_back(parse_entry(path, key, value, data_size));
    }
    check_tiling(path, entries, data_size);

    std::map<std::string, Tensor> out;
    for (const Entry& e : entries) out.emplace(e.name, read_tensor(in, path, e, data_start));
    return out;
}

}  // namespace engine
