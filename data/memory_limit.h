#pragma once

#include <cstdint>
#include <string>

namespace qat::data {

// This machine's physical memory (sysconf), 0 when it cannot tell.
uint64_t physical_memory_bytes();

// The memory limit of the cgroup whose memory this process is charged to,
// read from `proc_self_cgroup` (the text of /proc/self/cgroup) and the cgroup
// file system mounted at `cgroup_root`: cgroup v2's memory.max or v1's
// memory.limit_in_bytes, the lowest at the process's own cgroup path and
// every cgroup above it up to the mount (inside a container that sees its
// cgroup as the root: the mount itself). 0 when there is no limit or none
// can be read.
uint64_t cgroup_memory_limit_bytes(const std::string& proc_self_cgroup, const std::string& cgroup_root);

// The memory this process may use: the physical memory, or its container's
// limit where that is lower (a container's limit kills the process at it,
// whatever the machine has). 0 when neither can be told.
uint64_t memory_limit_bytes();

}  // namespace qat::data
