#include "core/safetensors.h"

#include "core/file_kind.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>

#include <set>
#include <tuple>
#include <vector>

#include "core/text_file.h"

namespace qat {

// Tensor bytes are copied to/from disk as they are in memory.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

using json = nlohmann::json;
using FilePtr = std::unique_ptr<FILE, int (*)(FILE*)>;

const char* st_dtype_code(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::i8: return "I8";
    case DType::u8: return "U8";
    case DType::i32: return "I32";
  }
  return "?";
}

bool parse_st_dtype(const std::string& s, DType& out) {
  for (DType t : {DType::f32, DType::i8, DType::u8, DType::i32}) {
    if (s == st_dtype_code(t)) {
      out = t;
      return true;
    }
  }
  return false;
}

const char* raw_bytes(const Tensor& t) {
  return static_cast<const char*>(t.impl_ptr()->storage->data) + t.offset() * dtype_size(t.dtype());
}

// One tensor as described by the header, before its bytes are read.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

// Parses and checks one header entry (everything but the region layout).
Entry parse_entry(const std::string& path, const std::string& name, const json& v, uint64_t data_size) {
  auto fail = [&](const auto&... what) { QAT_FAIL("load_safetensors '", path, "': tensor '", name, "': ", what...); };
  if (!v.is_object()) fail("header entry is not an object");
  Entry e{name, DType::f32, {}, 0, 0};

  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) fail("missing or non-string \"dtype\"");
  if (!parse_st_dtype(dt->get<std::string>(), e.dtype))
    fail("unsupported dtype \"", dt->get<std::string>(), "\" (expected F32, I8, U8 or I32)");

  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) fail("missing or non-array \"shape\"");
  for (const json& d : *sh) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      fail("shape ", sh->dump(), " must hold non-negative integers");
    e.shape.push_back(d.get<int64_t>());
  }

  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    fail("\"data_offsets\" must be [begin, end] with non-negative integers");
  e.begin = (*off)[0].get<uint64_t>();
  e.end = (*off)[1].get<uint64_t>();
  if (e.begin > e.end || e.end > data_size)
    fail("data_offsets [", e.begin, ", ", e.end, "] lie outside the data section of ", data_size,
         " bytes (truncated file?)");

  // numel * dtype size, guarding against overflow from a hostile shape.
  uint64_t nbytes = dtype_size(e.dtype);
  bool overflow = false;
  if (std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end())
    nbytes = 0;
  else
    for (int64_t d : e.shape) overflow = overflow || __builtin_mul_overflow(nbytes, uint64_t(d), &nbytes);
  if (overflow || nbytes != e.end - e.begin)
    fail("shape ", e.shape, " of ", st_dtype_code(e.dtype), " needs ", overflow ? "too many" : std::to_string(nbytes),
         " bytes but data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin);
  return e;
}

// The regions must tile the data section exactly: no overlap, gap or tail.
void check_layout(const std::string& path, std::vector<Entry>& entries, uint64_t data_size) {
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  uint64_t pos = 0;
  for (const Entry& e : entries) {
    QAT_CHECK(e.begin == pos, "load_safetensors '", path, "': tensor '", e.name, "': data_offsets [", e.begin, ", ",
              e.end, "] ", e.begin < pos ? "overlap the previous tensor" : "leave a gap after the previous tensor",
              " (which ends at ", pos, ")");
    pos = e.end;
  }
  QAT_CHECK(pos == data_size, "load_safetensors '", path, "': tensors cover ", pos, " bytes of the ", data_size,
            "-byte data section (trailing bytes)");
}

}  // namespace

void save_safetensors(const std::string& path, const TensorMap& tensors, const Metadata& metadata) {
  // Build the header; std::map gives name order, which is also the data order.
  json header = json::object();
  std::vector<Tensor> blobs;
  uint64_t pos = 0;
  for (const auto& [name, t] : tensors) {
    QAT_CHECK(!name.empty() && name != "__metadata__", "save_safetensors '", path, "': invalid tensor name '", name,
              "'");
    QAT_CHECK(t.defined(), "save_safetensors '", path, "': tensor '", name, "' is undefined");
    QAT_CHECK(t.device() == Device::cpu, "save_safetensors '", path, "': tensor '", name, "' is on ",
              device_name(t.device()), "; move it to the CPU first");
    blobs.push_back(t.contiguous());
    header[name] = {
        {"dtype", st_dtype_code(t.dtype())}, {"shape", t.sizes()}, {"data_offsets", {pos, pos + t.nbytes()}}};
    pos += t.nbytes();
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;

  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // pad so the data starts 8-byte aligned
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));

  // Write a temp file beside the target, then rename it over (atomic on POSIX).
  const std::string tmp = temporary_for(path);  // Note [dead temporaries]
  FILE* f = std::fopen(tmp.c_str(), "wb");
  QAT_CHECK(f, "save_safetensors '", path, "': cannot create '", tmp, "': ", std::strerror(errno));
  bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  for (const Tensor& t : blobs) ok = ok && std::fwrite(raw_bytes(t), 1, t.nbytes(), f) == t.nbytes();
  ok = ok && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  int err = errno;
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    std::remove(tmp.c_str());
    QAT_FAIL("save_safetensors '", path, "': write failed: ", std::strerror(err));
  }
  sync_parent_folder(path);
}

