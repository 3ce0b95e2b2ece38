#pragma once
// RunLock: one `qat train` per run directory. Holds an exclusive advisory
// lock (flock) on DIR/.lock for its lifetime, with the holder's pid written in
// the file; the kernel drops the lock when the process ends however it ends,
// so a killed run never leaves the directory locked.
#include <string>

namespace qat::apps {

class RunLock {
 public:
  // Throws naming the directory and the holder's pid when another process holds it.
  explicit RunLock(const std::string& run_dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace qat::apps
