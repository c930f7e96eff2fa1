// DistributedSampler: PyTorch's size formulas, padding and striding, over our own permutation.
#include "data/distributed_sampler.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace tinyddp::data {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): a tiny generator whose every output is a good hash of a counter.
// Enough for shuffling; what matters here is that every rank computes the same sequence.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, bound), bound > 0. Rejects the top sliver of the 64-bit range that would make
  /// `% bound` favour small values.
  uint64_t Below(uint64_t bound) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do {
      x = Next();
    } while (x >= limit);
    return x % bound;
  }

 private:
  uint64_t state_;
};

}  // namespace

std::vector<int64_t> RandomPermutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  SplitMix64 rng(seed);
  for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates: p[i] takes a uniform pick of p[0..i]
    std::swap(p[i], p[rng.Below(static_cast<uint64_t>(i) + 1)]);
  }
  return p;
}

absl::StatusOr<DistributedSampler> DistributedSampler::Create(int64_t dataset_size,
                                                              const DistributedSamplerOptions& options) {
  if (dataset_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat("DistributedSampler: dataset size ", dataset_size, " < 0"));
  }
  if (options.num_replicas < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DistributedSampler: num_replicas must be at least 1, got ", options.num_replicas));
  }
  if (options.rank < 0 || options.rank >= options.num_replicas) {
    return absl::InvalidArgumentError(absl::StrCat("DistributedSampler: invalid rank ", options.rank,
                                                   ", rank should be in the interval [0, ",
                                                   options.num_replicas - 1, "]"));
  }
  const int64_t n = dataset_size, r = options.num_replicas;
  // PyTorch: ceil((N - R) / R) when dropping an uneven tail. With N = q*R + m, 0 < m < R, that is q
  // (and 0 when N < R), i.e. N / R in integer division, the largest count every rank can fill.
  const int64_t num_samples = (options.drop_last && n % r != 0) ? n / r : (n + r - 1) / r;
  if (!options.pad && !options.drop_last) {
    // No padding: the global list is the N real examples, and rank r holds positions r, r + R, ... < N.
    const int64_t rank = options.rank;
    const int64_t mine = n > rank ? (n - rank + r - 1) / r : 0;
    return DistributedSampler(dataset_size, options, mine, n);
  }
  return DistributedSampler(dataset_size, options, num_samples, num_samples * r);
}

int64_t DistributedSampler::num_real_samples() const {
  // Rank r holds global positions r, r + R, ...; those below N are real examples.
  const int64_t n = dataset_size_, r = options_.num_replicas, rank = options_.rank;
  const int64_t below_n = n > rank ? (n - rank + r - 1) / r : 0;
  return std::min(num_samples_, below_n);
}

std::vector<int64_t> DistributedSampler::Indices() const {
  const int64_t n = dataset_size_, r = options_.num_replicas, total = total_size();
  std::vector<int64_t> global;
  if (options_.shuffle) {
    // seed + epoch, as PyTorch's g.manual_seed(self.seed + self.epoch): every rank agrees on it.
    global = RandomPermutation(n, options_.seed + static_cast<uint64_t>(epoch_));
  } else {
    global.resize(n);
    std::iota(global.begin(), global.end(), 0);
  }
  if (total > n) {
    // Pad by repeating from the front, wrapping as often as needed (PyTorch's
    // indices += (indices * ceil(padding / len))[:padding]). n > 0 here, since total > n >= 0.
    global.reserve(total);
    for (int64_t i = n; i < total; ++i) global.push_back(global[i % n]);
  } else {
    global.resize(total);  // drop_last: cut the tail so it divides evenly (pad = false: total == n, no cut)
  }
  std::vector<int64_t> mine;
  mine.reserve(num_samples_);
  for (int64_t i = options_.rank; i < total; i += r) mine.push_back(global[i]);
  return mine;
}

}  // namespace tinyddp::data
