#pragma once
// make_subset: a smaller, lower-resolution copy of an ImageFolder dataset with
// train/ and val/ splits (src/train/<class>/..., src/val/<class>/...).
#include <cstdint>
#include <string>

namespace qat::data {

// What make_subset wrote: its classes, and its images in each split.
struct SubsetSummary {
  int64_t classes = 0, train_images = 0, val_images = 0;
};

// For every class, picks `per_class` train and `val_per_class` val images at
// random (a Generator seeded from (seed, split, class index), so the choice
// depends only on the seed and the source listing), resizes each so its
// shorter side is `size` (aspect kept, no crop: the training transforms crop
// later), and writes it as JPEG quality 90 to out/train/<class>/<stem>.jpg and
// out/val/<class>/<stem>.jpg. Decoding and encoding run on `threads` threads
// (<= 0: all cores); the output does not depend on it.
// Errors: src/train or src/val missing or not ImageFolders, differing class
// lists, a class with fewer images than asked, a non-empty `out_root`, a
// corrupt or unreadable source image (named, with why: a dangling link, a
// folder...), a write that fails (a full disk: the file named). Whatever
// fails, `out_root` is left as it was (all is written into a staging folder
// inside it first).
SubsetSummary make_subset(const std::string& src_root, const std::string& out_root, int64_t per_class,
                          int64_t val_per_class, int64_t size, uint64_t seed, int threads = 0);

}  // namespace qat::data
