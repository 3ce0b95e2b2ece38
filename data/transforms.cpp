// Note [transform split]: decoding and the shorter-side resize are the
// expensive, deterministic steps; they run once per image when the loader's
// cache is on (the cache holds their uint8 output, never floats). Everything
// random (crop position, flip) runs every epoch on the prepared image, with a
// Generator seeded per sample, and is fused into a single pass that writes the
// normalised float sample straight into its batch slot.
#include "data/transforms.h"

#include <cmath>

#include "core/error.h"

namespace qat::data {

namespace {
int64_t round_half_even(double v) { return static_cast<int64_t>(std::nearbyint(v)); }
}  // namespace

void validate(const TransformSpec& s) {
  QAT_CHECK(s.image_size > 0 && s.image_size <= kMaxImageSide, "TransformSpec: image_size must be in [1, ",
            kMaxImageSide, "], got ", s.image_size);
  QAT_CHECK(s.resize <= kMaxImageSide, "TransformSpec: resize must be at most ", kMaxImageSide, ", got ", s.resize);
  QAT_CHECK(s.padding >= 0 && s.padding <= kMaxImageSide, "TransformSpec: padding must be in [0, ", kMaxImageSide,
            "], got ", s.padding);
  QAT_CHECK(s.scale[0] > 0 && s.scale[0] <= s.scale[1], "TransformSpec: scale must satisfy 0 < min <= max, got [",
            s.scale[0], ", ", s.scale[1], "]");
  QAT_CHECK(s.ratio[0] > 0 && s.ratio[0] <= s.ratio[1], "TransformSpec: ratio must satisfy 0 < min <= max, got [",
            s.ratio[0], ", ", s.ratio[1], "]");
  for (int c = 0; c < 3; ++c)
    QAT_CHECK(s.std[c] > 0 && std::isfinite(s.std[c]) && std::isfinite(s.mean[c]),
              "TransformSpec: std must be > 0 and mean/std finite, got mean[", c, "]=", s.mean[c], ", std[", c,
              "]=", s.std[c]);
}

Image prepare_image(const Image& decoded, const TransformSpec& spec) {
  if (spec.resize <= 0) return decoded;
  return resize_shorter(decoded, spec.resize);
}

CropBox random_resized_crop_box(int64_t height, int64_t width, const std::array<double, 2>& scale,
                                const std::array<double, 2>& ratio, Generator& gen) {
  QAT_CHECK(height > 0 && width > 0, "random_resized_crop: empty image ", height, "x", width);
  const double area = static_cast<double>(height) * static_cast<double>(width);
  const double log_r0 = std::log(ratio[0]), log_r1 = std::log(ratio[1]);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * gen.uniform(static_cast<float>(scale[0]), static_cast<float>(scale[1]));
    const double aspect = std::exp(gen.uniform(static_cast<float>(log_r0), static_cast<float>(log_r1)));
    const int64_t w = round_half_even(std::sqrt(target_area * aspect));
    const int64_t h = round_half_even(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int64_t top = static_cast<int64_t>(gen.below(static_cast<uint64_t>(height - h + 1)));
      const int64_t left = static_cast<int64_t>(gen.below(static_cast<uint64_t>(width - w + 1)));
      return {top, left, h, w};
    }
  }
  // Fallback to a centre crop.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < ratio[0]) {
    h = round_half_even(static_cast<double>(w) / ratio[0]);
  } else if (in_ratio > ratio[1]) {
    w = round_half_even(static_cast<double>(h) * ratio[1]);
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

void write_normalized(const Image& img, const CropBox& box, bool flip, const TransformSpec& spec, float* out_chw) {
  // One lookup table per channel: exactly the float32 arithmetic of
  // torchvision's ToTensor (x / 255) then Normalize ((x - mean) / std).
  float lut[3][256];
  for (int c = 0; c < 3; ++c)
    for (int v = 0; v < 256; ++v) lut[c][v] = (static_cast<float>(v) / 255.0f - spec.mean[c]) / spec.std[c];
  const int64_t H = box.height, W = box.width, plane = H * W;
  for (int64_t y = 0; y < H; ++y) {
    const int64_t sy = box.top + y;
    const bool row_in = sy >= 0 && sy < img.height;
    for (int64_t x = 0; x < W; ++x) {
      const int64_t sx = box.left + (flip ? W - 1 - x : x);
      const int64_t o = y * W + x;
      if (row_in && sx >= 0 && sx < img.width) {
        const uint8_t* p = &img.rgb[static_cast<size_t>((sy * img.width + sx) * 3)];
        for (int c = 0; c < 3; ++c) out_chw[c * plane + o] = lut[c][p[c]];
      } else {
        for (int c = 0; c < 3; ++c) out_chw[c * plane + o] = lut[c][0];
      }
    }
  }
}

void transform_prepared(const Image& img, const TransformSpec& spec, bool train, Generator& gen, float* out_chw) {
  QAT_CHECK(img.height > 0 && img.width > 0, "transform: empty image");
  const int64_t S = spec.image_size;
  if (!train) {
    write_normalized(img, center_crop_box(img.height, img.width, S, S), false, spec, out_chw);
    return;
  }
  if (spec.random_resized_crop) {
    const CropBox box = random_resized_crop_box(img.height, img.width, spec.scale, spec.ratio, gen);
    const Image resized = resize_exact(crop(img, box), S, S);
    const bool flip = spec.hflip && gen.bernoulli(0.5f);
    write_normalized(resized, {0, 0, S, S}, flip, spec, out_chw);
    return;
  }
  CropBox box;
  if (spec.random_crop) {
    const int64_t ph = img.height + 2 * spec.padding, pw = img.width + 2 * spec.padding;
    QAT_CHECK(ph >= S && pw >= S, "transform: random crop of ", S, "x", S, " does not fit the ", img.height, "x",
              img.width, " image padded by ", spec.padding, " (", ph, "x", pw, "); raise resize or padding");
    const int64_t top = static_cast<int64_t>(gen.below(static_cast<uint64_t>(ph - S + 1)));
    const int64_t left = static_cast<int64_t>(gen.below(static_cast<uint64_t>(pw - S + 1)));
    box = {top - spec.padding, left - spec.padding, S, S};
  } else {
    box = center_crop_box(img.height, img.width, S, S);
  }
  const bool flip = spec.hflip && gen.bernoulli(0.5f);
  write_normalized(img, box, flip, spec, out_chw);
}

void apply_transform(const Image& decoded, const TransformSpec& spec, bool train, Generator& gen, float* out_chw) {
  transform_prepared(prepare_image(decoded, spec), spec, train, gen, out_chw);
}

}  // namespace qat::data
