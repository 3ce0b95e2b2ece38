#include "apps/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/error.h"

namespace qat::apps {

namespace {
std::string read_holder(int fd) {
  char buf[32] = {};
  const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("unknown");
}
}  // namespace

RunLock::RunLock(const std::string& run_dir, bool made_dir) : run_dir_(run_dir), made_dir_(made_dir) {
  const std::string path = run_dir + "/.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  QAT_CHECK(fd_ >= 0, "train: cannot open ", path, ": ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = read_holder(fd_);
    ::close(fd_);
    fd_ = -1;
    QAT_CHECK(err != EWOULDBLOCK, "train: ", run_dir, " is in use by another qat train (pid ", holder,
              "); wait for it to finish or choose another output.dir");
    QAT_FAIL("train: cannot lock ", path, ": ", std::strerror(err));
  }
  const std::string pid = std::to_string(::getpid());
  const bool written =
      ::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, pid.data(), pid.size(), 0) == static_cast<ssize_t>(pid.size());
  if (!written) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    QAT_FAIL("train: cannot write ", path, ": ", std::strerror(err));
  }
}

RunLock::~RunLock() {
  if (fd_ < 0) return;
  // A folder that holds only the lock: nothing of a run is there (refused before its first write).
  std::error_code ec;
  bool only_lock = true;
  std::filesystem::directory_iterator it(run_dir_, ec), end;  // (no throwing ++ in a destructor)
  for (; !ec && it != end; it.increment(ec)) only_lock = only_lock && it->path().filename() == ".lock";
  if (!ec && only_lock) {
    std::filesystem::remove(run_dir_ + "/.lock", ec);
    if (made_dir_) std::filesystem::remove(run_dir_, ec);  // (empty now; it fails harmlessly otherwise)
  }
  ::close(fd_);  // closing releases the lock
}

}  // namespace qat::apps
