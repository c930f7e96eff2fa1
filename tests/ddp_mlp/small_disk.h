// A small or read-only file system for the tests that run ddp_mlp against a full disk: a tmpfs mounted in a
// mount namespace of the test process's own, which the processes it starts inherit and nothing outside sees.
#ifndef TINYDDP_TESTS_DDP_MLP_SMALL_DISK_H_
#define TINYDDP_TESTS_DDP_MLP_SMALL_DISK_H_

#include <cstddef>
#include <string>

namespace tinyddp::testing {

/// Mounts a tmpfs of `bytes` at `dir` (created if missing; read-only if asked). Returns "" when mounted,
/// else why it cannot be (no CAP_SYS_ADMIN, no mount namespaces), for GTEST_SKIP.
std::string MountTmpfs(const std::string& dir, size_t bytes, bool read_only);

}  // namespace tinyddp::testing

#endif  // TINYDDP_TESTS_DDP_MLP_SMALL_DISK_H_
