#pragma once
// ImageFolder: the torchvision layout root/<class>/<image>. Classes are the
// sub-folders of root sorted by name (byte order), label = index in that
// order; images are the entries directly inside each class folder whose
// extension is jpg, jpeg or png (any case), sorted by file name, so the sample
// order never depends on the file system. Hidden entries (".name") are
// ignored; sub-folders of a class folder are not searched. An entry named like
// an image that is not a readable regular file (a dangling link, a link loop,
// a folder, a device) is listed all the same, and load() refuses it by name
// like a corrupt file: an image never disappears without a word.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/image.h"

namespace qat::data {

class ImageFolder {
 public:
  // Throws qat::Error naming `root` when it is missing, not a folder, has no
  // class folders, a class folder holds no image, or a class folder's name is
  // not UTF-8 or holds control characters (named with its bytes escaped,
  // \xff; class names are written into checkpoints as JSON).
  // skip_bad_images: load() returns std::nullopt for a file that does not
  // decode instead of throwing (the DataLoader drops and counts it).
  // limits: what a file may declare before it is decoded (image.h).
  // key: the config key naming `root` ("data.train"), prefixed to the errors
  // about its class folders; empty outside a config.
  explicit ImageFolder(const std::string& root, bool skip_bad_images = false, const DecodeLimits& limits = {},
                       const std::string& key = "");

  int64_t size() const { return static_cast<int64_t>(paths_.size()); }
  const std::string& root() const { return root_; }
  const std::vector<std::string>& classes() const { return classes_; }
  int64_t num_classes() const { return static_cast<int64_t>(classes_.size()); }
  bool skip_bad_images() const { return skip_bad_; }
  const std::string& path(int64_t i) const;  // full path of sample i
  int32_t label(int64_t i) const;
  // Sample indices of one class, ascending.
  std::vector<int64_t> indices_of(int32_t label) const;

  // Decodes sample i to RGB. A corrupt/unreadable file throws qat::Error naming
  // the file, or, with skip_bad_images, returns std::nullopt.
  std::optional<Image> load(int64_t i) const;

 private:
  void check_index(int64_t i) const;
  std::string root_;
  bool skip_bad_ = false;
  DecodeLimits limits_;
  std::vector<std::string> classes_;
  std::vector<std::string> paths_;
  std::vector<int32_t> labels_;
};

// True when `name` ends in .jpg/.jpeg/.png, any case.
bool has_image_extension(const std::string& name);

}  // namespace qat::data