namespace {

// The header always (validated whole); the tensors' bytes when with_tensors.
SafetensorsFile read_safetensors(const std::string& path, bool with_tensors) {
  std::error_code ec;
  QAT_CHECK(!std::filesystem::is_directory(path, ec), "load_safetensors '", path,
            "': is a folder, not a safetensors file");
  QAT_CHECK(std::filesystem::is_regular_file(path, ec), "load_safetensors '", path,
            "': no such file (or not a regular file)");
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  QAT_CHECK(!ec, "load_safetensors '", path, "': cannot stat: ", ec.message());
  FilePtr f(std::fopen(path.c_str(), "rb"), &std::fclose);
  QAT_CHECK(f, "load_safetensors '", path, "': cannot open: ", std::strerror(errno));

  QAT_CHECK(file_size >= 8, "load_safetensors '", path, "': file is ", file_size,
            " bytes, shorter than the 8-byte header length (it is ", describe_file_start(path), ")");
  unsigned char len[8];
  QAT_CHECK(std::fread(len, 1, 8, f.get()) == 8, "load_safetensors '", path, "': cannot read the header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(len[i]) << (8 * i);
  if (n > file_size - 8) {
    // A safetensors header is JSON opening at byte 8: a file of another
    // kind (YAML, ONNX, a text cache) is named as what it looks like.
    char brace = 0;
    const bool json_start = file_size > 8 && std::fread(&brace, 1, 1, f.get()) == 1 &&
                            (brace == '{' || brace == ' ' || brace == '\n' || brace == '\t' || brace == '\r');
    QAT_CHECK(json_start, "load_safetensors '", path, "': not a safetensors file: it is ", describe_file_start(path));
    QAT_FAIL("load_safetensors '", path, "': header length ", n, " exceeds the ", file_size - 8,
             " bytes after it (truncated file?)");
  }
  std::string text(n, '\0');
  QAT_CHECK(std::fread(text.data(), 1, n, f.get()) == n, "load_safetensors '", path, "': cannot read the header");

  json header;
  // A key given twice in one object: JSON leaves it undefined and nlohmann
  // keeps the last, so a header could describe a tensor twice and be read
  // either way; refused.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  const json::parser_callback_t note_keys = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) open_objects.emplace_back();
    if (event == json::parse_event_t::object_end && !open_objects.empty()) open_objects.pop_back();
    if (event == json::parse_event_t::key && !open_objects.empty() && duplicate.empty() &&
        !open_objects.back().insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  try {
    header = json::parse(text, note_keys);
  } catch (const json::exception& e) {
    QAT_FAIL("load_safetensors '", path, "': header is not valid JSON: ", e.what());
  }
  QAT_CHECK(duplicate.empty(), "load_safetensors '", path, "': the header gives the key '", duplicate, "' twice");
  QAT_CHECK(header.is_object(), "load_safetensors '", path, "': header is not a JSON object");

  SafetensorsFile out;
  const uint64_t data_start = 8 + n, data_size = file_size - data_start;
  std::vector<Entry> entries;
  for (const auto& [key, v] : header.items()) {
    if (key != "__metadata__") {
      entries.push_back(parse_entry(path, key, v, data_size));
      continue;
    }
    QAT_CHECK(v.is_object(), "load_safetensors '", path, "': \"__metadata__\" is not an object");
    for (const auto& [mk, mv] : v.items()) {
      QAT_CHECK(mv.is_string(), "load_safetensors '", path, "': metadata '", mk, "' is not a string");
      out.metadata[mk] = mv.get<std::string>();
    }
  }
  check_layout(path, entries, data_size);
  if (!with_tensors) return out;

  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    const size_t nb = e.end - e.begin;
    const bool ok = nb == 0 || (::fseeko(f.get(), off_t(data_start + e.begin), SEEK_SET) == 0 &&
                                std::fread(t.impl_ptr()->storage->data, 1, nb, f.get()) == nb);
    QAT_CHECK(ok, "load_safetensors '", path, "': tensor '", e.name, "': cannot read ", nb, " bytes");
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) { return read_safetensors(path, true); }

Metadata load_safetensors_metadata(const std::string& path) { return read_safetensors(path, false).metadata; }

const Tensor& expect_tensor(const SafetensorsFile& f, const std::string& path, const std::string& name, DType dtype,
                            const Shape& shape) {
  auto it = f.tensors.find(name);
  QAT_CHECK(it != f.tensors.end(), "safetensors '", path, "': missing tensor '", name, "' (expected ",
            dtype_name(dtype), " ", shape, ")");
  const Tensor& t = it->second;
  QAT_CHECK(t.dtype() == dtype && t.sizes() == shape, "safetensors '", path, "': tensor '", name, "': expected ",
            dtype_name(dtype), " ", shape, ", got ", dtype_name(t.dtype()), " ", t.sizes());
  return t;
}

}  // namespace qat
