
#include "tests/test_util.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/safetensors.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using namespace qat;

namespace {

// A fresh folder per test, removed afterwards (pid + counter: ctest may run
// several test processes at once).
struct TempDir : qat::testing::TempDir {
  TempDir() : qat::testing::TempDir("qat_st_test_") {}
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

uint64_t read_u64le(const std::string& b, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(static_cast<unsigned char>(b[at + i])) << (8 * i);
  return v;
}

// A file with the given header text and `data_size` zero bytes of data.
std::string raw_file(const std::string& header, size_t data_size) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(uint64_t(header.size()) >> (8 * i));
  return out + header + std::string(data_size, '\0');
}

// The view's elements in row-major order, as bytes.
std::string tensor_bytes(const Tensor& t) {
  Tensor c = t.contiguous();
  const char* p = static_cast<const char*>(c.impl_ptr()->storage->data) + c.offset() * dtype_size(c.dtype());
  return std::string(p, c.nbytes());
}

// The message of the qat::Error that f throws ("" and a failure if none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  FAIL_CHECK("expected a qat::Error");
  return "";
}

template <class T>
Tensor make(DType dt, const Shape& shape, const std::vector<T>& v) {
  Tensor t = Tensor::empty(shape, dt);
  REQUIRE(size_t(t.numel()) == v.size());
  if (!v.empty()) std::memcpy(t.data<T>(), v.data(), v.size() * sizeof(T));
  return t;
}

}  // namespace

TEST_CASE("safetensors: round trip of every dtype, odd shapes, views and metadata", "[safetensors]") {
  TempDir tmp;
  Generator gen(7);
  Tensor base = Tensor::randn({4, 5}, gen);
  TensorMap in = {
      {"w.f32", Tensor::randn({2, 3, 4}, gen)},
      {"w.i8", make<int8_t>(DType::i8, {5}, {-128, -1, 0, 1, 127})},
      {"w.u8", make<uint8_t>(DType::u8, {2, 2, 2}, {0, 1, 2, 3, 128, 200, 254, 255})},
      {"w.i32", make<int32_t>(DType::i32, {3, 1}, {INT32_MIN, -7, INT32_MAX})},
      {"scalar", Tensor::scalar(3.25f)},
      {"empty", Tensor::empty({0, 3})},
      {"view", base.narrow(1, 1, 2)},  // (4,2) with row stride 5
  };
  REQUIRE_FALSE(in.at("view").is_contiguous());
  const Metadata meta = {{"format", "pt"}, {"epoch", "12"}, {"note", "quotes \" and \\ survive"}};
  const std::string path = tmp.file("model.safetensors");
  save_safetensors(path, in, meta);

  SafetensorsFile f = load_safetensors(path);
  CHECK(f.metadata == meta);
  REQUIRE(f.tensors.size() == in.size());
  for (const auto& [name, t] : in) {
    INFO("tensor " << name);
    const Tensor& got = expect_tensor(f, path, name, t.dtype(), t.sizes());
    CHECK(got.is_contiguous());
    CHECK(tensor_bytes(got) == tensor_bytes(t));
  }
  CHECK(f.tensors.at("scalar").dim() == 0);
  CHECK(f.tensors.at("scalar").item() == 3.25f);
  CHECK(f.tensors.at("view").to_vector() == in.at("view").to_vector());

  // No tensors, no metadata: still a valid file.
  save_safetensors(path, {});
  SafetensorsFile e = load_safetensors(path);
  CHECK(e.tensors.empty());
  CHECK(e.metadata.empty());
}

TEST_CASE("safetensors: header is JSON and the byte layout follows the spec", "[safetensors]") {
  TempDir tmp;
  const std::string path = tmp.file("layout.safetensors");
  // "b" is inserted first but "a" must come first in the data (name order).
  save_safetensors(path,
                   {{"b", Tensor::from_vector_i32({1, -2}, {2})}, {"a", Tensor::from_vector({1.5f, -0.25f}, {2})}},
                   {{"k", "v"}});
  const std::string b = read_bytes(path);
  REQUIRE(b.size() >= 8);
  const uint64_t n = read_u64le(b, 0);
  CHECK(n % 8 == 0);
  REQUIRE(b.size() == 8 + n + 16);

  const std::string header = b.substr(8, n);
  CHECK(header.front() == '{');
  CHECK(header.find_last_not_of(' ') == header.rfind('}'));  // padded with spaces only
  const auto j = nlohmann::json::parse(header);
  CHECK(j.size() == 3);
  CHECK(j["a"]["dtype"] == "F32");
  CHECK(j["a"]["shape"] == nlohmann::json::array({2}));
  CHECK(j["a"]["data_offsets"] == nlohmann::json::array({0, 8}));
  CHECK(j["b"]["dtype"] == "I32");
  CHECK(j["b"]["shape"] == nlohmann::json::array({2}));
  CHECK(j["b"]["data_offsets"] == nlohmann::json::array({8, 16}));
  CHECK(j["__metadata__"] == nlohmann::json{{"k", "v"}});

  // 1.5f = 0x3FC00000, -0.25f = 0xBE800000, then int32 1 and -2, little-endian.
  const unsigned char want[16] = {0x00, 0x00, 0xC0, 0x3F, 0x00, 0x00, 0x80, 0xBE,
                                  0x01, 0x00, 0x00, 0x00, 0xFE, 0xFF, 0xFF, 0xFF};
  CHECK(b.substr(8 + n) == std::string(reinterpret_cast<const char*>(want), 16));

  // Other dtypes and a 0-d scalar in the header.
  save_safetensors(path, {{"s", Tensor::scalar(1.f)}, {"q", Tensor::zeros({3}, DType::i8)},
                          {"u", Tensor::zeros({1, 2}, DType::u8)}});
  const std::string b2 = read_bytes(path);
  const auto j2 = nlohmann::json::parse(b2.substr(8, read_u64le(b2, 0)));
  CHECK(j2.count("__metadata__") == 0);
  CHECK(j2["q"]["dtype"] == "I8");
  CHECK(j2["q"]["data_offsets"] == nlohmann::json::array({0, 3}));
  CHECK(j2["s"]["shape"] == nlohmann::json::array());
  CHECK(j2["s"]["data_offsets"] == nlohmann::json::array({3, 7}));
  CHECK(j2["u"]["dtype"] == "U8");
  CHECK(j2["u"]["data_offsets"] == nlohmann::json::array({7, 9}));
}

