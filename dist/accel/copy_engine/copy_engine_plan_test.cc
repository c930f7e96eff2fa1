// The copy-engine all_reduce's schedule on the CPU (copy_engine_plan.h): the split and the chunks, the
// sequence numbers, and the protocol itself, run by two simulated ranks under thousands of random
// interleavings of their streams. Each rank has its flags, its IN and OUT scratch, its buckets, its
// events and four FIFO streams (the plan's three and the caller's compute stream). A scheduler picks, at
// random, one stream whose next operation may run (its wait is satisfied) and runs that operation; any
// order in which a GPU could execute the enqueued work is one of these runs. The sums must be exact in
// every run, and dropping any one of the reuse rules must make some run wrong (the simulation has teeth).
#include "dist/accel/copy_engine/copy_engine_plan.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tinyddp::dist::copy_engine {
namespace {

// Small chunks, so that a call of ~100 elements already has 1 to 4 chunks per half.
constexpr PlanOptions kSmall{/*min_chunk=*/8, /*align=*/4};

// --- The split and the chunks ----------------------------------------------------------------------

TEST(CopyEnginePlan, SplitGivesRankZeroTheLargerAlignedHalf) {
  const PlanOptions real;
  for (int64_t n : {int64_t{1}, int64_t{63}, int64_t{64}, int64_t{129}, int64_t{3000017}, int64_t{16} << 20}) {
    const int64_t split = SplitPoint(n, real);
    EXPECT_TRUE(split == n || split % 64 == 0) << n;
    EXPECT_GE(split, n - split) << n;
    EXPECT_LE(split - (n - split), 2 * 64) << n;
  }
}

TEST(CopyEnginePlan, ChunksAreEvenAlignedAtMostFourAndCoverTheHalfExactly) {
  const PlanOptions real;
  const int64_t mi = int64_t{1} << 20;
  // (length, chunks): below 2 Mi one chunk, then one per whole Mi up to four.
  const std::map<int64_t, int> want = {{1, 1}, {mi - 1, 1}, {2 * mi - 1, 1}, {2 * mi, 2},
                                       {3 * mi + 17, 3}, {4 * mi, 4}, {16 * mi + 5, 4}};
  for (const auto& [len, count] : want) {
    const Range half{1000, 1000 + len};
    const Chunks c = ChunksOf(half, real);
    ASSERT_EQ(c.count, count) << len;
    int64_t at = half.lo;
    for (int j = 0; j < c.count; ++j) {
      EXPECT_EQ(c.chunk[j].lo, at) << len << " chunk " << j;
      if (j + 1 < c.count) {
        EXPECT_EQ(c.chunk[j].size() % 64, 0) << len << " chunk " << j;
        EXPECT_EQ(c.chunk[j].size(), c.chunk[0].size()) << len << " chunk " << j;
      }
      at = c.chunk[j].hi;
    }
    EXPECT_EQ(at, half.hi) << len;
  }
  EXPECT_EQ(ChunksOf(Range{5, 5}, real).count, 0);
}

// Rank 0 sends rank 1's half in the very chunks rank 1 reduces, under the same DATA flags, and the other
// way round; every signal and wait of call k carries k (or k - 1 for the reuse waits).
TEST(CopyEnginePlan, BothRanksCutEachHalfAlikeAndSignalTheCallsSequenceNumber) {
  Planner p0(0, kSmall), p1(1, kSmall);
  for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{37}, int64_t{100}, int64_t{333}}) {
    const std::vector<Op> a = p0.Next(n, {}, false), b = p1.Next(n, {}, false);
    const uint32_t seq = p0.seq();
    ASSERT_EQ(seq, p1.seq());
    // What `from` sends into the peer's IN, keyed by DATA flag: (position in the half, count).
    auto sent = [](const std::vector<Op>& ops) {
      std::map<int, std::pair<int64_t, int64_t>> out;
      for (size_t i = 0; i + 1 < ops.size(); ++i) {
        if (ops[i].kind == Op::Kind::kCopy && ops[i].dst == Memory::kPeerIn) {
          out[ops[i + 1].index - kDataFlag] = {ops[i].dst_at, ops[i].count};
        }
      }
      return out;
    };
    auto reduced = [](const std::vector<Op>& ops) {
      std::map<int, std::pair<int64_t, int64_t>> out;
      int flag = -1;
      for (const Op& op : ops) {
        if (op.kind == Op::Kind::kWaitFlag && op.stream == PlanStream::kHelper) flag = op.index - kDataFlag;
        if (op.kind == Op::Kind::kReduce) out[flag] = {op.src_at, op.count};
      }
      return out;
    };
    EXPECT_EQ(sent(a), reduced(b)) << "n=" << n;
    EXPECT_EQ(sent(b), reduced(a)) << "n=" << n;
    for (const std::vector<Op>* ops : {&a, &b}) {
      for (const Op& op : *ops) {
        if (op.kind == Op::Kind::kSignal) {
          EXPECT_EQ(op.value, seq) << "n=" << n;
        }
        if (op.kind == Op::Kind::kWaitFlag) {
          EXPECT_TRUE(op.value == seq || op.value == seq - 1) << "n=" << n;
        }
      }
    }
  }
}

