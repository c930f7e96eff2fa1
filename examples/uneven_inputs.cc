// uneven_inputs: what happens when the ranks of a DDP job do not have the same number of batches, and the
// fix, Join (dist/parallel/join/join.h). The walk-through: docs/uneven_inputs.md.
//
//   ./bazelw run //examples:uneven_inputs                                 # 3 Gloo ranks: 2, 4 and 3 batches
//   ./bazelw run //examples:uneven_inputs -- --batches=5,1 --hang_timeout_s=2   # 2 ranks
//
// It starts its own ranks (one per entry of --batches, on the CPU with Gloo), and each rank runs:
//
//   Part 1, the hang. Plain DDP, every rank training on its own batches. The rank with the fewest runs out
//   first and leaves its loop; the others, at their next step, wait in DDP's gradient all_reduce for a rank
//   that will never join it. With the default timeout of 300 s that is a five-minute hang (NCCL jobs often
//   have 10 or 30 minutes); here the group that part uses has a timeout of --hang_timeout_s, so it ends
//   through the error path: DDP's status() says which all_reduce failed, and each rank reports it.
//   The rank that ran out meanwhile waits for the others in another group's collective (where the report
//   is printed), like a real script waiting in its next collective after the loop.
//
//   Part 2, the fix. The same training with Join: each step starts with one tiny all_reduce of "I still have
//   a batch" flags; a rank without one shadows the step (the same DDP collectives, with zero gradients) and
//   the gradients are averaged over the ranks that trained. Every rank finishes, holds the same weights
//   (the checksums, and a bit-for-bit comparison), and says how many steps it trained and shadowed.
//
// Nothing here aborts or is killed: part 1 ends through DDP's status(), and every process exits 0 when both
// parts behaved as described (1 otherwise, with the reason on stderr).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "base/command_line.h"
#include "base/status_macros.h"
#include "dist/ddp/ddp.h"
#include "dist/init.h"
#include "dist/launch/spawn.h"
#include "dist/parallel/join/join.h"
#include "nn/mlp.h"
#include "nn/sgd.h"
#include "tensor/ops.h"

ABSL_FLAG(std::string, batches, "2,4,3", "batches of each rank, one number per rank (the number of ranks)");
ABSL_FLAG(int32_t, hang_timeout_s, 3, "part 1's collective timeout in seconds: how long the hang lasts");

