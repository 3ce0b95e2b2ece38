#include "apps/file_digest.h"

#include <openssl/evp.h>

#include <fstream>
#include <memory>
#include <vector>

#include "core/error.h"

namespace qat::apps {

namespace {
using Ctx = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

Ctx new_sha256() {
  Ctx ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  QAT_CHECK(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1, "sha256: cannot initialise OpenSSL");
  return ctx;
}

std::string hex_digest(EVP_MD_CTX* ctx, const std::string& what) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  QAT_CHECK(EVP_DigestFinal_ex(ctx, md, &len) == 1, "sha256: ", what);
  static const char* hex = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) {
    out[2 * i] = hex[md[i] >> 4];
    out[2 * i + 1] = hex[md[i] & 15];
  }
  return out;
}
}  // namespace

std::string sha256_text(const std::string& text) {
  const Ctx ctx = new_sha256();
  QAT_CHECK(EVP_DigestUpdate(ctx.get(), text.data(), text.size()) == 1, "sha256 of a text");
  return hex_digest(ctx.get(), "a text");
}

std::string sha256_tensors(const TensorMap& tensors) {
  const Ctx ctx = new_sha256();
  auto add = [&](const void* p, size_t n) {
    QAT_CHECK(EVP_DigestUpdate(ctx.get(), p, n) == 1, "sha256 of tensors");
  };
  for (const auto& [name, t] : tensors) {
    std::string head = name + '\0' + dtype_name(t.dtype()) + '\0';
    for (const int64_t d : t.sizes()) head += std::to_string(d) + ',';
    add(head.data(), head.size() + 1);  // with its terminating NUL
    const Tensor c = t.to(Device::cpu).contiguous();
    add(static_cast<const char*>(c.impl_ptr()->storage->data) + c.offset() * dtype_size(c.dtype()), c.nbytes());
  }
  return hex_digest(ctx.get(), "tensors");
}

std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  QAT_CHECK(in, "cannot open ", path, " to compute its digest");
  const Ctx ctx = new_sha256();
  std::vector<char> buf(size_t{1} << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0)
      QAT_CHECK(EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(in.gcount())) == 1, "sha256: ", path);
  }
  QAT_CHECK(in.eof(), "error reading ", path, " to compute its digest");
  return hex_digest(ctx.get(), path);
}

}  // namespace qat::apps
