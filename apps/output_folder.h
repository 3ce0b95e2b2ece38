#pragma once
// Note [output folder]. A command that writes a folder of results (calibrate,
// sensitivity, compare, export) writes it one way, so that no folder a user
// reads is ever half old and half new, and nothing qat did not write is lost:
//  - a lock: the folder itself is flock'ed for the command's lifetime; a
//    second command writing it is refused, naming it (the kernel drops the
//    lock however the holder ends);
//  - ownership: the folder may hold only files the command itself wrote
//    there: names it writes, each listed with its size and SHA-256 in the
//    record it leaves beside them (`.qat-output`, naming the command).
//    Anything else (a user's file, even one named like an output; a file
//    changed since; another command's output; a folder) makes it refuse
//    before anything is written, naming the entry;
//  - staging: every file is written into a sibling folder `.<name>.tmp-<tag>`
//    (Note [dead temporaries]), which is then exchanged with the folder in
//    one rename (renameat2 RENAME_EXCHANGE): a reader sees the old folder or
//    the new one, never a mix, and a command killed at any moment leaves the
//    old one whole. Files of the old folder that this run does not rewrite
//    and wants to keep (a calibration cache) are carried over by `keep`;
//  - a refusal leaves nothing behind: the staging folder is removed, and so
//    is the folder itself when this command made it.
// `qat train` keeps a run folder of its own kind (checkpoints written one by
// one as epochs end, each atomically, under its `.lock`): see run_lock.h.
#include <functional>
#include <string>
#include <vector>

namespace qat::apps {

// Whether `path` lies inside the folder `dir` (resolving links and `..`;
// neither need exist).
bool path_inside(const std::string& path, const std::string& dir);

struct OutputFolderSpec {
  std::string command;            // "calibrate": the errors' first word
  std::string option = "--out";   // how the user named the folder
  std::vector<std::string> own;   // names the command writes; "*.cache" matches a suffix
  // Tests: called between making the folder and locking it (where another
  // command can take the lock first).
  std::function<void()> before_lock = nullptr;
};

class OutputFolder {
 public:
  // Checks, creates (with its parents) and locks `dir`, and makes the
  // staging folder; throws naming the folder and the reason.
  OutputFolder(OutputFolderSpec spec, const std::string& dir);
  ~OutputFolder();
  OutputFolder(const OutputFolder&) = delete;
  OutputFolder& operator=(const OutputFolder&) = delete;

  const std::string& dir() const { return dir_; }
  // Where to write `name` (one of the own names) until publish().
  std::string staged(const std::string& name) const;
  // The folder as it is now holds `name` (a file).
  bool holds(const std::string& name) const;
  // The old folder's `name` goes into the new one unchanged.
  void keep(const std::string& name);
  // Whether `path` lies inside the folder (resolving links and `..`).
  bool contains(const std::string& path) const;
  // A folder `name` inside the staging folder for the command's scratch
  // work; removed before publishing.
  std::string scratch(const std::string& name);
  // The staged folder replaces the folder whole; the old one is removed.
  void publish();

 private:
  bool is_own(const std::string& name) const;
  void check_entries() const;
  void write_record() const;  // the staged files' record
  void lock();
  void cleanup();  // unpublished: the staging folder, and the folder if this command made it

  OutputFolderSpec spec_;
  std::string dir_;     // as the user gave it (for messages)
  std::string abs_;     // absolute, normalized
  std::string staged_;  // the staging folder
  std::vector<std::string> scratch_;
  std::string made_top_;  // the highest of the folders this command made
  int fd_ = -1;         // the lock: the folder opened O_DIRECTORY
  bool created_ = false, published_ = false;
};

}  // namespace qat::apps
