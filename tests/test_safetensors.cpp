// tests/test_safetensors.cpp: the safetensors reader and writer: round trips, a file assembled
// byte by byte (so the reader is not only checked against our own writer), every kind of corrupt
// file failing with a message that names the file and the fault, and the atomic write.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>
#include "engine/error.h"
#include "engine/safetensors.h"
#include "tests/helpers.h"

using namespace engine;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// A fresh directory per test case, removed at the end.
struct TempDir {
    fs::path dir;
    explicit TempDir(const std::string& tag) {
        dir = fs::temp_directory_path() / ("engine_safetensors_" + tag + "_" + std::to_string(::getpid()));
        fs::remove_all(dir);
        fs::create_directories(dir);
    }
    ~TempDir() { fs::remove_all(dir); }
    std::string file(const std::string& name) const { return (dir / name).string(); }
};

using Bytes = std::vector<uint8_t>;

void write_bytes(const std::string& path, const Bytes& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), (std::streamsize)bytes.size());
}

// 8-byte little-endian length, then the header text, then `data`.
Bytes assemble(const std::string& header, const Bytes& data, uint64_t declared_len) {
    Bytes b;
    for (int i = 0; i < 8; i++) b.push_back((uint8_t)(declared_len >> (8 * i)));
    b.insert(b.end(), header.begin(), header.end());
    b.insert(b.end(), data.begin(), data.end());
    return b;
}
Bytes assemble(const std::string& header, const Bytes& data) { return assemble(header, data, header.size()); }

Bytes zeros(size_t n) { return Bytes(n, 0); }

}  // namespace

TEST_CASE("safetensors round trip keeps names, shapes, dtypes, values and metadata", "[safetensors]") {
    TempDir tmp("roundtrip");
    std::string path = tmp.file("model.safetensors");
    Tensor w = test::param({3, 4, 5}, 1, -2.f, 2.f);
    Tensor b = test::param({7}, 2);
    b.data_f32()[0] = -0.f;  // bit patterns survive, not only values
    b.data_f32()[1] = 1e-40f;  // a subnormal
    Tensor ids = Tensor::from_vector(std::vector<int32_t>{-5, 0, 2147483647, -2147483647 - 1, 42, 7}, {2, 3});
    Tensor scalar = Tensor::full({}, 3.5f);
    Tensor empty = Tensor::empty({0, 4});
    Tensor six_d = test::param({1, 2, 1, 2, 1, 2}, 3);
    std::map<std::string, std::string> meta{{"format", "pt"}, {"step", "1200"}, {"note", "quotes \" and \\ ok"}};
    save_safetensors(path,
                     {{"blocks.0.attn.q.weight", w}, {"b", b}, {"ids", ids}, {"scalar", scalar}, {"empty", empty},
                      {"six_d", six_d}},
                     meta);

    std::map<std::string, std::string> meta_back{{"stale", "entry"}};
    auto loaded = load_safetensors(path, &meta_back);
    CHECK(meta_back == meta);
    REQUIRE(loaded.size() == 6);
    auto same = [&](const std::string& name, const Tensor& want) {
        INFO(name);
        REQUIRE(loaded.count(name) == 1);
        const Tensor& got = loaded.at(name);
        CHECK(got.shape() == want.shape());
        CHECK(got.dtype() == want.dtype());
        CHECK_FALSE(got.requires_grad());
        if (want.numel() > 0)  // (memcmp with null pointers is undefined even for 0 bytes)
            CHECK(std::memcmp(got.impl()->storage->data, want.impl()->storage->data, (size_t)want.numel() * 4) == 0);
    };
    same("blocks.0.attn.q.weight", w);
    same("b", b);
    same("ids", ids);
    same("scalar", scalar);
    same("empty", empty);
    same("six_d", six_d);
    CHECK(loaded.at("scalar").item() == 3.5f);
    CHECK(std::signbit(loaded.at("b").data_f32()[0]));

    // No metadata written -> none read back; and the data section starts 8-byte aligned.
    save_safetensors(path, {{"x", scalar}});
    auto again = load_safetensors(path, &meta_back);
    CHECK(meta_back.empty());
    CHECK(again.at("x").item() == 3.5f);
    std::ifstream in(path, std::ios::binary);
    uint8_t len[8];
    in.read(reinterpret_cast<char*>(len), 8);
    CHECK(len[0] % 8 == 0);
}

