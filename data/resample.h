#pragma once
// Bilinear resampling with antialias, bit-exact with Pillow's
// Image.resize(size, Image.BILINEAR) on 8-bit RGB as Pillow 3.3 to 12.x
// compute it (Resample.c; Pillow 13 may run the vertical pass first, which
// moves some mixed shrink/enlarge results by one level):
// a separable triangle filter whose support widens by the scale factor when
// shrinking, coefficients normalised per output pixel and rounded to 22-bit
// fixed point, horizontal pass first (rounded to uint8), then vertical.
// torchvision's Resize/RandomResizedCrop on PIL images use exactly this.
//
// Why not stb_image_resize: version 1 (Debian's libstb) aborts on an
// assertion for some legitimate sizes (e.g. 2000 -> 1304, stb issue #1449),
// which would kill a training run on one odd image.
#include <cstdint>

#include "data/image.h"

namespace qat::data {

// Precondition (checked by the callers in image.cpp): a valid non-empty image
// and a positive target size.
Image resample_bilinear(const Image& img, int64_t height, int64_t width);

}  // namespace qat::data
