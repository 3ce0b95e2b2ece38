#pragma once
// Words for what a file that should have been of one format looks like
// instead, for errors: a user hands qat a YAML file, an ONNX model or a text
// cache where a checkpoint belongs, and "header length 4.2e18 (truncated
// file?)" says nothing useful.
#include <string>
#include <string_view>

namespace qat {

// `s` with control characters, quotes, backslashes and bytes that are not
// UTF-8 written as \xNN, cut to `max` characters with "..." after: safe to
// print on a terminal.
std::string printable(std::string_view s, size_t max = 80);

// What the first bytes of the file at `path` look like: "a folder", "text
// beginning \"...\"", "an ONNX model (protobuf)", "empty", or "binary data
// beginning xx xx ..."; "" when it cannot be read.
std::string describe_file_start(const std::string& path);

}  // namespace qat
