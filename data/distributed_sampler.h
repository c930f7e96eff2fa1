// DistributedSampler: which dataset indices each rank reads in an epoch, with the exact semantics of
// PyTorch's torch.utils.data.distributed.DistributedSampler, so a training script ports one to one.
//
// Sits between a Dataset (only its size matters) and the DataLoader (data_loader.h), which turns this
// rank's index list into batches. Every rank builds the same sampler with its own `rank`; each gets
// num_samples() indices per epoch, so every rank runs the same number of steps and DDP's collectives
// line up (unless pad = false, below).
//
// One epoch, for N examples and R replicas (as in PyTorch):
//   num_samples = drop_last && N % R != 0 ? ceil((N - R) / R) : ceil(N / R)      (== N / R in the first case)
//   total_size  = num_samples * R
//   indices     = shuffle ? permutation of [0, N) drawn from (seed + epoch) : [0, 1, ..., N-1]
//   drop_last:   indices = indices[:total_size]                       (the tail is dropped)
//   otherwise:   indices += indices repeated from the front, cyclically, up to total_size
//   this rank:   indices[rank : total_size : R]
//
// pad = false (not in PyTorch's sampler; what training with uneven inputs wants, docs/uneven_inputs.md):
// nothing is repeated, so no example is seen twice in an epoch. Rank r reads indices[r : N : R], the real
// examples only: ranks get ceil(N / R) or floor(N / R) of them, at most one apart, and may run different
// numbers of steps. DDP alone would then hang at the end of the epoch (the rank with the extra batch waits
// in an all_reduce nobody else joins); the training loop must use dist/parallel/join/join.h. With
// drop_last the shards are already equal and nothing is padded, so `pad` changes nothing there.
//
// The permutation is identical on every rank (it depends only on seed + epoch), which is what makes the
// rank shards disjoint. It is our own generator (splitmix64 + Fisher-Yates), NOT torch.randperm: the
// sizes, padding and striding match PyTorch exactly, the shuffled order does not.
#ifndef TINYDDP_DATA_DISTRIBUTED_SAMPLER_H_
#define TINYDDP_DATA_DISTRIBUTED_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace tinyddp::data {

struct DistributedSamplerOptions {
  int64_t num_replicas = 1;  // world size
  int64_t rank = 0;          // in [0, num_replicas)
  bool shuffle = true;
  uint64_t seed = 0;         // must be the same on every rank
  bool drop_last = false;
  /// true (PyTorch): repeat examples from the front until every rank has num_samples() indices.
  /// false: every rank gets only its own real examples (counts differ by at most one across ranks).
  bool pad = true;
};

/// Not thread-safe (SetEpoch mutates); cheap to copy.
class DistributedSampler {
 public:
  /// InvalidArgument unless dataset_size >= 0, num_replicas >= 1 and 0 <= rank < num_replicas.
  static absl::StatusOr<DistributedSampler> Create(int64_t dataset_size, const DistributedSamplerOptions& options);

  /// Selects the shuffle of the coming epoch. Call it before each epoch, as in PyTorch, or every epoch
  /// repeats the order of epoch 0.
  void SetEpoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  /// This rank's indices for the current epoch: num_samples() of them, each in [0, dataset_size).
  std::vector<int64_t> Indices() const;

  /// Indices of this rank per epoch (PyTorch's len(sampler)): the same on every rank, except with
  /// pad = false (and no drop_last), where it is this rank's count of real examples.
  int64_t num_samples() const { return num_samples_; }
  /// The length of the global index list the ranks' shards are cut from: num_samples() * num_replicas
  /// when padded or truncated, dataset_size() with pad = false.
  int64_t total_size() const { return total_size_; }
  /// How many of this rank's indices are real rather than padding. Padding fills the tail of the
  /// global list, so these are the first ones of Indices(); summed over ranks they count every example
  /// once (without drop_last). An evaluation uses it to count each test example exactly once.
  int64_t num_real_samples() const;
  int64_t dataset_size() const { return dataset_size_; }
  const DistributedSamplerOptions& options() const { return options_; }

 private:
  DistributedSampler(int64_t dataset_size, const DistributedSamplerOptions& options, int64_t num_samples,
                     int64_t total_size)
      : dataset_size_(dataset_size), options_(options), num_samples_(num_samples), total_size_(total_size) {}
  int64_t dataset_size_;
  DistributedSamplerOptions options_;
  int64_t num_samples_;
  int64_t total_size_;
  int64_t epoch_ = 0;
};

/// A permutation of [0, n) that depends only on `seed` (Fisher-Yates driven by splitmix64, with
/// unbiased bounded draws). Identical on every machine and compiler.
std::vector<int64_t> RandomPermutation(int64_t n, uint64_t seed);

}  // namespace tinyddp::data

#endif  // TINYDDP_DATA_DISTRIBUTED_SAMPLER_H_
