// data/image_codec.h: JPEG/PNG decoding and encoding (stb_image, stb_image_write) and resizing
// (stb_image_resize), with errors that name the file. The stb implementations are compiled
// in image_codec.cpp and nowhere else.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace data {

// The largest image we agree to decode: a corrupt header must not make us allocate gigabytes.
constexpr int64_t kMaxImagePixels = int64_t(1) << 26;  // 8192 x 8192

// Decode JPEG or PNG bytes to 8-bit RGB (grey and RGBA are converted). `name` is used in
// messages only. Throws engine::Error when the data is not a decodable JPEG/PNG or is larger
// than max_pixels.
std::vector<uint8_t> decode_image(const uint8_t* bytes, size_t nbytes, const std::string& name, int& h, int& w,
                                  int64_t max_pixels = kMaxImagePixels);
std::vector<uint8_t> read_image(const std::string& path, int& h, int& w);

// Resample an RGB image (stb_image_resize's default filters: Mitchell down, Catmull-Rom up).
std::vector<uint8_t> resize_image(const uint8_t* rgb, int h, int w, int out_h, int out_w);

// Encode RGB to PNG (lossless) or JPEG (quality 1..100), in memory or to a file.
std::vector<uint8_t> encode_png(const uint8_t* rgb, int h, int w);
std::vector<uint8_t> encode_jpeg(const uint8_t* rgb, int h, int w, int quality = 90);
void write_png(const std::string& path, const uint8_t* rgb, int h, int w);
void write_jpeg(const std::string& path, const uint8_t* rgb, int h, int w, int quality = 90);

}  // namespace data
