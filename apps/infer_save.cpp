#include "apps/infer_save.h"

#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/text_file.h"

namespace fs = std::filesystem;

namespace qat::apps {

namespace {

const char* const kSuffixes[3] = {".inputs.f32", ".logits.f32", ".paths.txt"};

// Whether the three files are an earlier --save's: n paths, one a line, and
// float files of whole 4-byte rows for each of the n images.
bool earlier_set(const std::vector<std::string>& files) {
  std::error_code ec;
  for (const std::string& f : files)
    if (!fs::is_regular_file(f, ec) || fs::is_symlink(f, ec)) return false;
  std::ifstream in(files[2]);
  uintmax_t images = 0;
  for (std::string line; std::getline(in, line);) images += !line.empty();
  if (images == 0) return false;
  for (size_t i = 0; i < 2; ++i) {
    const uintmax_t bytes = fs::file_size(files[i], ec);
    if (ec || bytes == 0 || bytes % (4 * images) != 0) return false;
  }
  return true;
}

}  // namespace

InferSaveSet::InferSaveSet(const std::string& prefix) : prefix_(prefix) {
  QAT_CHECK(!prefix.empty() && prefix.back() != '/' && !fs::is_directory(prefix),
            "infer: --save takes a file prefix (it writes PREFIX.inputs.f32, PREFIX.logits.f32, PREFIX.paths.txt), "
            "got the folder ", prefix, "; give e.g. ", (fs::path(prefix) / "infer").string());
  std::error_code ec;
  std::string existing;  // the first of the three that exists
  for (const char* s : kSuffixes) {
    targets_.push_back(prefix + s);
    if (existing.empty() && fs::exists(fs::symlink_status(targets_.back(), ec))) existing = targets_.back();
  }
  QAT_CHECK(existing.empty() || earlier_set(targets_), "infer: --save ", prefix, " would replace ", existing,
            ", which is not part of an earlier --save's three files (", prefix, ".inputs.f32, .logits.f32, "
            ".paths.txt, all three, whole rows an image); nothing was written: choose another prefix, or move it away");
  for (const std::string& t : targets_) temps_.push_back(temporary_for(t));
  inputs_.open(temps_[0], std::ios::binary | std::ios::trunc);
  logits_.open(temps_[1], std::ios::binary | std::ios::trunc);
  paths_.open(temps_[2], std::ios::trunc);
  QAT_CHECK(inputs_ && logits_ && paths_, "infer: cannot write ", prefix, ".inputs.f32 / .logits.f32 / .paths.txt");
}

InferSaveSet::~InferSaveSet() {
  if (finished_) return;
  inputs_.close(), logits_.close(), paths_.close();
  for (const std::string& t : temps_) std::remove(t.c_str());
}

void InferSaveSet::add(const std::string& path, const float* input, int64_t input_count, const float* logits,
                       int64_t logit_count) {
  QAT_CHECK(path.find('\n') == std::string::npos, "infer: --save ", prefix_, ": the image path '", path,
            "' holds a line break, which ", prefix_, ".paths.txt (one path a line) cannot hold; rename it");
  ++images_;
  inputs_.write(reinterpret_cast<const char*>(input), static_cast<std::streamsize>(input_count * 4));
  logits_.write(reinterpret_cast<const char*>(logits), static_cast<std::streamsize>(logit_count * 4));
  paths_ << path << "\n";
}

void InferSaveSet::finish() {
  QAT_CHECK(images_ > 0, "infer: --save ", prefix_, ": no image was classified; nothing written");
  inputs_.close(), logits_.close(), paths_.close();
  QAT_CHECK(!inputs_.fail() && !logits_.fail() && !paths_.fail(), "infer: writing ", prefix_, ".* failed (disk full?)");
  for (size_t i = 0; i < targets_.size(); ++i) {
    std::error_code ec;
    fs::rename(temps_[i], targets_[i], ec);
    QAT_CHECK(!ec, "infer: cannot rename ", temps_[i], " to ", targets_[i], ": ", ec.message());
    sync_parent_folder(targets_[i]);
  }
  finished_ = true;
}

}  // namespace qat::apps
