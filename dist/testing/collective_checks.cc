// The sweep: inputs every rank can recompute, local reference results, and one Check* per collective.
#include "dist/testing/collective_checks.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "dist/process_group/host_reduce.h"
#include "gtest/gtest.h"

namespace tinyddp::dist::testing {

namespace {

uint64_t Key(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t x : {a, b, c, d}) h = (h ^ x) * 1099511628211ull;
  return h;
}

std::string CaseName(const char* op_name, DType dtype, ReduceOp op, int64_t n, int world) {
  return absl::StrCat(op_name, "(", DTypeName(dtype), " [", n, "], ", ReduceOpName(op), ") on ", world, " ranks");
}

// Waits for every Work and records failures; a collective that does not finish fails the test.
void WaitAll(std::vector<std::shared_ptr<Work>>& works) {
  for (auto& w : works) {
    absl::Status s = w->Wait();
    EXPECT_TRUE(s.ok()) << w->description() << ": " << s;
  }
}

}  // namespace

double InputValue(uint64_t case_key, int rank, int64_t index, ReduceOp op, DType dtype) {
  // splitmix64's finaliser: cheap, and every bit of the inputs reaches the output.
  uint64_t z = case_key ^ (static_cast<uint64_t>(rank) << 48) ^ static_cast<uint64_t>(index);
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  if (op == ReduceOp::kProduct) {
    static const double kFactors[] = {-2, -1, 1, 2};
    return kFactors[z % 4];
  }
  if (op == ReduceOp::kAvg && !IsFloatingPoint(dtype)) return static_cast<double>(z % 9);
  return static_cast<double>(static_cast<int>(z % 17) - 8);
}

std::vector<double> RankInput(int rank, int64_t offset, int64_t n, uint64_t case_key, ReduceOp op, DType dtype) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = InputValue(case_key, rank, offset + i, op, dtype);
  return v;
}

std::vector<double> ExpectedReduction(int world, int64_t offset, int64_t n, uint64_t case_key, ReduceOp op,
                                      DType dtype) {
  std::vector<double> out = RankInput(0, offset, n, case_key, op, dtype);
  for (int r = 1; r < world; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      const double x = InputValue(case_key, r, offset + i, op, dtype);
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg: out[i] += x; break;
        case ReduceOp::kProduct: out[i] *= x; break;
        case ReduceOp::kMax: out[i] = std::max(out[i], x); break;
        case ReduceOp::kMin: out[i] = std::min(out[i], x); break;
      }
    }
  }
  if (op == ReduceOp::kAvg) {
    for (double& x : out) x = IsFloatingPoint(dtype) ? x / world : std::trunc(x / world);
  }
  return out;
}

Tensor MakeTensor(const std::vector<double>& values, DType dtype, Device device) {
  const Shape shape = {static_cast<int64_t>(values.size())};
  Tensor t;
  VisitCollectiveDType(dtype, [&](auto type) {
    using T = decltype(type);
    std::vector<T> typed(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      if constexpr (std::is_same_v<T, BFloat16>) {
        typed[i] = BFloat16(static_cast<float>(values[i]));
      } else {
        typed[i] = static_cast<T>(values[i]);
      }
    }
    t = Tensor::FromVector(typed, shape, device);
  });
  return t;
}

std::vector<double> ReadTensor(const Tensor& tensor) {
  std::vector<double> out;
  VisitCollectiveDType(tensor.dtype(), [&](auto type) {
    using T = decltype(type);
    std::vector<T> typed = tensor.ToVector<T>();
    out.resize(typed.size());
    for (size_t i = 0; i < typed.size(); ++i) {
      if constexpr (std::is_same_v<T, BFloat16>) {
        out[i] = static_cast<double>(static_cast<float>(typed[i]));
      } else {
        out[i] = static_cast<double>(typed[i]);
      }
    }
  });
  return out;
}

void ExpectValues(const std::vector<double>& got, const std::vector<double>& want, DType dtype, ReduceOp op,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  // Exact, except AVG in floating point: a division (and, in NCCL, a pre-multiplication by 1/n per rank
  // in the dtype's precision).
  double rel = 0;
  if (op == ReduceOp::kAvg && IsFloatingPoint(dtype)) {
    rel = dtype == DType::kBFloat16 ? 2e-2 : dtype == DType::kFloat32 ? 2e-6 : 1e-13;
  }
  int64_t bad = 0;
  std::string examples;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::abs(got[i] - want[i]) <= rel * (4.0 + std::abs(want[i]))) continue;
    if (++bad <= 5) absl::StrAppend(&examples, " [", i, "] got ", got[i], " want ", want[i], ";");
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements differ:" << examples;
}

// --- The sweep -------------------------------------------------------------------------------------

void CheckAllReduce(ProcessGroup& pg, const SweepOptions& o) {
  const int world = pg.size();
  for (DType dtype : o.dtypes) {
    for (ReduceOp op : o.ops) {
      std::vector<std::shared_ptr<Work>> works;
      std::vector<Tensor> tensors;
      for (int64_t n : o.sizes) {
        const uint64_t key = Key(1, static_cast<uint64_t>(dtype), static_cast<uint64_t>(op), n);
        tensors.push_back(MakeTensor(RankInput(pg.rank(), 0, n, key, op, dtype), dtype, o.device));
        works.push_back(pg.AllReduce(tensors.back(), op));
      }
      WaitAll(works);
      for (size_t c = 0; c < o.sizes.size(); ++c) {
        const int64_t n = o.sizes[c];
        const uint64_t key = Key(1, static_cast<uint64_t>(dtype), static_cast<uint64_t>(op), n);
        ExpectValues(ReadTensor(tensors[c]), ExpectedReduction(world, 0, n, key, op, dtype), dtype, op,
                     CaseName("AllReduce", dtype, op, n, world));
      }
    }
  }
}

