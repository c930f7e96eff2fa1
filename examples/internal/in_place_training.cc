// TrainInPlace: see in_place_training.h.
#include "examples/internal/in_place_training.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "autograd/engine.h"
#include "base/fault_injection.h"
#include "base/status_macros.h"
#include "data/distributed_sampler.h"
#include "dist/ddp/ddp.h"
#include "dist/elastic/in_place/data_rule.h"
#include "dist/elastic/in_place/keep_going.h"
#include "dist/elastic/in_place/live_state.h"
#include "dist/elastic/in_place/min_replicas.h"
#include "dist/elastic/in_place/replica_group.h"
#include "dist/observe/blame/error_file.h"
#include "dist/process_group/gloo/process_group_gloo.h"
#include "dist/init.h"
#include "dist/store/hash_store.h"
#include "dist/store/prefix_store.h"
#include "dist/worker/env.h"
#include "examples/internal/evaluate.h"
#include "examples/internal/in_place_checkpoint.h"

namespace tinyddp::examples {
namespace {

namespace in_place = dist::in_place;

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// --trace=PREFIX: one JSON line per span of this replica (wall-clock microseconds, comparable across processes
// of one machine): steps, and a recovery's phases.
class SpanLog {
 public:
  SpanLog(const std::string& prefix, int id) {
    if (!prefix.empty()) out_.open(absl::StrCat(prefix, ".replica", id, ".jsonl"));
  }
  void Add(const std::string& name, int64_t start_us, int64_t end_us, int64_t step, int64_t generation) {
    if (!out_.is_open()) return;
    out_ << absl::StrFormat("{\"name\":\"%s\",\"start_us\":%d,\"end_us\":%d,\"step\":%d,\"generation\":%d}\n", name,
                            start_us, end_us, step, generation);
    out_.flush();
  }

 private:
  std::ofstream out_;
};

// --- The loop ----------------------------------------------------------------------------------------

struct Trainer {
  const TrainOptions& options;
  Job& job;
  Setup setup;
  std::unique_ptr<in_place::ReplicaGroup> replicas;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  dist::DdpOptions ddp_options;
  Position at;
  std::vector<int64_t> order;  // the epoch's order of the training set (data_rule.h)
  int64_t order_epoch = -1;
  std::unique_ptr<SpanLog> spans;
  int64_t recovering_since_us = 0;  // the failed step's start, until the first step after it completes
  const bool replacements_may_come = std::getenv(dist::in_place::kReplacementsEnv) != nullptr;
  std::shared_ptr<dist::Store> join_store;  // a replacement: the job's in-place store, and the replica it replaces
  int join_id = -1;

  bool lead() const { return replicas->rank() == 0; }

  const std::vector<int64_t>& EpochOrder() {
    if (order_epoch != at.epoch) {
      data::DistributedSampler sampler =
          data::DistributedSampler::Create(setup.datasets.train->Size(),
                                           {.num_replicas = 1, .rank = 0, .shuffle = options.shuffle,
                                            .seed = static_cast<uint64_t>(options.seed), .pad = false})
              .value();  // one replica of a valid size: cannot fail
      sampler.SetEpoch(at.epoch);
      order = sampler.Indices();
      order_epoch = at.epoch;
    }
    return order;
  }

  // One step on this member's slice: OK(true) when it completed, OK(false) at the end of the epoch, the
  // group's error when a collective failed (nothing was stepped: the weights are those before the step).
  absl::StatusOr<bool> Step() {
    const in_place::Membership& m = replicas->membership();
    const std::vector<int64_t>& epoch_order = EpochOrder();
    const in_place::StepSlice slice = in_place::SliceOfStep(static_cast<int64_t>(epoch_order.size()), at.cursor,
                                                           static_cast<int>(m.members.size()), replicas->rank(),
                                                           options.batch_size);
    if (slice.count == 0) return false;
    MaybeInjectFault("step", at.step);  // failure tests: this replica dies, freezes or exits here
    const int64_t start = NowUs();
    ASSIGN_OR_RETURN(data::Batch batch,
                     setup.datasets.train->GetBatch(absl::MakeConstSpan(epoch_order).subspan(slice.begin, slice.count)));
    setup.optimizer->set_lr(setup.schedule->LrAt(at.step));  // the schedule's value: not rescaled after a loss
    setup.optimizer->ZeroGrad();
    const autograd::Variable logits = ddp->Forward(autograd::Variable(batch.inputs));
    const autograd::Variable loss = setup.loss_fn(logits, batch.labels);
    autograd::Backward(loss);
    RETURN_IF_ERROR(ddp->status());  // a bucket's all_reduce failed: its gradients are not averages
    setup.optimizer->Step();
    at.cursor += slice.advance;
    ++at.step;
    spans->Add("step", start, NowUs(), at.step - 1, m.generation);
    if (recovering_since_us != 0 && lead()) {
      std::printf("in-place recovery: the failed step began %.3f s before this first completed step after it "
                  "(step %d)\n", (NowUs() - recovering_since_us) / 1e6, static_cast<int>(at.step - 1));
    }
    recovering_since_us = 0;
    if (lead() && (at.step % options.log_every == 0)) {
      std::printf("step %d (epoch %d, %d replicas): loss %.4f (replica %d's batch)\n", at.step, at.epoch + 1,
                  static_cast<int>(m.members.size()), loss.data().ToVector<float>()[0], replicas->id());
      std::fflush(stdout);
    }
    return true;
  }

