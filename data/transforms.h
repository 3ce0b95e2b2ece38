#pragma once
// Transforms from a decoded image to a normalised float CHW sample, split in
// two (Note [transform split]):
//   prepare_image:      decode output -> resize shorter side to spec.resize.
//                       Deterministic, so its uint8 result may be cached.
//   transform_prepared: the per-epoch part. train: random-resized-crop, or
//                       (padded) random crop, or centre crop; then horizontal
//                       flip with p = 0.5. eval: centre crop. Then
//                       (pixel/255 - mean)/std into a (3, S, S) slot.
// All randomness comes from the Generator passed in; the draws happen in the
// order torchvision's Compose would make them (crop, then flip).
#include <array>
#include <cstdint>

#include "core/generator.h"
#include "data/image.h"

namespace qat::data {

struct TransformSpec {
  int64_t image_size = 128;  // S: side of the square crop fed to the network
  int64_t resize = 144;      // shorter side after decoding; <= 0: keep the decoded size
  bool random_crop = true;   // train: random S crop of the (padded) resized image; else centre crop
  int64_t padding = 0;       // zero padding on every side before the random crop
  bool random_resized_crop = false;  // train: torchvision RandomResizedCrop(S) of the resized image instead
  std::array<double, 2> scale = {0.08, 1.0};             // RandomResizedCrop area fraction range
  std::array<double, 2> ratio = {3.0 / 4.0, 4.0 / 3.0};  // RandomResizedCrop aspect (w/h) range
  bool hflip = true;                                     // train: horizontal flip with p = 0.5
  std::array<float, 3> mean = {0.485f, 0.456f, 0.406f};
  std::array<float, 3> std = {0.229f, 0.224f, 0.225f};
};

// Throws qat::Error naming the field of a spec that makes no sense
// (image_size <= 0, negative padding, std <= 0, empty/reversed scale or ratio).
void validate(const TransformSpec& spec);

// The largest image side the pipeline accepts (crop, resize, padding):
// 3 * side^2 floats must stay far from any size limit.
constexpr int64_t kMaxImageSide = int64_t{1} << 14;

// Floats in one sample: 3 * image_size * image_size.
inline int64_t sample_numel(const TransformSpec& spec) { return 3 * spec.image_size * spec.image_size; }

// The deterministic, cacheable part: resize_shorter(decoded, spec.resize), or a
// copy when spec.resize <= 0.
Image prepare_image(const Image& decoded, const TransformSpec& spec);

// The per-epoch part on a prepared image; writes sample_numel(spec) floats.
// Throws when a random crop does not fit the padded image.
void transform_prepared(const Image& prepared, const TransformSpec& spec, bool train, Generator& gen,
                        float* out_chw);

// Both parts.
void apply_transform(const Image& decoded, const TransformSpec& spec, bool train, Generator& gen, float* out_chw);

// torchvision RandomResizedCrop.get_params on an (height, width) image: up to
// 10 tries of area ~ U(scale) * H * W and log-aspect ~ U(log ratio) with
// w = round(sqrt(area * r)), h = round(sqrt(area / r)) (half to even), accepted
// when 0 < w <= W and 0 < h <= H, placed uniformly; else the fallback centre
// crop ((H - h)/2, (W - w)/2 floored) of the whole image clamped to the
// ratio range.
CropBox random_resized_crop_box(int64_t height, int64_t width, const std::array<double, 2>& scale,
                                const std::array<double, 2>& ratio, Generator& gen);

// The (pixel/255 - mean)/std, CHW write of `box` of `img` (zero outside the
// image, mirrored left-right when `flip`): the last step of every path.
void write_normalized(const Image& img, const CropBox& box, bool flip, const TransformSpec& spec, float* out_chw);

}  // namespace qat::data