void CheckAllReduceCoalesced(ProcessGroup& pg, const SweepOptions& o) {
  const int world = pg.size();
  for (DType dtype : o.dtypes) {
    for (ReduceOp op : o.ops) {
      // One tensor of each of the sweep's sizes, all in one collective.
      std::vector<Tensor> tensors;
      for (int64_t n : o.sizes) {
        const uint64_t key = Key(2, static_cast<uint64_t>(dtype), static_cast<uint64_t>(op), n);
        tensors.push_back(MakeTensor(RankInput(pg.rank(), 0, n, key, op, dtype), dtype, o.device));
      }
      absl::Status s = pg.AllReduceCoalesced(tensors, op)->Wait();
      ASSERT_TRUE(s.ok()) << s;
      for (size_t c = 0; c < o.sizes.size(); ++c) {
        const int64_t n = o.sizes[c];
        const uint64_t key = Key(2, static_cast<uint64_t>(dtype), static_cast<uint64_t>(op), n);
        ExpectValues(ReadTensor(tensors[c]), ExpectedReduction(world, 0, n, key, op, dtype), dtype, op,
                     CaseName("AllReduceCoalesced", dtype, op, n, world) + ", tensor " + std::to_string(c));
      }
    }
  }
}

void CheckBroadcast(ProcessGroup& pg, const SweepOptions& o) {
  const int world = pg.size();
  const int root = world - 1;  // not 0, so a root-handling bug cannot hide behind the default
  for (DType dtype : o.dtypes) {
    std::vector<std::shared_ptr<Work>> works;
    std::vector<Tensor> tensors;
    for (int64_t n : o.sizes) {
      const uint64_t key = Key(3, static_cast<uint64_t>(dtype), 0, n);
      tensors.push_back(MakeTensor(RankInput(pg.rank(), 0, n, key, ReduceOp::kSum, dtype), dtype, o.device));
      works.push_back(pg.Broadcast(tensors.back(), root));
    }
    WaitAll(works);
    for (size_t c = 0; c < o.sizes.size(); ++c) {
      const int64_t n = o.sizes[c];
      const uint64_t key = Key(3, static_cast<uint64_t>(dtype), 0, n);
      ExpectValues(ReadTensor(tensors[c]), RankInput(root, 0, n, key, ReduceOp::kSum, dtype), dtype, ReduceOp::kSum,
                   CaseName("Broadcast", dtype, ReduceOp::kSum, n, world));
    }
  }
}

void CheckAllGather(ProcessGroup& pg, const SweepOptions& o) {
  const int world = pg.size();
  for (DType dtype : o.dtypes) {
    for (int64_t n : o.sizes) {
      const uint64_t key = Key(4, static_cast<uint64_t>(dtype), 0, n);
      Tensor input = MakeTensor(RankInput(pg.rank(), 0, n, key, ReduceOp::kSum, dtype), dtype, o.device);
      Tensor output = MakeTensor(std::vector<double>(world * n, -77), dtype, o.device);
      absl::Status s = pg.AllGather(output, input)->Wait();
      ASSERT_TRUE(s.ok()) << s;
      std::vector<double> want;
      for (int r = 0; r < world; ++r) {
        std::vector<double> part = RankInput(r, 0, n, key, ReduceOp::kSum, dtype);
        want.insert(want.end(), part.begin(), part.end());
      }
      ExpectValues(ReadTensor(output), want, dtype, ReduceOp::kSum, CaseName("AllGather", dtype, ReduceOp::kSum, n, world));
    }
  }
}

void CheckReduceScatter(ProcessGroup& pg, const SweepOptions& o) {
  const int world = pg.size();
  for (DType dtype : o.dtypes) {
    for (ReduceOp op : o.ops) {
      for (int64_t n : o.sizes) {  // n = elements each rank ends with; the input holds world * n
        const uint64_t key = Key(5, static_cast<uint64_t>(dtype), static_cast<uint64_t>(op), n);
        Tensor input = MakeTensor(RankInput(pg.rank(), 0, world * n, key, op, dtype), dtype, o.device);
        Tensor output = MakeTensor(std::vector<double>(n, -77), dtype, o.device);
        absl::Status s = pg.ReduceScatter(output, input, op)->Wait();
        ASSERT_TRUE(s.ok()) << s;
        ExpectValues(ReadTensor(output), ExpectedReduction(world, pg.rank() * n, n, key, op, dtype), dtype, op,
                     CaseName("ReduceScatter", dtype, op, n, world));
      }
    }
  }
}

void CheckReduce(ProcessGroup& pg, const SweepOptions& o) {
  const int world = pg.size();
  int case_index = 0;
  for (DType dtype : o.dtypes) {
    for (ReduceOp op : o.ops) {
      for (int64_t n : o.sizes) {
        const int root = case_index++ % world;  // every rank serves as the root somewhere in the sweep
        const uint64_t key = Key(6, static_cast<uint64_t>(dtype), static_cast<uint64_t>(op), n);
        std::vector<double> mine = RankInput(pg.rank(), 0, n, key, op, dtype);
        Tensor tensor = MakeTensor(mine, dtype, o.device);
        absl::Status s = pg.Reduce(tensor, root, op)->Wait();
        ASSERT_TRUE(s.ok()) << s;
        // The root holds the reduction; every other rank still holds its own input.
        std::vector<double> want = pg.rank() == root ? ExpectedReduction(world, 0, n, key, op, dtype) : mine;
        ExpectValues(ReadTensor(tensor), want, dtype, op,
                     CaseName("Reduce", dtype, op, n, world) + " root " + std::to_string(root));
      }
    }
  }
}

}  // namespace tinyddp::dist::testing