// --- A simulated pair of ranks ----------------------------------------------------------------------

// A plan rule the simulation can drop, to show that a run then goes wrong.
enum class Drop { kNothing, kInReuseWait, kOutReuseWait, kTwoInFlight, kOverlapWait };

bool Dropped(Drop drop, const Op& op, uint32_t seq) {
  switch (drop) {
    case Drop::kNothing: return false;
    case Drop::kInReuseWait:
      return op.kind == Op::Kind::kWaitFlag && op.stream == PlanStream::kCopies && op.index != kFreeFlag;
    case Drop::kOutReuseWait: return op.kind == Op::Kind::kWaitFlag && op.index == kFreeFlag;
    case Drop::kTwoInFlight:
      return op.kind == Op::Kind::kWaitEvent && op.stream == PlanStream::kCopies && op.index == Planner::EndEvent(seq);
    case Drop::kOverlapWait:
      return op.kind == Op::Kind::kWaitEvent && op.stream == PlanStream::kCopies &&
             op.index == Planner::EndEvent(seq - 1);
  }
  return false;
}

constexpr int kCompute = kNumPlanStreams;  // the caller's stream, after the plan's three

class Sim {
 public:
  using Buffer = std::vector<float>;

  Sim(int64_t scratch, uint64_t seed, Drop drop) : seed_(seed), rng_(seed), drop_(drop) {
    for (int r = 0; r < 2; ++r) {
      ranks_[r].in.assign(scratch, 0);
      ranks_[r].out.assign(scratch, 0);
      ranks_[r].flags.assign(kNumFlags, 0);
      ranks_[r].planner = std::make_unique<Planner>(r, kSmall);
    }
  }

  // The caller's compute stream.
  void Fill(int rank, Buffer* b, std::function<float(int64_t)> value) {
    Push(rank, kCompute, [b, value] { for (size_t i = 0; i < b->size(); ++i) (*b)[i] = value(i); });
  }
  void Accumulate(int rank, Buffer* sum, const Buffer* b) {
    Push(rank, kCompute, [sum, b] { for (size_t i = 0; i < b->size(); ++i) (*sum)[i] += (*b)[i]; });
  }
  // The caller's stream waits for call `call` of `rank` (Work::SynchronizeStream).
  void WaitForCall(int rank, int call) { PushWaitEvent(rank, kCompute, DoneEvent(call)); }

  // One all_reduce of `mine` (`peers` is the peer's tensor of the same call, used by direct calls), as
  // ProcessGroupNCCL issues it: the copies stream first waits for the compute stream. Returns its number.
  int AllReduce(int rank, Buffer* mine, Buffer* peers, bool direct, float scale) {
    Rank& r = ranks_[rank];
    const int call = r.calls++;
    const int ready = 1000 + call;
    PushRecord(rank, kCompute, ready);
    PushWaitEvent(rank, static_cast<int>(PlanStream::kCopies), ready);
    const uintptr_t lo = reinterpret_cast<uintptr_t>(mine->data());
    const ByteRange range{lo, lo + mine->size() * sizeof(float)};
    const std::vector<Op>& plan = r.planner->Next(static_cast<int64_t>(mine->size()), {range}, direct);
    const uint32_t seq = r.planner->seq();
    for (const Op& op : plan) {
      if (Dropped(drop_, op, seq)) continue;
      const int stream = static_cast<int>(op.stream);
      const int event = op.index == kDoneEvent ? DoneEvent(call) : op.index;
      switch (op.kind) {
        case Op::Kind::kRecord: PushRecord(rank, stream, event); break;
        case Op::Kind::kWaitEvent: PushWaitEvent(rank, stream, event); break;
        case Op::Kind::kWaitFlag: {
          const int index = op.index;
          const uint32_t value = op.value;
          Push(rank, stream, nullptr, [&r, index, value] { return static_cast<int32_t>(r.flags[index] - value) >= 0; });
          break;
        }
        case Op::Kind::kSignal: {
          Rank& peer = ranks_[1 - rank];
          const int index = op.index;
          const uint32_t value = op.value;
          Push(rank, stream, [&peer, index, value] { peer.flags[index] = value; });
          break;
        }
        case Op::Kind::kCopy: {
          float* dst = Resolve(rank, op.dst, mine, peers) + op.dst_at;
          const float* src = Resolve(rank, op.src, mine, peers) + op.src_at;
          const int64_t count = op.count;
          Push(rank, stream, [dst, src, count] { std::memcpy(dst, src, count * sizeof(float)); });
          break;
        }
        case Op::Kind::kReduce: {
          float* dst = Resolve(rank, op.dst, mine, peers) + op.dst_at;
          const float* src = Resolve(rank, op.src, mine, peers) + op.src_at;
          const int64_t count = op.count;
          Push(rank, stream, [dst, src, count, scale] {
            for (int64_t i = 0; i < count; ++i) dst[i] = (dst[i] + src[i]) * scale;
          });
          break;
        }
      }
    }
    return call;
  }