TEST_CASE("safetensors: truncated and missing files raise errors naming the file", "[safetensors]") {
  TempDir tmp;
  const std::string good = tmp.file("good.safetensors");
  save_safetensors(good, {{"weight", Tensor::ones({4, 4})}});
  const std::string bytes = read_bytes(good);
  const uint64_t n = read_u64le(bytes, 0);
  const std::string bad = tmp.file("cut.safetensors");

  SECTION("cut in the data section") {
    write_bytes(bad, bytes.substr(0, bytes.size() - 3));
    CHECK_THAT(error_of([&] { load_safetensors(bad); }), Contains(bad) && Contains("weight"));
  }
  SECTION("cut in the header") {
    write_bytes(bad, bytes.substr(0, 8 + n / 2));
    CHECK_THAT(error_of([&] { load_safetensors(bad); }), Contains(bad) && Contains("header length"));
  }
  SECTION("shorter than 8 bytes") {
    write_bytes(bad, bytes.substr(0, 5));
    CHECK_THAT(error_of([&] { load_safetensors(bad); }), Contains(bad));
    write_bytes(bad, "");
    CHECK_THAT(error_of([&] { load_safetensors(bad); }), Contains(bad));
  }
  SECTION("missing file or a folder") {
    CHECK_THAT(error_of([&] { load_safetensors(tmp.file("nope.safetensors")); }), Contains("nope.safetensors"));
    CHECK_THAT(error_of([&] { load_safetensors(tmp.dir.string()); }), Contains(tmp.dir.string()));
  }
}

TEST_CASE("safetensors: corrupted headers are rejected with a clear error", "[safetensors]") {
  TempDir tmp;
  const std::string path = tmp.file("bad.safetensors");

  SECTION("corrupted dtype string") {
    save_safetensors(path, {{"conv.weight", Tensor::ones({2, 2})}});
    std::string b = read_bytes(path);
    const size_t at = b.find("\"F32\"");
    REQUIRE(at != std::string::npos);
    b.replace(at, 5, "\"X32\"");  // same length: offsets stay valid
    write_bytes(path, b);
    CHECK_THAT(error_of([&] { load_safetensors(path); }),
               Contains(path) && Contains("conv.weight") && Contains("X32"));
  }

  // Hand-written headers, each with `data` bytes after them.
  struct Case {
    const char* what;
    std::string header;
    size_t data;
    const char* expect;
  };
  const Case cases[] = {
      {"invalid JSON", R"({"a": {"dtype": "F32",)", 0, "not valid JSON"},
      {"not an object", R"([1, 2])", 0, "not a JSON object"},
      {"entry not an object", R"({"a": 3})", 0, "'a'"},
      {"unknown dtype", R"({"a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}})", 4, "F16"},
      {"missing shape", R"({"a": {"dtype": "F32", "data_offsets": [0, 4]}})", 4, "shape"},
      {"negative dim", R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4, "shape"},
      {"bad offsets", R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4]}})", 4, "data_offsets"},
      {"shape/offset mismatch", R"({"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", 20,
       "needs 24 bytes"},
      {"overflowing shape",
       R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})", 4, "'a'"},
      {"offsets past the data", R"({"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]}})", 6,
       "outside the data section"},
      {"begin after end", R"({"a": {"dtype": "U8", "shape": [0], "data_offsets": [4, 0]}})", 4, "'a'"},
      {"overlap",
       R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
           "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}})",
       6, "overlap"},
      {"gap",
       R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
           "b": {"dtype": "U8", "shape": [2], "data_offsets": [4, 6]}})",
       6, "gap"},
      {"trailing bytes", R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}})", 5, "trailing"},
      {"metadata not strings", R"({"__metadata__": {"epoch": 3}})", 0, "epoch"},
      {"a tensor given twice",
       R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
           "a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}})",
       2, "the header gives the key 'a' twice"},
      {"a metadata key given twice", R"({"__metadata__": {"epoch": "3", "epoch": "4"}})", 0,
       "the header gives the key 'epoch' twice"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    write_bytes(path, raw_file(c.header, c.data));
    CHECK_THAT(error_of([&] { load_safetensors(path); }), Contains(path) && Contains(c.expect));
  }

  SECTION("header length past the end of the file") {
    write_bytes(path, raw_file(std::string(16, ' '), 0).substr(0, 12));  // claims 16 bytes, has 4
    CHECK_THAT(error_of([&] { load_safetensors(path); }), Contains(path) && Contains("header length"));
  }
  SECTION("a hand-written valid file with an empty tensor loads") {
    write_bytes(path, raw_file(R"({"e": {"dtype": "I32", "shape": [0], "data_offsets": [0, 0]},
                                   "x": {"dtype": "I8", "shape": [], "data_offsets": [0, 1]}})",
                               1));
    SafetensorsFile f = load_safetensors(path);
    CHECK(f.tensors.at("e").numel() == 0);
    CHECK(f.tensors.at("x").item() == 0.f);
  }
}