namespace tinyddp {
namespace {

using autograd::Variable;

const std::vector<int64_t> kDims = {16, 32, 32, 4};
constexpr int64_t kBatchRows = 8;
constexpr std::chrono::seconds kTimeout(120);  // part 2's group, and the group the reports go through

// --- Data and model --------------------------------------------------------------------------------------

// Rank `rank`'s batch number `step`: random inputs and labels, the same in part 1 and part 2.
struct Batch {
  Variable x;
  Tensor labels;
};
Batch MakeBatch(int rank, int step) {
  const uint64_t seed = 1000 * static_cast<uint64_t>(rank) + static_cast<uint64_t>(step);
  Tensor x = Tensor::Empty({kBatchRows, kDims.front()});
  ops::UniformInit(x, -1.0, 1.0, seed);
  std::mt19937_64 rng(seed);
  std::vector<int64_t> labels(kBatchRows);
  for (int64_t& l : labels) l = static_cast<int64_t>(rng() % static_cast<uint64_t>(kDims.back()));
  return Batch{Variable(x), Tensor::FromVector<int64_t>(labels, {kBatchRows})};
}

std::unique_ptr<nn::SGD> MakeOptimizer(const nn::Module& model) {
  nn::SgdOptions o;
  o.lr = 0.05;
  o.momentum = 0.9;
  return std::make_unique<nn::SGD>(model.Parameters(), o);
}

// One training step, the five lines of every DDP loop.
absl::Status TrainStep(dist::DistributedDataParallel& ddp, nn::Optimizer& optimizer, const Batch& b) {
  optimizer.ZeroGrad();
  autograd::Backward(autograd::CrossEntropy(ddp.Forward(b.x), b.labels));  // DDP's all_reduces run in here
  RETURN_IF_ERROR(ddp.status());                                          // ... and failed if this is not OK
  optimizer.Step();
  return absl::OkStatus();
}

// --- Printing --------------------------------------------------------------------------------------------

// Rank r prints, then every rank meets at a barrier of `pg`: the lines come out in rank order.
absl::Status PrintInRankOrder(dist::ProcessGroup& pg, const std::string& text) {
  for (int r = 0; r < pg.size(); ++r) {
    if (r == pg.rank()) {
      std::printf("%s\n", text.c_str());
      std::fflush(stdout);
    }
    RETURN_IF_ERROR(pg.Barrier()->Wait());
  }
  return absl::OkStatus();
}

void PrintOnRank0(const dist::ProcessGroup& pg, const std::string& text) {
  if (pg.rank() != 0) return;
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

std::string RankList(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
}
// "rank 0 shadows", "ranks 0, 2 shadow".
std::string RanksDo(const std::vector<int>& ranks, const char* verb) {
  return absl::StrCat(RankList(ranks), " ", verb, ranks.size() == 1 ? "s" : "");
}

// DDP's error, up to the timeout ("DistributedDataParallel: all_reduce of bucket 0 on rank 1 failed:
// AllReduce(float32 [1220], AVG) #9 on gloo rank 1/3 timed out after 3000 ms"); the rest is Gloo's detail.
std::string ShortError(const absl::Status& status) {
  std::string text(status.message());
  const size_t timed_out = text.find(" timed out after ");
  if (timed_out != std::string::npos) {
    const size_t ms = text.find(" ms", timed_out);
    if (ms != std::string::npos) return text.substr(0, ms + 3);
  }
  return text;
}

// The sum of every weight (what the ranks print), and whether all ranks hold the same bits (a collective).
double Checksum(const nn::Module& model) {
  double sum = 0;
  for (const Variable& p : model.Parameters()) {
    for (float v : p.data().ToVector<float>()) sum += v;
  }
  return sum;
}
absl::StatusOr<bool> SameWeightsOnEveryRank(dist::ProcessGroup& pg, const nn::Module& model) {
  for (const Variable& p : model.Parameters()) {
    const Tensor mine = p.data().Flatten().Clone();
    Tensor all = Tensor::Empty({mine.numel() * pg.size()});
    RETURN_IF_ERROR(pg.AllGather(all, mine)->Wait());
    for (int r = 0; r < pg.size(); ++r) {
      const Tensor theirs = all.Rows(r * mine.numel(), (r + 1) * mine.numel());
      if (std::memcmp(theirs.data_ptr(), mine.data_ptr(), mine.nbytes()) != 0) return false;
    }
  }
  return true;
}

// --- Part 1: plain DDP with uneven inputs -----------------------------------------------------------------

// Trains this rank's batches with plain DDP over `pg`. Returns OK when it ran out of data, or the error
// that ended its loop (expected here: the all_reduce of a step some rank never joins times out).
struct Part1 {
  int steps = 0;       // steps this rank completed
  absl::Status ended;  // why its loop ended: OK = out of data
};
Part1 TrainWithPlainDdp(std::shared_ptr<dist::ProcessGroup> pg, int my_batches) {
  Part1 out;
  nn::MlpOptions mo;
  mo.seed = 7;
  auto model = nn::MLP(kDims, mo);
  auto ddp = dist::DistributedDataParallel::Create(*model, pg);
  if (!ddp.ok()) {
    out.ended = ddp.status();
    return out;
  }
  auto optimizer = MakeOptimizer(*model);
  for (int step = 0; step < my_batches; ++step) {
    out.ended = TrainStep(**ddp, *optimizer, MakeBatch(pg->rank(), step));
    if (!out.ended.ok()) return out;  // stop here: DDP's Forward would end the process on a failed group
    ++out.steps;
  }
  return out;
}

absl::Status ShowTheHang(dist::ProcessGroup& reports, const std::vector<int>& batches, int timeout_s) {
  const int rank = reports.rank();
  PrintOnRank0(reports, absl::StrCat("== Part 1: plain DDP, ranks with ", absl::StrJoin(batches, ", "),
                                     " batches; the group's timeout is ", timeout_s, " s =="));
  // The group part 1 trains in, with the short timeout. The others wait at this group's barrier first,
  // so that all ranks connect it at the same moment.
  RETURN_IF_ERROR(reports.Barrier()->Wait());
  ASSIGN_OR_RETURN(std::shared_ptr<dist::ProcessGroup> hang_pg,
                   dist::InitProcessGroup({.backend = dist::Backend::kGloo,
                                           .timeout = std::chrono::seconds(timeout_s)}));
  const Part1 part1 = TrainWithPlainDdp(hang_pg, batches[rank]);
  // The rank that ran out gets here first and waits in the report's barrier (another group) for the others,
  // who are still waiting in part 1's all_reduce for it: neither can move until the timeout fails theirs.
  std::string line;
  if (part1.ended.ok()) {
    line = absl::StrCat("rank ", rank, ": trained its ", part1.steps, " batches, ran out of data and left the "
                        "loop; it waits for the others at the next collective");
  } else {
    std::vector<int> gone;
    for (int r = 0; r < static_cast<int>(batches.size()); ++r) {
      if (batches[r] <= part1.steps) gone.push_back(r);
    }
    line = absl::StrFormat(
        "rank %d: had %d batches; at step %d its backward waited in DDP's gradient all_reduce for %s, which had "
        "run out of data, until the %d s timeout ended the wait (%s):\n    %s",
        rank, batches[rank], part1.steps + 1, RankList(gone), timeout_s,
        absl::StatusCodeToString(part1.ended.code()), ShortError(part1.ended));
  }
  RETURN_IF_ERROR(PrintInRankOrder(reports, line));
  // A group that timed out has its connections in an unknown state; it is dropped only now, when every
  // rank is past it (dropping it earlier would turn the others' timeout into a closed connection).
  hang_pg.reset();
  // Expected: the ranks with the fewest batches finish, every other rank fails with the timeout.
  const int fewest = *std::min_element(batches.begin(), batches.end());
  const bool as_expected = batches[rank] == fewest ? part1.ended.ok() : absl::IsDeadlineExceeded(part1.ended);
  if (!as_expected) {
    return absl::InternalError(absl::StrCat("part 1 did not end as expected on rank ", rank, ": ",
                                            part1.ended.ToString()));
  }
  PrintOnRank0(reports, absl::StrCat("Without Join, the ranks with more data wait in DDP's all_reduce for a rank "
                                     "that has left: here for ", timeout_s, " s, in a real job for its whole "
                                     "timeout (300 s by default here, 10 minutes in PyTorch with NCCL).\n"));
  return absl::OkStatus();
}

// --- Part 2: the same uneven inputs with Join -------------------------------------------------------------

absl::Status TrainWithJoin(std::shared_ptr<dist::ProcessGroup> pg, const std::vector<int>& batches) {
  const int rank = pg->rank();
  PrintOnRank0(*pg, "== Part 2: the same uneven inputs with Join (dist/parallel/join/join.h) ==");
  nn::MlpOptions mo;
  mo.seed = 7;
  auto model = nn::MLP(kDims, mo);
  ASSIGN_OR_RETURN(std::unique_ptr<dist::join::Join> join, dist::join::Join::Create(pg));  // no collective
  dist::DdpOptions ddp_options;
  ddp_options.comm_hook = join->Hook();  // averages each step over the ranks that train it
  ASSIGN_OR_RETURN(auto ddp, dist::DistributedDataParallel::Create(*model, pg, ddp_options));
  auto optimizer = MakeOptimizer(*model);
  const Variable placeholder(Tensor::Zeros({1, kDims.front()}));  // what a shadowing rank feeds DDP

  int next_batch = 0;
  for (;;) {
    const bool has_batch = next_batch < batches[rank];
    ASSIGN_OR_RETURN(dist::join::Turn turn, join->Next(has_batch));  // collective: the flags
    if (turn == dist::join::Turn::kAllDone) break;                   // every rank breaks at the same step
    std::vector<int> shadowing;
    for (int r = 0; r < pg->size(); ++r) {
      if (std::find(join->training_ranks().begin(), join->training_ranks().end(), r) == join->training_ranks().end()) {
        shadowing.push_back(r);
      }
    }
    PrintOnRank0(*pg, absl::StrCat("step ", join->step() + 1, ": ", RanksDo(join->training_ranks(), "train"),
                                   shadowing.empty() ? "" : absl::StrCat(", ", RanksDo(shadowing, "shadow"))));
    if (turn == dist::join::Turn::kShadow) {
      RETURN_IF_ERROR(join->Shadow(*ddp, optimizer.get(), placeholder));  // DDP's step with zero gradients
      continue;
    }
    RETURN_IF_ERROR(TrainStep(*ddp, *optimizer, MakeBatch(rank, next_batch++)));
  }
  RETURN_IF_ERROR(PrintInRankOrder(
      *pg, absl::StrFormat("rank %d: trained %d steps, shadowed %d; weights checksum %.6f", rank,
                           join->steps_trained(), join->steps_shadowed(), Checksum(*model))));
  ASSIGN_OR_RETURN(const bool same, SameWeightsOnEveryRank(*pg, *model));
  if (!same) return absl::InternalError("the ranks ended with different weights");
  PrintOnRank0(*pg, absl::StrCat("Every rank finished all ", join->step(),
                                 " steps and holds the same weights, bit for bit."));
  return absl::OkStatus();
}

// --- One rank --------------------------------------------------------------------------------------------

absl::Status RunRank(const std::vector<int>& batches, int hang_timeout_s) {
  // The group that outlives part 1: it carries the reports of part 1 and then part 2's training.
  ASSIGN_OR_RETURN(std::shared_ptr<dist::ProcessGroup> pg,
                   dist::InitProcessGroup({.backend = dist::Backend::kGloo, .timeout = kTimeout}));
  if (pg->size() != static_cast<int>(batches.size())) {
    return absl::InvalidArgumentError(absl::StrCat("--batches names ", batches.size(), " ranks but the job has ",
                                                   pg->size(), " (TINYDDP_NPROC?); give one number per rank"));
  }
  RETURN_IF_ERROR(ShowTheHang(*pg, batches, hang_timeout_s));
  return TrainWithJoin(pg, batches);
}

absl::StatusOr<std::vector<int>> ParseBatches(const std::string& text) {
  std::vector<int> batches;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--batches=", text, ": \"", part, "\" is not a count of batches (0 or more)"));
    }
    batches.push_back(n);
  }
  if (batches.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("--batches=", text, ": give one count per rank, at least 2"));
  }
  return batches;
}

}  // namespace
}  // namespace tinyddp

