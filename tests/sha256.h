// SHA-256 through OpenSSL's libcrypto, for tests that check a file is the one
// a reference script hashed with Python's hashlib.
#pragma once

#include <openssl/evp.h>

#include <cstdio>
#include <string>
#include <string_view>

namespace dendrite::test {

// The digest of data, as 64 lowercase hex digits ("" if OpenSSL fails).
inline std::string sha256_hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (!EVP_Digest(data.data(), data.size(), digest, &size, EVP_sha256(), nullptr)) return "";
  std::string hex(2 * size, '0');
  for (unsigned int i = 0; i < size; ++i) std::snprintf(&hex[2 * i], 3, "%02x", digest[i]);
  return hex;
}

}  // namespace dendrite::test
