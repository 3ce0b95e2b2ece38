#include "data/image_folder.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace fs = std::filesystem;

namespace qat::data {

namespace {

std::string lower(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

bool hidden(const fs::path& p) { return !p.filename().empty() && p.filename().string()[0] == '.'; }

// Entries of `dir` (names only), sorted; `want_dirs` picks folders (links
// followed; a link to nothing is refused), else every entry whatever its type: an image name that is a
// dangling link, a folder or a device is kept, and decode_image() refuses it
// by name (data.on_bad_image decides), rather than the image vanishing.
std::vector<std::string> sorted_entries(const fs::path& dir, bool want_dirs) {
  std::vector<std::string> out;
  std::error_code ec;
  fs::directory_iterator it(dir, fs::directory_options::follow_directory_symlink, ec);
  QAT_CHECK(!ec, "ImageFolder: cannot list '", dir.string(), "': ", ec.message());
  for (const auto& e : it) {
    if (hidden(e.path())) continue;
    std::error_code sec;
    if (!want_dirs || e.is_directory(sec)) {
      out.push_back(e.path().filename().string());
    } else if (e.is_symlink(sec)) {
      // A link that leads nowhere may have been a class folder: skipping it
      // would renumber every class after it, so it is refused by name.
      std::error_code xec;
      const bool followed = fs::exists(e.path(), xec);
      const std::string why = !xec ? "its target does not exist"
                              : xec == std::errc::too_many_symbolic_link_levels ? "a link loop"
                                                                               : xec.message();
      QAT_CHECK(followed, "ImageFolder: '", e.path().string(), "' under root '", dir.string(),
                "' is a link that cannot be followed (", why, "); it may be a class folder: mend or remove it");
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Class names go into checkpoints and metrics as JSON: nlohmann::json refuses
// to write text that is not UTF-8, which failed only after an epoch had
// trained. The same library's check, before any work.
bool is_utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

// C0 controls, DEL, and C1 controls (U+0080..U+009F: 0xC2 0x80..0x9F in UTF-8).
bool has_control(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F) return true;
    if (c == 0xC2 && i + 1 < s.size() && (static_cast<unsigned char>(s[i + 1]) & 0xE0) == 0x80) return true;
  }
  return false;
}

// Printable ASCII as is, every other byte as \xHH (bash's $'...' reads it back).
std::string escaped(const std::string& s) {
  std::string out;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7F) {
      out += ch;
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

void check_class_name(const std::string& name, const std::string& root, const std::string& key) {
  const bool utf8 = is_utf8(name);
  QAT_CHECK(utf8 && !has_control(name), key.empty() ? "" : key + ": ", "ImageFolder: class folder '", escaped(name),
            "' under root '", root, "' ", utf8 ? "holds control characters" : "is not valid UTF-8",
            ": class names are recorded in checkpoints (JSON text) and printed in logs, so they must be UTF-8 "
            "without control characters; rename the folder");
}

}  // namespace

bool has_image_extension(const std::string& name) {
  const std::string ext = lower(fs::path(name).extension().string());
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

ImageFolder::ImageFolder(const std::string& root, bool skip_bad_images, const DecodeLimits& limits,
                         const std::string& key)
    : root_(root), skip_bad_(skip_bad_images), limits_(limits) {
  std::error_code ec;
  QAT_CHECK(fs::exists(root, ec), "ImageFolder: root '", root, "' does not exist");
  QAT_CHECK(fs::is_directory(root, ec), "ImageFolder: root '", root, "' is not a folder");
  classes_ = sorted_entries(root, /*want_dirs=*/true);
  QAT_CHECK(!classes_.empty(), "ImageFolder: root '", root, "' has no class folders (expected root/<class>/<image>)");
  for (const auto& name : classes_) check_class_name(name, root, key);
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
