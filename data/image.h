#pragma once
// Decoded images and the transforms applied to them before batching.
// Image: 8-bit RGB, interleaved HWC (as stb_image decodes).
#include <cstdint>
#include <string>
#include <vector>

#include "core/generator.h"

namespace qat::data {

struct Image {
  int64_t height = 0, width = 0;
  std::vector<uint8_t> rgb;  // height * width * 3
  uint8_t at(int64_t y, int64_t x, int c) const { return rgb[(y * width + x) * 3 + c]; }
};

// Decodes a JPEG/PNG/...; greyscale and RGBA become RGB. Throws qat::Error
// naming the file when it is missing, unreadable or corrupt.
Image decode_image(const std::string& path);
void write_jpeg(const std::string& path, const Image& img, int quality = 90);

// Resize so the shorter side is `size` (aspect kept), bilinear with antialias
// when shrinking (stb_image_resize).
Image resize_shorter(const Image& img, int64_t size);
Image resize_exact(const Image& img, int64_t height, int64_t width);
Image center_crop(const Image& img, int64_t height, int64_t width);
// Crop of (height,width) at (top,left) of the image zero-padded by `padding`.
Image crop_padded(const Image& img, int64_t top, int64_t left, int64_t height, int64_t width, int64_t padding);
Image hflip(const Image& img);

}  // namespace qat::data