TEST_CASE("safetensors: expect_tensor checks presence, dtype and shape", "[safetensors]") {
  TempDir tmp;
  const std::string path = tmp.file("ckpt.safetensors");
  save_safetensors(path, {{"fc.bias", Tensor::zeros({10})}});
  SafetensorsFile f = load_safetensors(path);

  CHECK(expect_tensor(f, path, "fc.bias", DType::f32, {10}).numel() == 10);
  CHECK_THAT(error_of([&] { expect_tensor(f, path, "fc.bias", DType::i32, {10}); }),
             Contains(path) && Contains("fc.bias") && Contains("int32") && Contains("float32"));
  CHECK_THAT(error_of([&] { expect_tensor(f, path, "fc.bias", DType::f32, {5, 2}); }),
             Contains("fc.bias") && Contains("[5, 2]") && Contains("[10]"));
  CHECK_THAT(error_of([&] { expect_tensor(f, path, "fc.weight", DType::f32, {10, 4}); }),
             Contains(path) && Contains("fc.weight") && Contains("missing"));
}

TEST_CASE("safetensors: saving is atomic and leaves no temp file", "[safetensors]") {
  TempDir tmp;
  const std::string path = tmp.file("w.safetensors");
  save_safetensors(path, {{"old", Tensor::ones({100})}}, {{"v", "1"}});
  save_safetensors(path, {{"new", Tensor::full({2}, 5.f)}}, {{"v", "2"}});

  SafetensorsFile f = load_safetensors(path);
  CHECK(f.tensors.count("old") == 0);
  CHECK(f.tensors.at("new").to_vector() == std::vector<float>{5.f, 5.f});
  CHECK(f.metadata.at("v") == "2");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(tmp.dir)) names.push_back(e.path().filename().string());
  CHECK(names == std::vector<std::string>{"w.safetensors"});

  // A failed save leaves the old file alone and nothing else behind.
  REQUIRE_THROWS_AS(save_safetensors(path, {{"__metadata__", Tensor::ones({1})}}), Error);
  const std::string nowhere = tmp.file("no/such/dir.safetensors");
  CHECK_THAT(error_of([&] { save_safetensors(nowhere, {{"x", Tensor::ones({1})}}); }), Contains(nowhere));
  CHECK(load_safetensors(path).metadata.at("v") == "2");
  CHECK(std::distance(fs::directory_iterator(tmp.dir), fs::directory_iterator()) == 1);
}

TEST_CASE("safetensors: numpy reads the file", "[safetensors]") {
  if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
    WARN("skipped: /usr/bin/python3 with numpy is not available");
    return;
  }
  TempDir tmp;
  const std::string path = tmp.file("np.safetensors");
  Tensor v = Tensor::from_vector({0.f, 1.f, 2.f, 3.f, 4.f, 5.f}, {2, 3}).narrow(1, 1, 2);  // [[1,2],[4,5]]
  save_safetensors(path, {{"f", v}, {"i", Tensor::from_vector_i32({-3, 70000}, {2})},
                          {"q", make<int8_t>(DType::i8, {1}, {-5})}, {"u", make<uint8_t>(DType::u8, {}, {250})}},
                   {{"m", "x"}});
  const std::string script = tmp.file("check.py");
  write_bytes(script, R"(import json, struct, sys
import numpy as np
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
assert h.pop('__metadata__') == {'m': 'x'}
types = {'F32': '<f4', 'I32': '<i4', 'I8': 'i1', 'U8': 'u1'}
t = {k: np.frombuffer(b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]],
                      dtype=types[v['dtype']]).reshape(v['shape']) for k, v in h.items()}
assert (t['f'] == np.array([[1, 2], [4, 5]], np.float32)).all()
assert (t['i'] == np.array([-3, 70000])).all()
assert t['q'].tolist() == [-5] and t['u'].shape == () and int(t['u']) == 250
)");
  CHECK(std::system(("/usr/bin/python3 " + script + " " + path).c_str()) == 0);
}
