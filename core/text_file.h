#pragma once
// Whole small text files (caches, records): read with an error naming the
// file, written to a temporary file beside the target that is then renamed
// over it (atomic on POSIX: a crash leaves the old file, never half a new one).
#include <cstddef>
#include <string>

namespace qat {

// The largest text file qat reads (configs, manifests, calibration caches
// are kilobytes): a device or a wrong path (/dev/zero, a dataset archive)
// is refused after this many bytes instead of filling memory.
constexpr size_t kMaxTextFileBytes = size_t{64} << 20;

// Refuses a folder, a missing file and one longer than max_bytes, naming it.
std::string read_text_file(const std::string& path, size_t max_bytes = kMaxTextFileBytes);
// Refuses a path that exists and is not a regular file (a folder, /dev/full).
void write_text_file_atomic(const std::string& path, const std::string& text);

// Note [dead temporaries]. Atomic writers write `<target>.tmp.<tag>` (a file;
// an export stages a folder `.<name>.tmp-<tag>`), tag = temporary_tag(), and
// rename it over the target. A process killed while writing (SIGTERM,
// SIGKILL, a crash) leaves it: up to a whole checkpoint. Each writer first
// removes, in the target's folder, the entries `<prefix><tag>` written on this
// host whose process is gone (kill(pid, 0): ESRCH); a running writer's own is
// kept, and so is every other host's (on a shared file system this host
// cannot see their processes). A tag without a host (qat before the host was
// recorded) counts as this host's. Returns how many it removed.
int remove_dead_temporaries(const std::string& folder, const std::string& prefix);
// After a rename into `path`'s folder: fsyncs the folder, so that the new
// name survives a power loss as the file's bytes (fsynced before) do. Best
// effort: a file system that cannot fsync a folder is not an error.
void sync_parent_folder(const std::string& path);

// "<pid>@<host>": this process and this host's name (characters other than
// letters, digits, '-' and '.' written '_').
std::string temporary_tag();
// Where an atomic writer writes `target` first: "<target>.tmp.<tag>", the
// dead temporaries of `target` removed from its folder before.
std::string temporary_for(const std::string& target);

}  // namespace qat
