// The job secret: see store_secret.h.
#include "dist/store/store_secret.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace tinyddp::dist {

absl::StatusOr<std::string> GenerateStoreSecret() {
  uint8_t bytes[32];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::InternalError("getrandom() failed: cannot make a job secret for the store");
    got += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(std::string(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

std::string StoreSecretFromEnvironment() {
  const char* v = std::getenv(kStoreSecretEnv);
  return v == nullptr ? std::string() : std::string(v);
}

absl::Status CheckStoreSecret(const std::string& secret) {
  if (secret.size() <= kMaxStoreSecretBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(kStoreSecretEnv, " is ", secret.size(), " bytes, over the limit of ",
                                                 kMaxStoreSecretBytes, "; 64 hex characters are plenty"));
}

bool SecretsMatch(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;  // the length is not the secret part
  volatile uint8_t diff = 0;  // volatile: the compiler may not turn the loop into an early exit
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace tinyddp::dist
