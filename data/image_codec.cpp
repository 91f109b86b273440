// data/image_codec.cpp: the one place the stb implementations are compiled (see image_codec.h).
//
// Only the JPEG and PNG decoders are built: fewer formats, less code reachable from a corrupt
// file. Decoding first reads the header (stbi_info) so an absurd size is refused before any
// allocation.
#include "data/image_codec.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include "data/text.h"
#include "engine/error.h"

#define STBI_ONLY_JPEG
#define STBI_ONLY_PNG
#define STBI_NO_STDIO
#define STB_IMAGE_IMPLEMENTATION
#include <stb/stb_image.h>

#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>

#define STB_IMAGE_RESIZE_IMPLEMENTATION
#include <stb/stb_image_resize.h>

using engine::check;

namespace data {

// stb_image 2.27 (the Debian version) does not check that a JPEG Huffman table (DHT segment)
// declares at most 256 codes, and writes past its tables when one declares more (found by
// fuzz/fuzz_image; fixed upstream in 2.28). Walk the marker segments the way stb does and refuse
// such a file before stb sees it. Returns the number of codes of the first bad table, or 0.
static int jpeg_oversized_huffman_table(const uint8_t* b, size_t n) {
    // stb accepts any number of 0xFF fill bytes before the SOI marker (0xFF 0xD8).
    if (n < 4 || b[0] != 0xFF) return 0;
    size_t i = 1;
    while (i < n && b[i] == 0xFF) i++;
    if (i >= n || b[i] != 0xD8) return 0;  // not a JPEG: stb will not parse it as one
    i++;
    while (i + 1 < n) {
        if (b[i] != 0xFF) { i++; continue; }       // entropy-coded data or junk: look for the next marker
        uint8_t m = b[i + 1];
        if (m == 0xFF) { i++; continue; }          // fill byte
        if (m == 0x00 || m == 0x01 || (m >= 0xD0 && m <= 0xD8)) { i += 2; continue; }  // no length field
        if (m == 0xD9) return 0;                   // end of image: stb stops here
        if (i + 3 >= n) return 0;
        size_t len = ((size_t)b[i + 2] << 8) | b[i + 3];
        if (m == 0xC4) {
            // Tables: class/id byte, 16 code counts, then the codes; stb walks them while bytes remain.
            size_t p = i + 4, end = i + 2 + len;
            while (p < end && p < n) {
                int codes = 0;
                for (size_t k = 1; k <= 16; k++) codes += p + k < n ? b[p + k] : 0;
                if (codes > 256) return codes;
                p += 17 + codes;
            }
        }
        i += 2 + std::max<size_t>(len, 2);
    }
    return 0;
}

std::vector<uint8_t> decode_image(const uint8_t* bytes, size_t nbytes, const std::string& name, int& h, int& w,
                                  int64_t max_pixels) {
    check(nbytes > 0, "{}: empty file, not an image", name);
    check(nbytes <= (size_t)INT_MAX, "{}: {} bytes is too large for an image file", name, nbytes);
    if (int codes = jpeg_oversized_huffman_table(bytes, nbytes))
        engine::fail("{}: corrupt JPEG: a Huffman table declares {} codes (at most 256)", name, codes);
    int iw = 0, ih = 0, channels = 0;
    if (!stbi_info_from_memory(bytes, (int)nbytes, &iw, &ih, &channels))
        engine::fail("{}: cannot decode image ({}); expected JPEG or PNG", name, stbi_failure_reason());
    check(iw > 0 && ih > 0 && (int64_t)iw * ih <= max_pixels, "{}: image size {}x{} is outside 1..{} pixels", name,
          iw, ih, max_pixels);
    int dw = 0, dh = 0;
    uint8_t* p = stbi_load_from_memory(bytes, (int)nbytes, &dw, &dh, &channels, 3);
    if (!p) engine::fail("{}: cannot decode image ({}); expected JPEG or PNG", name, stbi_failure_reason());
    std::vector<uint8_t> out(p, p + (size_t)dw * dh * 3);
    stbi_image_free(p);
    h = dh;
    w = dw;
    return out;
}

std::vector<uint8_t> read_image(const std::string& path, int& h, int& w) {
    std::string bytes = read_file(path);
    return decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path, h, w);
}

std::vector<uint8_t> resize_image(const uint8_t* rgb, int h, int w, int out_h, int out_w) {
    check(h > 0 && w > 0 && out_h > 0 && out_w > 0, "resize_image: {}x{} -> {}x{}: sizes must be positive", h, w, out_h,
          out_w);
    std::vector<uint8_t> out((size_t)out_h * out_w * 3);
    if (out_h == h && out_w == w) {
        std::copy(rgb, rgb + out.size(), out.begin());
        return out;
    }
    check(stbir_resize_uint8(rgb, w, h, 0, out.data(), out_w, out_h, 0, 3) == 1, "resize_image: {}x{} -> {}x{} failed",
          h, w, out_h, out_w);
    return out;
}

static void append_bytes(void* ctx, void* data, int size) {
    auto* out = static_cast<std::vector<uint8_t>*>(ctx);
    out->insert(out->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
}

std::vector<uint8_t> encode_png(const uint8_t* rgb, int h, int w) {
    std::vector<uint8_t> out;
    check(stbi_write_png_to_func(append_bytes, &out, w, h, 3, rgb, w * 3) != 0, "encode_png: {}x{} failed", h, w);
    return out;
}

std::vector<uint8_t> encode_jpeg(const uint8_t* rgb, int h, int w, int quality) {
    std::vector<uint8_t> out;
    check(quality >= 1 && quality <= 100, "encode_jpeg: quality {} outside 1..100", quality);
    check(stbi_write_jpg_to_func(append_bytes, &out, w, h, 3, rgb, quality) != 0, "encode_jpeg: {}x{} failed", h, w);
    return out;
}

static void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    check(f != nullptr, "{}: cannot open for writing", path);
    size_t n = std::fwrite(bytes.data(), 1, bytes.size(), f);
    bool closed = std::fclose(f) == 0;
    check(n == bytes.size() && closed, "{}: write error", path);
}

void write_png(const std::string& path, const uint8_t* rgb, int h, int w) { write_bytes(path, encode_png(rgb, h, w)); }

void write_jpeg(const std::string& path, const uint8_t* rgb, int h, int w, int quality) {
    write_bytes(path, encode_jpeg(rgb, h, w, quality));
}

}  // namespace data
