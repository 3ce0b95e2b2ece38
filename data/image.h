#pragma once
// Decoded images and the geometric operations applied to them before batching.
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

// A crop rectangle in image coordinates. top/left may be negative and the box
// may reach past the image: pixels outside the image read as zero (black), the
// same as torchvision's zero padding before a crop.
struct CropBox {
  int64_t top = 0, left = 0, height = 0, width = 0;
};

// What an image file may declare before it is decoded: a few hundred bytes
// can declare gigabytes of pixels, and an extreme aspect ratio resizes into a
// huge image. Defaults pass any photo (ImageNet's largest are ~12 MP).
struct DecodeLimits {
  int64_t max_pixels = int64_t{1} << 26;  // 64 Mi pixels
  double max_aspect = 32.0;               // long side / short side
};

// Decodes a JPEG/PNG/...; greyscale and RGBA become RGB (alpha dropped, not
// blended). Throws qat::Error naming the file when it is missing, not a
// readable regular file (saying which: a dangling link, a link loop, a folder,
// a device) or corrupt (with stb_image's reason), or when its size breaks
// `limits` (checked from the header, before decoding, where the format allows).
Image decode_image(const std::string& path, const DecodeLimits& limits = {});
// Encoded in memory, then written with every write checked (a full disk is an
// error naming the file, not an empty file) to a temporary file renamed over
// `path` (core/text_file.h).
void write_jpeg(const std::string& path, const Image& img, int quality = 90);
void write_png(const std::string& path, const Image& img);  // lossless (tests)

// Resize so the shorter side is `size` (aspect kept; the longer side is
// floor(size * long / short), as torchvision's Resize(int)), bilinear with
// antialias when shrinking, bit-exact with Pillow's BILINEAR (data/resample.h).
Image resize_shorter(const Image& img, int64_t size);
Image resize_exact(const Image& img, int64_t height, int64_t width);

// torchvision's CenterCrop placement: top = int(round((H - h) / 2)) with
// Python's round (half to even), likewise left; a crop larger than the image
// is centred on a zero-padded image (pad (h-H)//2 on top, the rest below).
CropBox center_crop_box(int64_t img_height, int64_t img_width, int64_t height, int64_t width);
Image center_crop(const Image& img, int64_t height, int64_t width);
// Any box; zero outside the image (see CropBox).
Image crop(const Image& img, const CropBox& box);
// Crop of (height,width) at (top,left) of the image zero-padded by `padding`
// on every side; the crop must lie inside the padded image.
Image crop_padded(const Image& img, int64_t top, int64_t left, int64_t height, int64_t width, int64_t padding);
Image hflip(const Image& img);

}  // namespace qat::data
