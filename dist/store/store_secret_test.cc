// The job secret's policy, as the launcher applies it (JobStoreSecret): a multi-node job without a
// secret is refused with instructions, a one-node job gets a fresh one, and a user's secret is used as is.
#include "dist/store/store_secret.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

TEST(JobStoreSecret, AMultiNodeLaunchWithoutOneIsRefusedAndToldHowToMakeOneAndHandItToEveryNode) {
  for (int nnodes : {2, 3}) {
    auto secret = JobStoreSecret(nnodes, "");
    ASSERT_FALSE(secret.ok());
    EXPECT_TRUE(absl::IsFailedPrecondition(secret.status())) << secret.status();
    const std::string message(secret.status().message());
    for (const char* says : {"--nnodes=", "is not set", "export TINYDDP_STORE_SECRET=$(openssl rand -hex 32)",
                             "sbatch", "srun", "Kubernetes", "Secret", "every node", "docs/security.md"}) {
      EXPECT_TRUE(absl::StrContains(message, says)) << "missing '" << says << "' in: " << message;
    }
  }
}

TEST(JobStoreSecret, AOneNodeJobWithoutOneGetsAFreshSecretEachTime) {
  auto first = JobStoreSecret(1, "");
  auto second = JobStoreSecret(1, "");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->size(), 64u) << *first;
  EXPECT_NE(*first, *second);
}

TEST(JobStoreSecret, TheUsersSecretIsUsedAsSetWhateverItsLength) {
  EXPECT_EQ(*JobStoreSecret(2, "x"), "x");
  EXPECT_EQ(*JobStoreSecret(1, "mine"), "mine");
  const std::string long_one(5000, 's');
  EXPECT_EQ(*JobStoreSecret(8, long_one), long_one);
}

}  // namespace
}  // namespace tinyddp::dist