  // Every member takes the source's state over the new group, then wraps the model in a new DDP.
  absl::Status AdoptAndWrap() {
    std::vector<int64_t> position = at.ToVector();
    RETURN_IF_ERROR(in_place::AdoptLiveState(*replicas, *setup.model, *setup.optimizer, position));
    at = Position::From(position);
    ASSIGN_OR_RETURN(ddp, dist::DistributedDataParallel::Create(*setup.model, replicas->group(), ddp_options));
    return absl::OkStatus();
  }

  // A step failed: DDP (and the partial gradients) go, the survivors agree and rebuild, take the source's
  // state, and a new DDP is made. Repeats while members keep failing during it; fails when fewer than
  // --min_replicas remain (after the source's checkpoint) or this replica was left out. `grow`: no failure, the
  // group grows by the announced replacements instead (rejoin), the same way after its first regroup.
  absl::Status Recover(const absl::Status& failure, int64_t failed_at_us, bool grow = false) {
    const int64_t detected = NowUs();
    if (!grow) {
      spans->Add("failed step", failed_at_us, detected, at.step, replicas->membership().generation);
      if (recovering_since_us == 0) recovering_since_us = failed_at_us;  // a loss during the redo: the first one's
    }
    for (bool first = true;; first = false) {
      ddp.reset();
      setup.optimizer->ZeroGrad();  // the failed step's partial gradients are dropped
      const int64_t shrink_start = NowUs();
      absl::StatusOr<in_place::Membership> m = grow && first ? replicas->Grow(at.step) : replicas->Shrink(at.step);
      if (!m.ok()) {
        if (!options.checkpoint_dir.empty() && replicas->id() == replicas->membership().source &&
            absl::IsFailedPrecondition(m.status()) && m.status().message().find("fewer") != absl::string_view::npos) {
          RETURN_IF_ERROR(SaveInPlaceCheckpoint(options.checkpoint_dir, *setup.model, *setup.optimizer, at,
                                                static_cast<int>(replicas->membership().members.size())));
        }
        return m.status();
      }
      const int64_t grouped = NowUs();
      spans->Add(grow && first ? "rejoin: new group" : "quorum + new group", shrink_start, grouped, at.step,
                 m->generation);
      const absl::Status adopted = AdoptAndWrap();
      if (adopted.ok()) {
        spans->Add("live state + DDP", grouped, NowUs(), at.step, m->generation);
        if (lead() && grow && first) {
          std::printf("rejoin: %s; regrouped in %.3f s, state sent in %.3f s; step %d with %d replicas\n",
                      m->ToString().c_str(), (grouped - shrink_start) / 1e6, (NowUs() - grouped) / 1e6, at.step,
                      static_cast<int>(m->members.size()));
        } else if (lead()) {
          std::printf("in-place recovery: %s after \"%s\"; detected %.3f s after the failed step began, "
                      "regrouped in %.3f s, state adopted in %.3f s; redoing step %d with %d replicas (global "
                      "batch %d, lr unchanged)\n",
                      m->ToString().c_str(), std::string(failure.message()).substr(0, 120).c_str(),
                      (detected - failed_at_us) / 1e6, (grouped - shrink_start) / 1e6, (NowUs() - grouped) / 1e6,
                      at.step, static_cast<int>(m->members.size()),
                      static_cast<int>(m->members.size() * options.batch_size));
        }
        std::fflush(stdout);
        return absl::OkStatus();
      }
      std::fprintf(stderr, "in-place recovery: replica %d: a member failed during the recovery (%s); again\n",
                   replicas->id(), std::string(adopted.message()).c_str());
    }
  }