TEST_CASE("safetensors reads a file written byte by byte", "[safetensors]") {
    TempDir tmp("handmade");
    std::string path = tmp.file("hand.safetensors");
    // The tensors are listed out of data order and with extra whitespace, as other writers may do.
    std::string header = R"({ "b": {"dtype":"I32", "shape":[1], "data_offsets":[8,12]},)"
                         R"( "__metadata__": {"who": "hand"},)"
                         R"( "a": {"dtype":"F32", "shape":[2], "data_offsets":[0,8]} })";
    Bytes data = {
        0x00, 0x00, 0x80, 0x3f,  // a[0] = 1.0f
        0x00, 0x00, 0x00, 0xc0,  // a[1] = -2.0f
        0x07, 0x01, 0x00, 0x00,  // b[0] = 263
    };
    write_bytes(path, assemble(header, data));
    std::map<std::string, std::string> meta;
    auto t = load_safetensors(path, &meta);
    REQUIRE(t.size() == 2);
    CHECK(meta == std::map<std::string, std::string>{{"who", "hand"}});
    CHECK(t.at("a").shape() == Shape({2}));
    CHECK(t.at("a").dtype() == DType::F32);
    CHECK(t.at("a").to_vector() == std::vector<float>{1.f, -2.f});
    CHECK(t.at("b").dtype() == DType::I32);
    CHECK(t.at("b").data_i32()[0] == 263);

    // Our writer produces exactly these bytes for the same tensors (keys in the given order).
    std::string ours = tmp.file("ours.safetensors");
    save_safetensors(ours, {{"a", t.at("a")}, {"b", t.at("b")}});
    std::ifstream in(ours, std::ios::binary);
    Bytes got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string want_header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"I32","shape":[1],"data_offsets":[8,12]}})";
    want_header.append((8 - want_header.size() % 8) % 8, ' ');
    CHECK(got == assemble(want_header, data));
}

TEST_CASE("safetensors converts F64 and I64 on load", "[safetensors]") {
    TempDir tmp("wide");
    std::string path = tmp.file("wide.safetensors");
    double d[2] = {0.1, -3.0};
    int64_t q[3] = {-7, 0, 123456789};
    Bytes data(40);
    std::memcpy(data.data(), d, 16);
    std::memcpy(data.data() + 16, q, 24);
    write_bytes(path, assemble(R"({"d":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},)"
                               R"("q":{"dtype":"I64","shape":[3,1],"data_offsets":[16,40]}})", data));
    auto t = load_safetensors(path);
    CHECK(t.at("d").dtype() == DType::F32);
    CHECK(t.at("d").to_vector() == std::vector<float>{0.1f, -3.f});
    CHECK(t.at("q").dtype() == DType::I32);
    CHECK(t.at("q").shape() == Shape({3, 1}));
    CHECK(t.at("q").data_i32()[2] == 123456789);

    q[1] = int64_t(1) << 40;
    std::memcpy(data.data() + 16, q, 24);
    write_bytes(path, assemble(R"({"q":{"dtype":"I64","shape":[3],"data_offsets":[0,24]}})",
                               Bytes(data.begin() + 16, data.end())));
    CHECK_THROWS_WITH(load_safetensors(path), Contains("'q'") && Contains("outside int32 range"));
}

