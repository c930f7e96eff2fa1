// The job secret: what every connection to the job's TCPStore server must prove it knows before it may
// read or write a key, and what the server must prove it knows before a client trusts it. The proof is
// a challenge-response (internal/store_protocol.h): the secret itself never crosses the network.
//
// Who sets it: `launch` makes a fresh one for a one-node job and hands it to its workers in
// TINYDDP_STORE_SECRET; everything else (multi-node `launch`, srun, mpirun, env:// by hand) takes it from
// TINYDDP_STORE_SECRET as the user set it, the same on every node (`openssl rand -hex 32`). A multi-node
// `launch` without one refuses to start (JobStoreSecret); a store without one admits anyone.
//
// It stops a stranger who can reach the port (another user, a port scanner, another job with the wrong
// MASTER_PORT) from reading or changing the job's keys, and a rank from joining another job's store. It
// does not encrypt: values travel in the clear, and someone who can alter traffic can take over a
// connection after its handshake. docs/security.md says what follows.
#ifndef TINYDDP_DIST_STORE_STORE_SECRET_H_
#define TINYDDP_DIST_STORE_STORE_SECRET_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace tinyddp::dist {

inline constexpr char kStoreSecretEnv[] = "TINYDDP_STORE_SECRET";
/// Shorter secrets work, with a warning: a guessable secret can be found from one captured handshake.
inline constexpr size_t kShortStoreSecretBytes = 16;

/// 32 bytes from the kernel's random source, as 64 hex characters.
absl::StatusOr<std::string> GenerateStoreSecret();
/// The secret in TINYDDP_STORE_SECRET, or "" when it is unset or empty.
std::string StoreSecretFromEnvironment();
/// The secret a launcher of `nnodes` nodes gives its store and workers: `from_environment` when set;
/// else, for one node, a fresh one (GenerateStoreSecret). Several nodes without one: FailedPrecondition,
/// saying how to make one and hand it to every node (sbatch and srun, Kubernetes).
absl::StatusOr<std::string> JobStoreSecret(int nnodes, const std::string& from_environment);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_STORE_STORE_SECRET_H_
