#include "apps/file_digest.h"

#include <openssl/evp.h>

#include <fstream>
#include <memory>
#include <vector>

#include "core/error.h"

namespace qat::apps {

std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  QAT_CHECK(in, "cannot open ", path, " to compute its digest");
  const std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  QAT_CHECK(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1, "sha256: cannot initialise OpenSSL");
  std::vector<char> buf(size_t{1} << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0)
      QAT_CHECK(EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(in.gcount())) == 1, "sha256: ", path);
  }
  QAT_CHECK(in.eof(), "error reading ", path, " to compute its digest");
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  QAT_CHECK(EVP_DigestFinal_ex(ctx.get(), md, &len) == 1, "sha256: ", path);
  static const char* hex = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) {
    out[2 * i] = hex[md[i] >> 4];
    out[2 * i + 1] = hex[md[i] & 15];
  }
  return out;
}

}  // namespace qat::apps
