#pragma once
// Whole small text files (caches, records): read with an error naming the
// file, written to a temporary file beside the target that is then renamed
// over it (atomic on POSIX: a crash leaves the old file, never half a new one).
#include <string>

namespace qat {

std::string read_text_file(const std::string& path);
void write_text_file_atomic(const std::string& path, const std::string& text);

}  // namespace qat