  // Runs operations in a random order until no stream can move. True when every stream is empty (false:
  // some wait can never be satisfied, a deadlock). Odd seeds pick uniformly among the streams that can
  // move; even seeds give the eight streams random priorities, always run the most urgent one that can
  // move and now and then reshuffle one priority (PCT-style), which starves a stream for long stretches:
  // the orders that expose a missing wait are rarely reached by uniform choice.
  bool Run() {
    const bool by_priority = seed_ % 2 == 0;
    std::vector<int> priority(8);
    for (int i = 0; i < 8; ++i) priority[i] = i;
    std::shuffle(priority.begin(), priority.end(), rng_);
    std::uniform_int_distribution<int> percent(0, 99), stream_of(0, 7);
    for (;;) {
      std::vector<std::pair<int, int>> runnable;
      for (int r = 0; r < 2; ++r) {
        for (int s = 0; s < 4; ++s) {
          const auto& q = ranks_[r].streams[s];
          if (q.size() > ranks_[r].head[s] && (!q[ranks_[r].head[s]].ready || q[ranks_[r].head[s]].ready())) {
            runnable.push_back({r, s});
          }
        }
      }
      if (runnable.empty()) break;
      std::pair<int, int> pick = runnable[std::uniform_int_distribution<size_t>(0, runnable.size() - 1)(rng_)];
      if (by_priority) {
        for (const auto& c : runnable) {
          if (priority[c.first * 4 + c.second] > priority[pick.first * 4 + pick.second]) pick = c;
        }
        if (percent(rng_) < 5) priority[stream_of(rng_)] = percent(rng_) - 50;
      }
      const Step& step = ranks_[pick.first].streams[pick.second][ranks_[pick.first].head[pick.second]++];
      if (step.run) step.run();
    }
    for (int r = 0; r < 2; ++r) {
      for (int s = 0; s < 4; ++s) {
        if (ranks_[r].head[s] < ranks_[r].streams[s].size()) return false;
      }
    }
    return true;
  }

  // What the process group's watchdog does to a rank whose peer died: every flag far ahead.
  void Release(int rank) {
    Rank& r = ranks_[rank];
    for (uint32_t& f : r.flags) f = r.planner->ReleaseValue();
  }

 private:
  struct Step {
    std::function<void()> run;     // what the operation does (may be empty: a pure wait)
    std::function<bool()> ready;   // whether it may run now (empty: always)
  };
  struct Event {
    uint64_t recorded = 0;   // recordings enqueued so far
    uint64_t completed = 0;  // the latest recording that has run
  };
  struct Rank {
    Buffer in, out;
    std::vector<uint32_t> flags;
    std::unique_ptr<Planner> planner;
    std::map<int, Event> events;
    std::vector<Step> streams[4];
    size_t head[4] = {0, 0, 0, 0};
    int calls = 0;
  };

  static int DoneEvent(int call) { return 100000 + call; }

  void Push(int rank, int stream, std::function<void()> run, std::function<bool()> ready = nullptr) {
    ranks_[rank].streams[stream].push_back(Step{std::move(run), std::move(ready)});
  }
  void PushRecord(int rank, int stream, int event) {
    Event& e = ranks_[rank].events[event];
    const uint64_t gen = ++e.recorded;
    Push(rank, stream, [&e, gen] { e.completed = std::max(e.completed, gen); });
  }
  // As cudaStreamWaitEvent: waits for the recording enqueued last before this wait (none: no wait).
  void PushWaitEvent(int rank, int stream, int event) {
    Event& e = ranks_[rank].events[event];
    const uint64_t gen = e.recorded;
    Push(rank, stream, nullptr, [&e, gen] { return e.completed >= gen; });
  }
  float* Resolve(int rank, Memory m, Buffer* mine, Buffer* peers) {
    Rank& me = ranks_[rank];
    Rank& peer = ranks_[1 - rank];
    switch (m) {
      case Memory::kTensors: return mine->data();
      case Memory::kIn: return me.in.data();
      case Memory::kOut: return me.out.data();
      case Memory::kPeerIn: return peer.in.data();
      case Memory::kPeerOut: return peer.out.data();
      case Memory::kPeerTensors: return peers->data();
    }
    return nullptr;
  }

