#pragma once
// libFuzzer targets read files, as the program does: each input is written
// to a file of its own (per process) that the loader under test opens.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

namespace qat::fuzz {

inline void write_file(const std::string& path, const char* data, size_t size) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(data, static_cast<std::streamsize>(size));
}

// Writes bytes to /tmp/qat_fuzz_<pid>_<name> and returns the path.
inline std::string write_input(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = "/tmp/qat_fuzz_" + std::to_string(::getpid()) + "_" + name;
  write_file(path, reinterpret_cast<const char*>(data), size);
  return path;
}

}  // namespace qat::fuzz
