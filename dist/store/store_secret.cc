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
  uint8_t bytes[32];  // up to 256 bytes come whole; only the wait for the kernel's pool at boot is interruptible
  ssize_t got;
  while ((got = ::getrandom(bytes, sizeof(bytes), 0)) < 0 && errno == EINTR) {
  }
  if (got != sizeof(bytes)) return absl::InternalError("getrandom() failed: cannot make a job secret for the store");
  return absl::BytesToHexString(std::string(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

std::string StoreSecretFromEnvironment() {
  const char* v = std::getenv(kStoreSecretEnv);
  return v == nullptr ? std::string() : std::string(v);
}

absl::StatusOr<std::string> JobStoreSecret(int nnodes, const std::string& from_environment) {
  if (!from_environment.empty()) return from_environment;
  if (nnodes == 1) return GenerateStoreSecret();  // handed to this node's workers only
  return absl::FailedPreconditionError(absl::StrCat(
      "--nnodes=", nnodes, " needs a job secret and ", kStoreSecretEnv, " is not set: without one, anyone who "
      "can reach the store's port could join, read or stop this job. Make one and give every node the same:\n"
      "    export ", kStoreSecretEnv, "=$(openssl rand -hex 32)\n"
      "in the sbatch script before `srun` (srun passes the environment on to every node), or, on Kubernetes, "
      "a Secret exposed to every pod as the environment variable ", kStoreSecretEnv,
      ". One-node jobs need none (launch makes one). See docs/security.md."));
}

}  // namespace tinyddp::dist