  // With a budget for replacements (--max_restarts; the launcher says so in kReplacementsEnv): the lead announces those that asked to join, and every
  // member grows the group at the announced boundary. One store lookup a step until then.
  absl::Status MaybeGrow() {
    if (!replacements_may_come) return absl::OkStatus();
    RETURN_IF_ERROR(replicas->AnnounceJoiners(at.step));
    ASSIGN_OR_RETURN(const bool due, replicas->GrowthDue(at.step));
    return due ? Recover(absl::OkStatus(), NowUs(), /*grow=*/true) : absl::OkStatus();
  }

  absl::Status Run() {
    RETURN_IF_ERROR(in_place::CheckMinReplicas({.min_replicas = options.min_replicas,
                                                .replicas = join_store ? 0 : job.pg->size(),
                                                .backend = job.pg->backend_name(),
                                                .tp = options.tp,
                                                .pp = options.pp,
                                                .zero = options.zero,
                                                .microbatches = options.microbatches,
                                                .join = options.join,
                                                .cuda_graph = options.cuda_graph,
                                                .grad_accum_steps = options.grad_accum_steps,
                                                .ddp = options.ddp}));
    RETURN_IF_ERROR(AgreeOnStatus(job, BuildSetup(options, job, setup), "setting up"));
    const in_place::ReplicaGroupOptions group_options = {
        .min_replicas = static_cast<int>(options.min_replicas),
        .timeout = options.timeout,
        .window = std::chrono::milliseconds(static_cast<int64_t>(options.recovery_window * 1000))};
    ddp_options.bucket_cap_bytes = std::max<int64_t>(1, static_cast<int64_t>(options.bucket_cap_mb * dist::kMiB));
    ddp_options.first_bucket_bytes = std::max<int64_t>(1, static_cast<int64_t>(options.first_bucket_mb * dist::kMiB));
    if (join_store) {  // a replacement: the members take it in at a step boundary and hand it their state
      at.step = -1;    // no state yet: never the source of a quorum
      ASSIGN_OR_RETURN(replicas, in_place::ReplicaGroup::Join(join_store, join_id, group_options));
      spans = std::make_unique<SpanLog>(options.trace, replicas->id());
      if (absl::Status adopted = AdoptAndWrap(); !adopted.ok()) RETURN_IF_ERROR(Recover(adopted, NowUs()));
      std::printf("rejoin: replica %d took the state of replica %d at step %d\n", replicas->id(),
                  replicas->membership().source, static_cast<int>(at.step));
      std::fflush(stdout);
    } else {
      at.planned = job.pg->size();
      if (options.resume) {
        ASSIGN_OR_RETURN(std::optional<Position> resumed,
                         LoadLatestInPlaceCheckpoint(options.checkpoint_dir, *setup.model, *setup.optimizer));
        if (resumed) at = *resumed;
      }
      ASSIGN_OR_RETURN(replicas, in_place::ReplicaGroup::Create(job.pg, group_options));
      spans = std::make_unique<SpanLog>(options.trace, replicas->id());
      ASSIGN_OR_RETURN(ddp, dist::DistributedDataParallel::Create(*setup.model, replicas->group(), ddp_options));
    }
    job.pg.reset();  // from here on the replica group owns the group (a loss replaces it)
    job.data.reset();
    // The schedule as the plain loop's, over the steps an epoch has at the planned number of replicas.
    const int64_t global_batch = at.planned * options.batch_size;
    setup.schedule = MakeSchedule(options, (setup.datasets.train->Size() + global_batch - 1) / global_batch);
    if (lead()) {
      std::printf("ddp_mlp: in-place recovery on (--min_replicas=%d): %d replicas, batch %d per replica, step %d; "
                  "a lost replica's samples are re-sharded over the survivors (docs/fault_tolerance.md)\n",
                  static_cast<int>(options.min_replicas), replicas->group()->size(),
                  static_cast<int>(options.batch_size), static_cast<int>(at.step));
      std::fflush(stdout);
    }
    const auto started = std::chrono::steady_clock::now();
    while (at.epoch < options.epochs && (options.max_steps == 0 || at.step < options.max_steps)) {
      RETURN_IF_ERROR(MaybeGrow());
      const int64_t step_start = NowUs();
      absl::StatusOr<bool> stepped = Step();
      if (!stepped.ok()) {
        RETURN_IF_ERROR(Recover(stepped.status(), step_start));
        continue;
      }
      if (!*stepped) {  // the epoch's samples are used up
        ++at.epoch;
        at.cursor = 0;
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    // The end: the lead evaluates the whole test set alone and writes the checkpoint (every member holds the
    // same state), so a loss now cannot fail the finished run.
    if (lead()) {
      std::vector<int64_t> all(setup.datasets.test->Size());
      for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
      ASSIGN_OR_RETURN(const EvalSums sums, EvaluateShard(*setup.model, *setup.datasets.test, all, job.device));
      const in_place::Membership& m = replicas->membership();
      std::printf("done: %d steps with %d replicas at the end (replicas %s, generation %d), test accuracy %.2f%%, "
                  "%.1fs\n",
                  static_cast<int>(at.step), static_cast<int>(m.members.size()), absl::StrJoin(m.members, ",").c_str(),
                  static_cast<int>(m.generation), 100 * sums.correct / std::max(1.0, sums.count), seconds);
      if (!options.checkpoint_dir.empty()) {
        RETURN_IF_ERROR(SaveInPlaceCheckpoint(options.checkpoint_dir, *setup.model, *setup.optimizer, at,
                                              static_cast<int>(replicas->membership().members.size())));
      }
      std::fflush(stdout);
    }
    // Leave together (the lead's checkpoint is written before anyone exits); a member lost now changes nothing.
    (void)replicas->group()->Barrier()->Wait();
    return absl::OkStatus();
  }
};

}  // namespace

absl::Status TrainInPlace(const TrainOptions& options, Job& job) {
  Trainer trainer{options, job};
  return trainer.Run();
}

int RunInPlaceWorker(const TrainOptions& options, Job job) {
  const int rank = job.pg->rank();
  const absl::Status status = TrainInPlace(options, job);
  if (status.ok()) return 0;
  std::fprintf(stderr, "ddp_mlp: rank %d: %s\n", rank, std::string(status.message()).c_str());
  std::fflush(nullptr);
  dist::RecordWorkerFailure(rank, status);
  return 1;
}

bool IsInPlaceReplacement() {
  const char* value = std::getenv(dist::in_place::kReplacementEnv);
  return value != nullptr && std::string(value) == "1";
}

int RunInPlaceReplacement(const TrainOptions& options) {
  auto fail = [](int rank, const absl::Status& status) {
    std::fprintf(stderr, "ddp_mlp: replacement of rank %d: %s\n", rank, std::string(status.message()).c_str());
    dist::RecordWorkerFailure(rank, status);
    return 1;
  };
  absl::StatusOr<dist::WorkerEnv> env = dist::ReadWorkerEnv();
  if (!env.ok()) return fail(-1, env.status());
  absl::StatusOr<std::shared_ptr<dist::TCPStore>> connected = dist::ConnectToJobStore(*env, options.timeout);
  if (!connected.ok()) return fail(env->rank, connected.status());
  // The members' in-place store: the world group's ("pg0", under the restart's prefix as InitProcessGroup
  // puts it), SubStore "in_place/<n>", n the first whose replica 0 recorded its pid (other wings may have
  // taken a SubStore of the world before it).
  std::shared_ptr<dist::Store> base = *connected;
  if (env->restart_count > 0) base = std::make_shared<dist::PrefixStore>(absl::StrCat("restart", env->restart_count), base);
  base = std::make_shared<dist::PrefixStore>("pg0", base);
  std::shared_ptr<dist::Store> in_place_store;
  for (int n = 0; n < 8 && in_place_store == nullptr; ++n) {
    auto candidate = std::make_shared<dist::PrefixStore>(absl::StrCat("in_place/", n), base);
    if (candidate->Wait({"pid/0"}, std::chrono::milliseconds(1)).ok()) in_place_store = candidate;
  }
  if (in_place_store == nullptr) {
    return fail(env->rank, absl::NotFoundError("no in-place replica group in the job's store to rejoin"));
  }
  // BuildSetup wants a group: a placeholder of one rank (the data, model and optimizer are built alike everywhere).
  absl::StatusOr<std::unique_ptr<dist::ProcessGroupGloo>> alone =
      dist::ProcessGroupGloo::Create(std::make_shared<dist::HashStore>(), 0, 1, {.timeout = options.timeout});
  if (!alone.ok()) return fail(env->rank, alone.status());
  Job job{std::shared_ptr<dist::ProcessGroup>(std::move(*alone)), Device::CPU()};
  Trainer trainer{options, job};
  trainer.join_store = in_place_store;
  trainer.join_id = env->rank;
  const absl::Status status = trainer.Run();
  return status.ok() ? 0 : fail(env->rank, status);
}

}  // namespace tinyddp::examples
