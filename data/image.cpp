// Image decoding and encoding on top of Debian's libstb (the implementations
// are compiled into libstb; no *_IMPLEMENTATION here), resizing (resample.cpp)
// and cropping.
#include "data/image.h"

#include <stb_image.h>
#include <stb_image_write.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "core/error.h"
#include "core/text_file.h"
#include "data/resample.h"

namespace qat::data {

namespace {

Image make_image(int64_t height, int64_t width) {
  Image img;
  img.height = height;
  img.width = width;
  img.rgb.resize(static_cast<size_t>(height * width * 3));
  return img;
}

void check_image(const Image& img, const char* op) {
  QAT_CHECK(img.height > 0 && img.width > 0, op, ": empty image (", img.height, "x", img.width, ")");
  QAT_CHECK(static_cast<int64_t>(img.rgb.size()) == img.height * img.width * 3, op, ": image of ", img.height, "x",
            img.width, " holds ", img.rgb.size(), " bytes, expected ", img.height * img.width * 3);
  QAT_CHECK(img.height <= INT_MAX && img.width <= INT_MAX, op, ": image too large (", img.height, "x", img.width, ")");
}

// Python's round(): nearest, ties to even (the default FE_TONEAREST mode).
int64_t round_half_even(double v) { return static_cast<int64_t>(std::nearbyint(v)); }

// Offset of a centred crop of `crop` in `size` along one axis (torchvision).
int64_t center_offset(int64_t size, int64_t crop) {
  if (crop > size) return -((crop - size) / 2);
  return round_half_even(static_cast<double>(size - crop) / 2.0);
}

}  // namespace

namespace {
void check_limits(const std::string& path, int64_t h, int64_t w, const DecodeLimits& limits) {
  QAT_CHECK(h * w <= limits.max_pixels, "decode_image: '", path, "' declares ", w, "x", h, " = ", h * w,
            " pixels, more than the limit of ", limits.max_pixels, " (data.max_image_pixels)");
  const double aspect = static_cast<double>(std::max(h, w)) / static_cast<double>(std::max<int64_t>(1, std::min(h, w)));
  QAT_CHECK(aspect <= limits.max_aspect, "decode_image: '", path, "' is ", w, "x", h, ", an aspect ratio of ", aspect,
            ", more than the limit of ", limits.max_aspect, " (data.max_aspect_ratio)");
}

// What a file's first bytes declare, for error messages: stb_image tries
// every format in turn, so a truncated JPEG whose header it cannot read
// fails with the last format's reason ("bad png sig").
struct Declared {
  std::string format = "an image";  // "JPEG", "PNG" or "an image"
  int64_t png_width = 0, png_height = 0;  // from a PNG's IHDR, 0 when absent
};

Declared declared(const std::string& path) {
  unsigned char head[24] = {};
  std::ifstream f(path, std::ios::binary);
  f.read(reinterpret_cast<char*>(head), sizeof head);
  const int64_t n = f.gcount();
  Declared d;
  if (n >= 2 && head[0] == 0xFF && head[1] == 0xD8) d.format = "JPEG";
  if (n >= 4 && head[0] == 0x89 && head[1] == 'P' && head[2] == 'N' && head[3] == 'G') {
    d.format = "PNG";
    auto be32 = [&](int at) {
      return int64_t{head[at]} << 24 | int64_t{head[at + 1]} << 16 | int64_t{head[at + 2]} << 8 | head[at + 3];
    };
    if (n == 24 && std::memcmp(head + 12, "IHDR", 4) == 0) d.png_width = be32(16), d.png_height = be32(20);
  }
  return d;
}
}  // namespace

namespace {
namespace fs = std::filesystem;

// What a path that is not a regular file is, for a message ("a folder").
std::string kind_of(fs::file_type t) {
  switch (t) {
    case fs::file_type::directory: return "a folder";
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    case fs::file_type::fifo: return "a named pipe";
    case fs::file_type::socket: return "a socket";
    default: return "not a regular file";
  }
}

// Why `path` is not a readable regular file (links followed), or "" when it
// is one. ImageFolder lists every entry named like an image, so a dangling
// link, a link loop, a folder or a device named x.jpg ends here: refused by
// name instead of dropped (a pipe would also block stbi_load forever).
std::string unreadable_reason(const std::string& path) {
  std::error_code ec;
  const fs::file_status own = fs::symlink_status(path, ec);
  if (own.type() == fs::file_type::not_found) return "does not exist";
  const bool link = own.type() == fs::file_type::symlink;
  const std::string target = link ? fs::read_symlink(path, ec).string() : "";
  ec.clear();
  const fs::file_status st = fs::status(path, ec);
  if (link && ec.value() == ELOOP) return "is a symbolic link loop (too many levels of links from '" + target + "')";
  if (link && st.type() == fs::file_type::not_found)
    return "is a dangling symbolic link (its target '" + target + "' does not exist)";
  if (ec) return "cannot be examined: " + ec.message();
  const std::string via = link ? " (through the link to '" + target + "')" : "";
  if (st.type() != fs::file_type::regular) return "is " + kind_of(st.type()) + via + ", not an image file";
  if (::access(path.c_str(), R_OK) != 0) return "cannot be read" + via + ": " + std::strerror(errno);
  return "";
}
}  // namespace

Image decode_image(const std::string& path, const DecodeLimits& limits) {
  const std::string unreadable = unreadable_reason(path);
  QAT_CHECK(unreadable.empty(), "decode_image: '", path, "' ", unreadable);
  int w = 0, h = 0, channels_in_file = 0;
  // The header alone first: refuse a pixel bomb before decoding it (a PNG's
  // declared size too where stb_image refuses the header itself). The file's
  // own bytes are read again only when stb_image fails: not for every image
  // of every epoch.
  if (stbi_info(path.c_str(), &w, &h, &channels_in_file) == 1) {
    check_limits(path, h, w, limits);
  } else if (const Declared d = declared(path); d.png_width > 0 && d.png_height > 0) {
    check_limits(path, d.png_height, d.png_width, limits);
  }
  std::unique_ptr<unsigned char, void (*)(void*)> pixels(stbi_load(path.c_str(), &w, &h, &channels_in_file, 3),
                                                         stbi_image_free);
  if (!pixels) {
    const char* why = stbi_failure_reason();
    std::error_code ec;
    QAT_CHECK(std::filesystem::file_size(path, ec) > 0 || ec, "decode_image: '", path, "' is empty (0 bytes)");
    const Declared d = declared(path);
    // stb_image tries each format in turn: after a broken JPEG its reason is
    // often another format's ("bad png sig"), which says nothing of this file.
    const std::string reason = why ? why : "unknown reason";
    const bool other_format = reason.find("sig") != std::string::npos || reason.rfind("not ", 0) == 0 ||
                              reason == "unknown image type";
    QAT_FAIL("decode_image: cannot decode '", path, "' as ", d.format,
             d.format == "an image" ? " (not a format stb_image reads: JPEG, PNG, BMP, GIF, TGA, PSD, HDR, PNM?)"
                                    : ": the file is truncated or corrupt",
             d.format != "an image" && other_format ? std::string() : "; stb_image: " + reason);
  }
  QAT_CHECK(w > 0 && h > 0, "decode_image: '", path, "' has no pixels (", h, "x", w, ")");
  check_limits(path, h, w, limits);
  Image img = make_image(h, w);
  std::memcpy(img.rgb.data(), pixels.get(), img.rgb.size());
  return img;
}

namespace {
// The encoded file, filled by stb_image_write's callback. stbi_write_jpg()
// and stbi_write_png() to a path ignore fwrite's errors (a full disk gave
// empty JPEGs and success), so the bytes are encoded in memory and written by
// write_text_file_atomic, which checks every step.
struct Encoded {
  std::string bytes;
  bool out_of_memory = false;
};

// A C callback: nothing may throw through stb's frames.
void append_encoded(void* context, void* data, int size) {
  auto* e = static_cast<Encoded*>(context);
  try {
    e->bytes.append(static_cast<const char*>(data), static_cast<size_t>(size));
  } catch (...) {
    e->out_of_memory = true;
  }
}

void write_encoded(const char* op, const std::string& path, int ok, const Encoded& e) {
  QAT_CHECK(ok != 0 && !e.out_of_memory, op, ": cannot encode '", path, "'",
            e.out_of_memory ? " (out of memory)" : "");
  try {
    write_text_file_atomic(path, e.bytes);
  } catch (const Error& err) {
    QAT_FAIL(op, ": ", err.what());
  }
}
}  // namespace

void write_jpeg(const std::string& path, const Image& img, int quality) {
  check_image(img, "write_jpeg");
  QAT_CHECK(quality >= 1 && quality <= 100, "write_jpeg: quality must be in [1, 100], got ", quality);
  Encoded e;
  const int ok = stbi_write_jpg_to_func(append_encoded, &e, static_cast<int>(img.width), static_cast<int>(img.height),
                                        3, img.rgb.data(), quality);
  write_encoded("write_jpeg", path, ok, e);
}

void write_png(const std::string& path, const Image& img) {
  check_image(img, "write_png");
  Encoded e;
  const int ok = stbi_write_png_to_func(append_encoded, &e, static_cast<int>(img.width),
                                        static_cast<int>(img.height), 3, img.rgb.data(),
                                        static_cast<int>(img.width * 3));
  write_encoded("write_png", path, ok, e);
}

Image resize_exact(const Image& img, int64_t height, int64_t width) {
  check_image(img, "resize_exact");
  QAT_CHECK(height > 0 && width > 0 && height <= INT_MAX && width <= INT_MAX,
            "resize_exact: target size must be positive, got ", height, "x", width);
  return resample_bilinear(img, height, width);
}

Image resize_shorter(const Image& img, int64_t size) {
  check_image(img, "resize_shorter");
  QAT_CHECK(size > 0, "resize_shorter: size must be positive, got ", size);
  if (img.height <= img.width) return resize_exact(img, size, size * img.width / img.height);
  return resize_exact(img, size * img.height / img.width, size);
}

CropBox center_crop_box(int64_t img_height, int64_t img_width, int64_t height, int64_t width) {
  QAT_CHECK(height > 0 && width > 0, "center_crop: crop size must be positive, got ", height, "x", width);
  return {center_offset(img_height, height), center_offset(img_width, width), height, width};
}

Image crop(const Image& img, const CropBox& box) {
  check_image(img, "crop");
  QAT_CHECK(box.height > 0 && box.width > 0, "crop: box size must be positive, got ", box.height, "x", box.width);
  Image out = make_image(box.height, box.width);  // zero-filled
  const int64_t x0 = std::max<int64_t>(box.left, 0), x1 = std::min(box.left + box.width, img.width);
  if (x1 <= x0) return out;
  for (int64_t y = 0; y < box.height; ++y) {
    const int64_t sy = box.top + y;
    if (sy < 0 || sy >= img.height) continue;
    std::memcpy(&out.rgb[static_cast<size_t>((y * box.width + (x0 - box.left)) * 3)],
                &img.rgb[static_cast<size_t>((sy * img.width + x0) * 3)], static_cast<size_t>((x1 - x0) * 3));
  }
  return out;
}

Image center_crop(const Image& img, int64_t height, int64_t width) {
  check_image(img, "center_crop");
  return crop(img, center_crop_box(img.height, img.width, height, width));
}

Image crop_padded(const Image& img, int64_t top, int64_t left, int64_t height, int64_t width, int64_t padding) {
  check_image(img, "crop_padded");
  QAT_CHECK(padding >= 0, "crop_padded: padding must be >= 0, got ", padding);
  const int64_t ph = img.height + 2 * padding, pw = img.width + 2 * padding;
  QAT_CHECK(height > 0 && width > 0 && top >= 0 && left >= 0 && top + height <= ph && left + width <= pw,
            "crop_padded: crop ", height, "x", width, " at (", top, ",", left, ") does not fit the ", img.height, "x",
            img.width, " image padded by ", padding, " (", ph, "x", pw, ")");
  return crop(img, {top - padding, left - padding, height, width});
}

Image hflip(const Image& img) {
  check_image(img, "hflip");
  Image out = make_image(img.height, img.width);
  for (int64_t y = 0; y < img.height; ++y) {
    const uint8_t* src = &img.rgb[static_cast<size_t>(y * img.width * 3)];
    uint8_t* dst = &out.rgb[static_cast<size_t>(y * img.width * 3)];
    for (int64_t x = 0; x < img.width; ++x)
      for (int c = 0; c < 3; ++c) dst[x * 3 + c] = src[(img.width - 1 - x) * 3 + c];
  }
  return out;
}

}  // namespace qat::data