int main(int argc, char** argv) {
  using namespace tinyddp;
  const std::vector<FlagGroup> flags = {{"flags", {"batches", "hang_timeout_s"}}};
  absl::StatusOr<CommandLine> command_line =
      ParseCommandLineFlags(std::vector<std::string>(argv + 1, argv + argc), flags);
  if (!command_line.ok()) {
    std::fprintf(stderr, "uneven_inputs: %s (--help lists the flags)\n",
                 std::string(command_line.status().message()).c_str());
    return 2;
  }
  if (command_line->help) {
    std::printf("usage: uneven_inputs [flags]: starts one Gloo rank per entry of --batches\n\n%s",
                FlagsHelp(flags).c_str());
    return 0;
  }
  absl::StatusOr<std::vector<int>> batches = ParseBatches(absl::GetFlag(FLAGS_batches));
  const int hang_timeout_s = absl::GetFlag(FLAGS_hang_timeout_s);
  if (batches.ok() && hang_timeout_s < 1) {
    batches = absl::InvalidArgumentError(absl::StrCat("--hang_timeout_s=", hang_timeout_s, ": at least 1"));
  }
  if (!batches.ok()) {
    std::fprintf(stderr, "uneven_inputs: %s\n", std::string(batches.status().message()).c_str());
    return 2;
  }
  // Run by hand, this process starts one worker per rank and waits for them; a worker goes on.
  dist::SpawnOptions spawn;
  spawn.nproc = static_cast<int>(batches->size());
  if (absl::Status s = dist::SpawnWorkersIfNeeded(argc, argv, spawn); !s.ok()) {
    std::fprintf(stderr, "uneven_inputs: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  if (absl::Status s = RunRank(*batches, hang_timeout_s); !s.ok()) {
    std::fprintf(stderr, "uneven_inputs: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
