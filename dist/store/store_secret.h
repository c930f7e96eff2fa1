// The job secret: a random string every connection to the job's TCPStore server must present in its
// first message (the hello, internal/store_protocol.h) before it may read or write a key.
//
// Who sets it. `launch` for a one-node job makes a fresh one and hands it to its workers in
// TINYDDP_STORE_SECRET. Everything else (multi-node `launch`, srun, mpirun, workers started by hand
// with env://) takes it from TINYDDP_STORE_SECRET as the user set it, the same on every node: e.g.
//   export TINYDDP_STORE_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
// With none set the store still works, open to anyone who can reach it, and the host says so once.
//
// What it stops: another user's process on a shared machine, or a stray client on the network
// (a port scanner, another job with the wrong MASTER_PORT), from reading or changing the job's keys.
// What it does not: it is sent as is, not encrypted, so someone who can watch the job's network
// traffic can read it; and a process of the same user can read it from the workers' environment.
#ifndef TINYDDP_DIST_STORE_STORE_SECRET_H_
#define TINYDDP_DIST_STORE_STORE_SECRET_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace tinyddp::dist {

inline constexpr char kStoreSecretEnv[] = "TINYDDP_STORE_SECRET";
/// Longer secrets are refused (the hello that carries one is read before the peer is trusted).
inline constexpr size_t kMaxStoreSecretBytes = 256;

/// 32 bytes from the kernel's random source, as 64 hex characters.
absl::StatusOr<std::string> GenerateStoreSecret();
/// The secret in TINYDDP_STORE_SECRET, or "" when it is unset or empty.
std::string StoreSecretFromEnvironment();
/// InvalidArgument for a secret over kMaxStoreSecretBytes.
absl::Status CheckStoreSecret(const std::string& secret);
/// Equality in time that depends only on the lengths, not on where the first difference is, so a
/// client cannot find the secret byte by byte by timing the answers.
bool SecretsMatch(const std::string& a, const std::string& b);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_STORE_STORE_SECRET_H_
