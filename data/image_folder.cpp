#include "data/image_folder.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "core/error.h"

namespace fs = std::filesystem;

namespace qat::data {

namespace {

std::string lower(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

bool hidden(const fs::path& p) { return !p.filename().empty() && p.filename().string()[0] == '.'; }

// Entries of `dir` (names only), sorted; `want_dirs` picks folders, else
// regular files (symlinks followed).
std::vector<std::string> sorted_entries(const fs::path& dir, bool want_dirs) {
  std::vector<std::string> out;
  std::error_code ec;
  fs::directory_iterator it(dir, fs::directory_options::follow_directory_symlink, ec);
  QAT_CHECK(!ec, "ImageFolder: cannot list '", dir.string(), "': ", ec.message());
  for (const auto& e : it) {
    if (hidden(e.path())) continue;
    std::error_code sec;
    const bool is_dir = e.is_directory(sec);
    if (want_dirs ? is_dir : (!is_dir && e.is_regular_file(sec))) out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

bool has_image_extension(const std::string& name) {
  const std::string ext = lower(fs::path(name).extension().string());
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

ImageFolder::ImageFolder(const std::string& root, bool skip_bad_images, const DecodeLimits& limits)
    : root_(root), skip_bad_(skip_bad_images), limits_(limits) {
  std::error_code ec;
  QAT_CHECK(fs::exists(root, ec), "ImageFolder: root '", root, "' does not exist");
  QAT_CHECK(fs::is_directory(root, ec), "ImageFolder: root '", root, "' is not a folder");
  classes_ = sorted_entries(root, /*want_dirs=*/true);
  QAT_CHECK(!classes_.empty(), "ImageFolder: root '", root, "' has no class folders (expected root/<class>/<image>)");
  for (size_t c = 0; c < classes_.size(); ++c) {
    const fs::path dir = fs::path(root) / classes_[c];
    size_t found = 0;
    for (const auto& name : sorted_entries(dir, /*want_dirs=*/false)) {
      if (!has_image_extension(name)) continue;
      paths_.push_back((dir / name).string());
      labels_.push_back(static_cast<int32_t>(c));
      ++found;
    }
    QAT_CHECK(found > 0, "ImageFolder: class folder '", dir.string(), "' under root '", root,
              "' holds no .jpg/.jpeg/.png image");
  }
}

void ImageFolder::check_index(int64_t i) const {
  QAT_CHECK(i >= 0 && i < size(), "ImageFolder: sample index ", i, " out of range [0, ", size(), ") for root '", root_,
            "'");
}

const std::string& ImageFolder::path(int64_t i) const {
  check_index(i);
  return paths_[static_cast<size_t>(i)];
}

int32_t ImageFolder::label(int64_t i) const {
  check_index(i);
  return labels_[static_cast<size_t>(i)];
}

std::vector<int64_t> ImageFolder::indices_of(int32_t label) const {
  QAT_CHECK(label >= 0 && label < num_classes(), "ImageFolder: label ", label, " out of range [0, ", num_classes(),
            ")");
  std::vector<int64_t> out;
  for (int64_t i = 0; i < size(); ++i)
    if (labels_[static_cast<size_t>(i)] == label) out.push_back(i);
  return out;
}

std::optional<Image> ImageFolder::load(int64_t i) const {
  const std::string& p = path(i);
  if (!skip_bad_) return decode_image(p, limits_);
  try {
    return decode_image(p, limits_);
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace qat::data