TEST_CASE("safetensors rejects bad files with a clear message", "[safetensors]") {
    TempDir tmp("bad");
    std::string path = tmp.file("bad.safetensors");
    const std::string good_entry = R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
    // Loads `bytes` from `path` and expects an error naming the file and containing `what`.
    auto expect_error = [&](const Bytes& bytes, const std::string& what) {
        write_bytes(path, bytes);
        INFO("expecting: " << what);
        CHECK_THROWS_WITH(load_safetensors(path), Contains(path) && Contains(what));
    };
    // Sanity: the good entry alone loads, so each failure below is caused by its one change.
    write_bytes(path, assemble("{" + good_entry + "}", zeros(8)));
    CHECK_NOTHROW(load_safetensors(path));

    SECTION("missing file") {
        CHECK_THROWS_WITH(load_safetensors(tmp.file("nope.safetensors")),
                          Contains("nope.safetensors") && Contains("cannot open"));
        CHECK_THROWS_WITH(load_safetensors(tmp.dir.string()), Contains("is a directory"));
    }
    SECTION("shorter than 8 bytes") {
        expect_error({}, "shorter than the 8-byte header length");
        expect_error({1, 0, 0}, "file is 3 bytes");
    }
    SECTION("header length past the end") {
        expect_error(assemble("{}", {}, 3), "header length 3 goes past the end of the file (10 bytes)");
        expect_error(assemble("{}", {}, ~uint64_t(0)), "goes past the end");
    }
    SECTION("invalid JSON") {
        expect_error(assemble("{\"x\": ", {}), "not valid JSON");
        expect_error(assemble("[1, 2]", {}), "not an object");
        expect_error(assemble(R"({"x": 3})", {}), "entry 'x' is not a JSON object");
        expect_error(assemble(R"({"x":{"shape":[2],"data_offsets":[0,8]}})", zeros(8)), "'x' has no string \"dtype\"");
        expect_error(assemble(R"({"x":{"dtype":"F32","data_offsets":[0,8]}})", zeros(8)), "no \"shape\"");
        expect_error(assemble(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", zeros(8)), "data_offsets");
        expect_error(assemble(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[-1,8]}})", zeros(8)),
                     "data_offsets");
        expect_error(assemble(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", zeros(8)),
                     "not a non-negative integer");
        expect_error(assemble(R"({"x":{"dtype":"F32","shape":[1,1,1,1,1,1,2],"data_offsets":[0,8]}})", zeros(8)),
                     "has 7 dims");
        expect_error(assemble(R"({"__metadata__": {"a": 1}, )" + good_entry + "}", zeros(8)),
                     "metadata value of 'a' is not a string");
    }
    SECTION("unknown dtype") {
        expect_error(assemble(R"({"x":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})", zeros(4)),
                     "unsupported dtype BF16");
    }
    SECTION("shape and offsets disagree") {
        expect_error(assemble(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", zeros(8)),
                     "needs 12 bytes but its data_offsets [0, 8] span 8");
        expect_error(assemble(R"({"x":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", zeros(8)),
                     "needs 16 bytes");
        // A shape whose byte count overflows 64 bits must not wrap around to a small number.
        expect_error(assemble(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", {}),
                     "needs too many bytes");
    }
    SECTION("out-of-range and overlapping offsets") {
        expect_error(assemble(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", zeros(8)),
                     "past the end of the data section (8 bytes)");
        expect_error(assemble(R"({"x":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", zeros(8)),
                     "begin after end");
        expect_error(assemble(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", zeros(12)),
                     "tensors 'x' [0, 8] and 'y' [4, 12] overlap");
        expect_error(assemble(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", zeros(8)),
                     "4 unused bytes before tensor 'x'");
    }
    SECTION("trailing garbage") {
        expect_error(assemble("{" + good_entry + "}", zeros(9)), "1 bytes of trailing garbage");
        expect_error(assemble("{}", zeros(3)), "3 bytes of trailing garbage");
    }
}

TEST_CASE("save_safetensors writes atomically and checks its arguments", "[safetensors]") {
    TempDir tmp("atomic");
    std::string path = tmp.file("ckpt.safetensors");
    Tensor a = test::param({4, 4}, 5);
    save_safetensors(path, {{"a", a}});
    CHECK(fs::exists(path));
    CHECK_FALSE(fs::exists(path + ".tmp"));
    // Overwriting replaces the file whole.
    save_safetensors(path, {{"b", Tensor::full({2}, 1.f)}});
    auto t = load_safetensors(path);
    CHECK(t.size() == 1);
    CHECK(t.count("b") == 1);
    CHECK_FALSE(fs::exists(path + ".tmp"));

    // Invalid arguments fail before anything is written: the old file stays intact.
    CHECK_THROWS_WITH(save_safetensors(path, {{"a", a}, {"a", a}}), Contains("'a' appears twice"));
    CHECK_THROWS_WITH(save_safetensors(path, {{"__metadata__", a}}), Contains("reserved"));
    CHECK_THROWS_WITH(save_safetensors(path, {{"u", Tensor()}}), Contains("'u' is undefined"));
    CHECK(load_safetensors(path).count("b") == 1);
    CHECK_FALSE(fs::exists(path + ".tmp"));

    // A directory that does not exist: a clear error, and no file appears anywhere.
    std::string bad = tmp.file("no/such/dir/x.safetensors");
    CHECK_THROWS_WITH(save_safetensors(bad, {{"a", a}}), Contains("cannot create") && Contains(bad + ".tmp"));
    CHECK_FALSE(fs::exists(bad));
}