  const uint64_t seed_;
  std::mt19937_64 rng_;
  const Drop drop_;
  Rank ranks_[2];
};

// Values of rank r whose sums and halves are exact in float32.
float Value(int rank, int64_t i, int salt) {
  return rank == 0 ? static_cast<float>((i * 7 + salt) % 1024) : 0.5f * static_cast<float>((i + salt) % 13) - 3.0f;
}

// DDP's pattern: each step the compute stream writes every bucket ((rank + 1) * (step + 1) + b) and the
// bucket's all_reduce is issued at once, without waiting; at the end of the step (FinalizeBackward) the
// compute stream waits for every bucket and adds it into that bucket's sum. Buckets of odd sizes, some
// registered (direct), so calls of 1 to 4 chunks and both kinds pipeline behind each other. Returns an
// empty string when every sum is exact, else what went wrong.
std::string RunLikeDdpBackward(uint64_t seed, Drop drop) {
  const std::vector<int64_t> sizes = {37, 5, 131, 64, 1};
  const std::vector<bool> direct = {true, false, false, true, false};
  const int steps = 4;
  Sim sim(/*scratch=*/200, seed, drop);
  std::vector<Sim::Buffer> buckets[2], sums[2];
  for (int r = 0; r < 2; ++r) {
    for (int64_t n : sizes) {
      buckets[r].emplace_back(n, 0.0f);
      sums[r].emplace_back(n, 0.0f);
    }
  }
  for (int step = 0; step < steps; ++step) {
    std::vector<int> calls[2];
    for (size_t b = 0; b < sizes.size(); ++b) {
      for (int r = 0; r < 2; ++r) {
        const float v = (r + 1.0f) * (step + 1) + static_cast<float>(b);
        sim.Fill(r, &buckets[r][b], [v](int64_t) { return v; });
        calls[r].push_back(sim.AllReduce(r, &buckets[r][b], &buckets[1 - r][b], direct[b], 1.0f));
      }
    }
    for (int r = 0; r < 2; ++r) {
      for (size_t b = 0; b < sizes.size(); ++b) {
        sim.WaitForCall(r, calls[r][b]);
        sim.Accumulate(r, &sums[r][b], &buckets[r][b]);
      }
    }
  }
  if (!sim.Run()) return "deadlock";
  for (int r = 0; r < 2; ++r) {
    for (size_t b = 0; b < sizes.size(); ++b) {
      const float want = 3.0f * steps * (steps + 1) / 2 + 2.0f * static_cast<float>(b) * steps;
      for (int64_t i = 0; i < sizes[b]; ++i) {
        if (sums[r][b][i] != want) {
          return absl::StrCat("rank ", r, " bucket ", b, " element ", i, ": ", sums[r][b][i], " instead of ", want);
        }
      }
    }
  }
  return "";
}

