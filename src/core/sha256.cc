#include "loom/core/sha256.h"

#include <openssl/evp.h>

#include <array>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>

namespace loom {

// OpenSSL's EVP digest (libssl-dev from Debian), not a hash of our own.
std::string sha256_hex(std::string_view data) {
  const std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  if (!context || EVP_DigestInit_ex(context.get(), EVP_sha256(), nullptr) != 1 ||
      EVP_DigestUpdate(context.get(), data.data(), data.size()) != 1 ||
      EVP_DigestFinal_ex(context.get(), digest.data(), &length) != 1)
    throw std::runtime_error("OpenSSL's SHA-256 failed");  // allocation failure only: not an input error
  std::string hex;
  hex.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

}  // namespace loom
