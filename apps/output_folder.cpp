#include "apps/output_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>

#include "apps/file_digest.h"
#include "core/error.h"
#include "core/text_file.h"

namespace fs = std::filesystem;

namespace qat::apps {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string own_list(const std::vector<std::string>& own) {
  std::string s;
  for (const auto& n : own) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// The same folder: what was locked is what the path names now (another
// command may have exchanged it between our open and our lock).
bool same_inode(int fd, const std::string& path) {
  struct stat a {}, b {};
  return ::fstat(fd, &a) == 0 && ::stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// The record of what a command wrote into its folder (Note [output
// folder]): a first line naming the command, then one line a file,
// "<sha256> <bytes> <name>".
constexpr const char* kRecord = ".qat-output";
constexpr const char* kRecordHead = "qat output folder of ";

struct FileStamp {
  std::string sha256;
  uintmax_t bytes = 0;
  bool operator==(const FileStamp&) const = default;
};
struct Record {
  std::string command;  // empty: no record (or `malformed`)
  bool malformed = false;  // a file of that name, but not a record qat wrote
  std::map<std::string, FileStamp> files;
};

// A name on one line of the record: '\' and a line break escaped.
std::string escaped(const std::string& name) {
  std::string out;
  for (const char c : name) out += c == '\\' ? "\\\\" : c == '\n' ? "\\n" : std::string(1, c);
  return out;
}
// The name back; false for an escape qat does not write.
bool unescaped(const std::string& text, std::string& name) {
  name.clear();
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      name += text[i];
      continue;
    }
    if (++i == text.size() || (text[i] != '\\' && text[i] != 'n')) return false;
    name += text[i] == 'n' ? '\n' : '\\';
  }
  return true;
}

FileStamp stamp_of(const fs::path& file) {
  std::error_code ec;
  return {sha256_file(file.string()), fs::file_size(file, ec)};
}

Record read_record(const fs::path& dir) {
  std::error_code ec;
  const fs::path path = dir / kRecord;
  if (!fs::is_regular_file(path, ec) || fs::is_symlink(path, ec)) return {};
  std::istringstream in(read_text_file(path.string()));
  Record r, malformed;
  malformed.malformed = true;
  std::string line;
  if (!std::getline(in, line) || line.rfind(kRecordHead, 0) != 0) return malformed;
  const std::string command = line.substr(std::string(kRecordHead).size());
  while (std::getline(in, line)) {
    // "<64 hex digits> <bytes> <escaped name>", one space between
    const size_t gap = line.find(' ', 65);
    FileStamp st{line.substr(0, 64), 0};
    std::string name;
    if (line.size() < 68 || line[64] != ' ' || gap == std::string::npos || gap == 65 || gap > 65 + 19 ||
        line.find_first_not_of("0123456789", 65) != gap || !unescaped(line.substr(gap + 1), name) || name.empty())
      return malformed;
    st.bytes = std::stoull(line.substr(65, gap - 65));
    r.files[name] = st;
  }
  r.command = command;
  return r;
}

// Why a file is not on the record of `cmd`.
std::string unlisted_reason(const Record& r, const std::string& cmd) {
  const std::string record = kRecord;
  if (r.malformed) return "its " + record + " is not a record qat wrote";
  if (r.command.empty()) return "the folder has no record " + record;
  if (r.command != cmd) return "its record " + record + " is of " + r.command;
  return "its record " + record + " does not list it";
}

}  // namespace