// Calls queued back to back on the same tensors, the compute stream waiting only at the very end: each
// call must still see the previous calls' results, as if all ran on one stream. Between two calls on t
// come calls on u, on a registered buffer w (direct: no OUT, so no FREE to wait for) and on a single
// element x (the peer's half is empty: nothing to wait for before writing its IN). t is summed five
// times (16 (a + c)), u summed then averaged with itself (a' + c'), w and x summed once.
std::string RunQueuedWithoutWaiting(uint64_t seed, Drop drop) {
  Sim sim(/*scratch=*/200, seed, drop);
  std::vector<Sim::Buffer> t(2), u(2), w(2), x(2);
  const std::vector<std::pair<std::vector<Sim::Buffer>*, int64_t>> tensors = {{&t, 101}, {&u, 37}, {&w, 150}, {&x, 1}};
  for (int r = 0; r < 2; ++r) {
    for (size_t k = 0; k < tensors.size(); ++k) {
      Sim::Buffer* b = &(*tensors[k].first)[r];
      b->assign(tensors[k].second, 0);
      const int salt = static_cast<int>(k) + 1;
      sim.Fill(r, b, [r, salt](int64_t i) { return Value(r, i, salt); });
    }
  }
  for (int r = 0; r < 2; ++r) {
    const int p = 1 - r;
    std::vector<int> calls;
    calls.push_back(sim.AllReduce(r, &t[r], &t[p], false, 1.0f));
    calls.push_back(sim.AllReduce(r, &u[r], &u[p], false, 1.0f));
    calls.push_back(sim.AllReduce(r, &t[r], &t[p], false, 1.0f));
    calls.push_back(sim.AllReduce(r, &t[r], &t[p], false, 1.0f));
    calls.push_back(sim.AllReduce(r, &u[r], &u[p], false, 0.5f));
    calls.push_back(sim.AllReduce(r, &w[r], &w[p], /*direct=*/true, 1.0f));
    calls.push_back(sim.AllReduce(r, &t[r], &t[p], false, 1.0f));
    calls.push_back(sim.AllReduce(r, &x[r], &x[p], false, 1.0f));
    calls.push_back(sim.AllReduce(r, &t[r], &t[p], false, 1.0f));
    for (int c : calls) sim.WaitForCall(r, c);
  }
  if (!sim.Run()) return "deadlock";
  const std::vector<std::pair<const char*, float>> factor = {{"t", 16.0f}, {"u", 1.0f}, {"w", 1.0f}, {"x", 1.0f}};
  for (int r = 0; r < 2; ++r) {
    for (size_t k = 0; k < tensors.size(); ++k) {
      const Sim::Buffer& got = (*tensors[k].first)[r];
      const int salt = static_cast<int>(k) + 1;
      for (int64_t i = 0; i < tensors[k].second; ++i) {
        const float want = factor[k].second * (Value(0, i, salt) + Value(1, i, salt));
        if (got[i] != want) {
          return absl::StrCat("rank ", r, " ", factor[k].first, "[", i, "] = ", got[i], " instead of ", want);
        }
      }
    }
  }
  return "";
}

constexpr int kRuns = 500;

TEST(CopyEngineProtocol, BucketsLikeDdpsBackwardAreExactInEveryInterleaving) {
  for (uint64_t seed = 0; seed < kRuns; ++seed) {
    const std::string error = RunLikeDdpBackward(seed, Drop::kNothing);
    ASSERT_EQ(error, "") << "seed " << seed;
  }
}

TEST(CopyEngineProtocol, CallsQueuedWithoutWaitingSeeEachOthersResultsInEveryInterleaving) {
  for (uint64_t seed = 0; seed < kRuns; ++seed) {
    const std::string error = RunQueuedWithoutWaiting(seed, Drop::kNothing);
    ASSERT_EQ(error, "") << "seed " << seed;
  }
}

// Each reuse rule is needed: without it, some interleaving overwrites data that is still to be read.
TEST(CopyEngineProtocol, DroppingAnyReuseRuleMakesSomeInterleavingWrong) {
  const std::map<Drop, std::string> rules = {{Drop::kInReuseWait, "the wait before writing the peer's IN"},
                                             {Drop::kOutReuseWait, "the wait before writing the peer's OUT"},
                                             {Drop::kTwoInFlight, "at most two calls in flight"},
                                             {Drop::kOverlapWait, "the wait for an overlapping previous call"}};
  for (const auto& [drop, name] : rules) {
    int wrong = 0;
    for (uint64_t seed = 0; seed < kRuns && wrong == 0; ++seed) {
      wrong += !RunLikeDdpBackward(seed, drop).empty();
      wrong += !RunQueuedWithoutWaiting(seed, drop).empty();
    }
    EXPECT_GT(wrong, 0) << "without " << name << ", every one of " << kRuns << " runs was still exact";
  }
}

// The watchdog's Release: a rank whose peer never joins a call is stuck on its waits; once every flag is
// set far ahead, all of its streams drain (with garbage, which the failed Work reports).
TEST(CopyEngineProtocol, ReleaseDrainsEveryStreamOfARankWhosePeerNeverCame) {
  Sim sim(/*scratch=*/200, /*seed=*/7, Drop::kNothing);
  Sim::Buffer a(131, 1.0f), b(64, 2.0f), unused(131, 0.0f);
  sim.AllReduce(0, &a, &unused, false, 1.0f);
  sim.AllReduce(0, &b, &unused, false, 1.0f);
  EXPECT_FALSE(sim.Run()) << "rank 0 finished a call its peer never made";
  sim.Release(0);
  EXPECT_TRUE(sim.Run()) << "rank 0 is still stuck after Release";
}

}  // namespace
}  // namespace tinyddp::dist::copy_engine
