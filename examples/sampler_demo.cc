// sampler_demo: the DDP data bug learners meet most, made visible. DistributedSampler
// (data/distributed_sampler.h) shuffles with a permutation drawn from (seed + epoch). A training loop that
// never calls SetEpoch (PyTorch: sampler.set_epoch(epoch)) leaves the epoch at 0, so every epoch reads the
// examples in the same order on every rank: the shuffle happens once, not once per epoch.
//
//   ./bazelw run //examples:sampler_demo
//
// No process group is needed: a rank's indices depend only on the dataset's size, the number of ranks,
// the rank, the seed and the epoch, never on the other ranks. So this one process builds, in turn, the
// sampler each of 2 ranks would build over 16 examples, and prints what each rank reads in epochs 0 and 1:
// first forgetting SetEpoch, then calling it before each epoch (what DataLoader::Reset(epoch) does). The
// verdict lines are computed from the indices, not written in advance.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "absl/strings/str_join.h"
#include "data/distributed_sampler.h"

namespace tinyddp {
namespace {

constexpr int64_t kExamples = 16;
constexpr int64_t kRanks = 2;
constexpr int64_t kEpochs = 2;

// indices[epoch][rank]: what each rank reads in each epoch.
using Reads = std::vector<std::vector<std::vector<int64_t>>>;

// Builds every rank's sampler as that rank would, and walks the epochs, calling SetEpoch or not.
Reads ReadEpochs(bool call_set_epoch) {
  Reads reads(kEpochs, std::vector<std::vector<int64_t>>(kRanks));
  for (int64_t rank = 0; rank < kRanks; ++rank) {
    data::DistributedSampler sampler =
        data::DistributedSampler::Create(kExamples, {.num_replicas = kRanks, .rank = rank, .shuffle = true})
            .value();  // the sizes above are valid
    for (int64_t epoch = 0; epoch < kEpochs; ++epoch) {
      if (call_set_epoch) sampler.SetEpoch(epoch);  // the one line the bug leaves out
      reads[epoch][rank] = sampler.Indices();
    }
  }
  return reads;
}

// True when, in every epoch, the ranks' indices are disjoint and together are every example once.
bool EveryEpochSplitsTheDataset(const Reads& reads) {
  for (const auto& epoch : reads) {
    std::vector<int64_t> all;
    for (const auto& rank : epoch) all.insert(all.end(), rank.begin(), rank.end());
    std::sort(all.begin(), all.end());
    if (all.size() != static_cast<size_t>(kExamples)) return false;
    for (int64_t i = 0; i < kExamples; ++i) {
      if (all[i] != i) return false;
    }
  }
  return true;
}

void Print(const char* title, const Reads& reads) {
  std::printf("%s\n", title);
  for (int64_t epoch = 0; epoch < kEpochs; ++epoch) {
    for (int64_t rank = 0; rank < kRanks; ++rank) {
      std::printf("  epoch %lld, rank %lld reads: [%s]\n", static_cast<long long>(epoch),
                  static_cast<long long>(rank), absl::StrJoin(reads[epoch][rank], ", ").c_str());
    }
  }
  const bool same = reads[0] == reads[1];
  std::printf("  -> epoch 1 %s\n", same ? "repeats epoch 0 exactly, on every rank: the data is shuffled once, not "
                                          "once per epoch"
                                        : "is a new shuffle of the data");
  if (EveryEpochSplitsTheDataset(reads)) {
    std::printf("  -> in each epoch the ranks read disjoint halves that cover all %lld examples\n",
                static_cast<long long>(kExamples));
  } else {
    std::printf("  -> in some epoch the ranks' indices overlap (this should never happen)\n");
  }
}

int Run() {
  std::printf("DistributedSampler over %lld examples, %lld ranks, shuffle on, seed 0\n\n",
              static_cast<long long>(kExamples), static_cast<long long>(kRanks));
  Print("Without SetEpoch (the epoch stays 0):", ReadEpochs(/*call_set_epoch=*/false));
  std::printf("\n");
  Print("With SetEpoch(epoch) before each epoch (DataLoader::Reset(epoch) calls it for you):",
        ReadEpochs(/*call_set_epoch=*/true));
  return 0;
}

}  // namespace
}  // namespace tinyddp

int main() { return tinyddp::Run(); }
