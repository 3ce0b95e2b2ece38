#pragma once
// RunLock: one `qat train` per run directory. Holds an exclusive advisory
// lock (flock) on DIR/.lock for its lifetime, with the holder's pid written in
// the file; the kernel drops the lock when the process ends however it ends,
// so a killed run never leaves the directory locked.
#include <string>

namespace qat::apps {

class RunLock {
 public:
  // Throws naming the directory and the holder's pid when another process
  // holds it. On release, a folder holding nothing but the lock (a run
  // refused before it wrote anything) loses the lock, and the folder too
  // where `made_dir` (the run made it).
  explicit RunLock(const std::string& run_dir, bool made_dir = false);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
  std::string run_dir_;
  bool made_dir_ = false;
};

}  // namespace qat::apps