OutputFolder::OutputFolder(OutputFolderSpec spec, const std::string& dir) : spec_(std::move(spec)), dir_(dir) {
  const std::string& cmd = spec_.command;
  QAT_CHECK(!dir.empty(), cmd, ": ", spec_.option, " is empty; name a folder");
  fs::path p = fs::absolute(dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "out/"
  std::error_code ec;
  if (fs::is_symlink(p, ec)) p = fs::canonical(p, ec);  // the exchange must replace the folder, not the link
  abs_ = p.string();
  QAT_CHECK(!fs::exists(p, ec) || fs::is_directory(p, ec), cmd, ": ", spec_.option, " ", dir,
            " exists and is not a folder");
  if (!fs::exists(p, ec)) {
    made_top_ = p.string();  // the highest folder this command makes: removed again on a refusal
    for (fs::path q = p.parent_path(); !q.empty() && q != q.root_path() && !fs::exists(q, ec); q = q.parent_path())
      made_top_ = q.string();
    fs::create_directories(p, ec);
    QAT_CHECK(!ec && fs::is_directory(p), cmd, ": ", spec_.option, " ", dir, " cannot be made a folder",
              ec ? ": " + ec.message() : std::string());
    created_ = true;
  }
  try {
    if (spec_.before_lock) spec_.before_lock();
    lock();
    check_entries();
    std::string prefix = ".";  // appended piece by piece: GCC 12 warns falsely on "." + string
    prefix += p.filename().string();
    prefix += ".tmp-";
    remove_dead_temporaries(p.parent_path().string(), prefix);  // Note [dead temporaries]
    staged_ = (p.parent_path() / (prefix + temporary_tag())).string();
    fs::remove_all(staged_, ec);
    fs::create_directory(staged_, ec);
    QAT_CHECK(!ec, cmd, ": cannot write into ", p.parent_path().string(), " (beside ", spec_.option, " ", dir,
               "): ", ec.message());
  } catch (...) {
    cleanup();
    throw;
  }
}

OutputFolder::~OutputFolder() { cleanup(); }

void OutputFolder::cleanup() {
  std::error_code ec;
  if (!published_ && !staged_.empty()) fs::remove_all(staged_, ec);
  staged_.clear();
  // The folder this command made, each only when still empty (nothing was
  // written there), and only when this command holds its lock: one whose lock
  // another command took is that command's now.
  if (created_ && !published_ && fd_ >= 0)
    for (fs::path q = abs_; fs::remove(q, ec) && q.string() != made_top_; q = q.parent_path()) {
    }
  created_ = false;
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  fd_ = -1;
}

void OutputFolder::lock() {
  const std::string& cmd = spec_.command;
  for (int attempt = 0; attempt < 16; ++attempt) {
    fd_ = ::open(abs_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    QAT_CHECK(fd_ >= 0, cmd, ": cannot open ", spec_.option, " ", dir_, ": ", std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd_);
      fd_ = -1;
      QAT_CHECK(err != EWOULDBLOCK, cmd, ": ", spec_.option, " ", dir_, " is being written by another qat command "
                "(calibrate, sensitivity, compare or export into the same folder); wait for it to finish or choose "
                "another folder");
      QAT_FAIL(cmd, ": cannot lock ", spec_.option, " ", dir_, ": ", std::strerror(err));
    }
    if (same_inode(fd_, abs_)) return;
    ::close(fd_);  // exchanged under us by a command that has since finished: lock the new folder
    fd_ = -1;
  }
  QAT_FAIL(cmd, ": ", spec_.option, " ", dir_, " keeps being replaced by other commands; try again");
}

bool OutputFolder::is_own(const std::string& name) const {
  for (const std::string& o : spec_.own)
    if (o == name || (o.size() > 1 && o[0] == '*' && name.size() > o.size() - 1 && ends_with(name, o.substr(1))))
      return true;
  return false;
}

// Only the files the command wrote there, as it wrote them (its record):
// anything else was not written by it and is never swept away with the old
// folder, even under an output's name.
void OutputFolder::check_entries() const {
  const std::string& cmd = spec_.command;
  const Record record = read_record(abs_);
  for (const auto& entry : fs::directory_iterator(abs_)) {
    const std::string name = entry.path().filename().string();
    std::error_code ec;
    const bool file = entry.is_regular_file(ec) && !entry.is_symlink(ec);
    if (name == kRecord && file) continue;
    const std::string keep_it = "; nothing there is replaced: choose another folder, or move " + name + " away";
    QAT_CHECK(file && is_own(name), cmd, ": ", spec_.option, " ", dir_, " holds ", name, file ? "" : " (not a file)",
              ", which ", cmd, " does not write (it writes ", own_list(spec_.own), ")", keep_it);
    const auto listed = record.command == cmd ? record.files.find(name) : record.files.end();
    QAT_CHECK(listed != record.files.end(), cmd, ": ", spec_.option, " ", dir_, " holds ", name, ", which ", cmd,
              " did not write there (", unlisted_reason(record, cmd),
              ": a user's file, another command's, or one from a qat before these records)", keep_it);
    QAT_CHECK(stamp_of(entry.path()) == listed->second, cmd, ": ", spec_.option, " ", dir_, " holds ", name,
              ", changed since ", cmd, " wrote it (its size or SHA-256 differs from the record)", keep_it);
  }
}

void OutputFolder::write_record() const {
  std::map<std::string, FileStamp> files;  // (in name order)
  for (const auto& entry : fs::directory_iterator(staged_)) {
    const std::string name = entry.path().filename().string();
    std::error_code ec;
    if (name != kRecord && entry.is_regular_file(ec) && !entry.is_symlink(ec)) files[name] = stamp_of(entry.path());
  }
  std::string text = kRecordHead + spec_.command + "\n";
  for (const auto& [name, st] : files) text += st.sha256 + " " + std::to_string(st.bytes) + " " + escaped(name) + "\n";
  write_text_file_atomic(staged_ + "/" + kRecord, text);
}

std::string OutputFolder::staged(const std::string& name) const {
  QAT_CHECK(is_own(name), spec_.command, ": internal: ", name, " is not one of its outputs");
  return staged_ + "/" + name;
}

bool OutputFolder::holds(const std::string& name) const {
  std::error_code ec;
  return fs::is_regular_file(fs::path(abs_) / name, ec);
}

void OutputFolder::keep(const std::string& name) {
  const fs::path from = fs::path(abs_) / name, to = staged(name);
  std::error_code ec;
  fs::create_hard_link(from, to, ec);  // the same bytes, no copy
  if (ec) fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  QAT_CHECK(!ec, spec_.command, ": cannot keep ", from.string(), " in the new ", spec_.option, ": ", ec.message());
}

bool path_inside(const std::string& path, const std::string& dir) {
  std::error_code ec;
  const fs::path target = fs::weakly_canonical(fs::absolute(path), ec);
  const fs::path root = fs::weakly_canonical(fs::absolute(dir), ec);
  const fs::path rel = target.lexically_relative(root);
  return !rel.empty() && rel != "." && *rel.begin() != "..";
}

bool OutputFolder::contains(const std::string& path) const { return path_inside(path, abs_); }

std::string OutputFolder::scratch(const std::string& name) {
  const std::string path = staged_ + "/" + name;
  std::error_code ec;
  fs::create_directory(path, ec);
  QAT_CHECK(!ec, spec_.command, ": cannot make the scratch folder ", path, ": ", ec.message());
  scratch_.push_back(path);
  return path;
}

void OutputFolder::publish() {
  const std::string& cmd = spec_.command;
  std::error_code ec;
  for (const std::string& s : scratch_) fs::remove_all(s, ec);
  check_entries();  // (a process other than qat may have written there meanwhile)
  write_record();
  sync_parent_folder(staged_ + "/.");  // the staged names, before they become the folder's
  QAT_CHECK(::renameat2(AT_FDCWD, staged_.c_str(), AT_FDCWD, abs_.c_str(), RENAME_EXCHANGE) == 0, cmd,
            ": cannot replace ", spec_.option, " ", dir_, " with ", staged_, ": ", std::strerror(errno));
  published_ = true;
  sync_parent_folder(abs_);
  fs::remove_all(staged_, ec);  // now the old folder: only the command's own files (check_entries)
  staged_.clear();
}

}  // namespace qat::apps
