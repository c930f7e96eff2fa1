// CheckMinReplicas: see min_replicas.h. Each refusal says why the combination is not supported yet.
#include "dist/elastic/in_place/min_replicas.h"

#include "absl/strings/str_cat.h"

namespace tinyddp::dist::in_place {

absl::Status CheckMinReplicas(const MinReplicasRequest& r) {
  if (r.min_replicas == 0) return absl::OkStatus();
  auto refuse = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("--min_replicas=", r.min_replicas, ": ", why));
  };
  if (r.min_replicas < 1) return refuse("must be at least 1 (a job needs one replica to train; 0 turns it off)");
  if (r.replicas > 0 && r.min_replicas > r.replicas) {
    return refuse(absl::StrCat("the job starts with only ", r.replicas,
                               " data-parallel replica(s); --min_replicas must be at most that (--nproc)"));
  }
  if (r.backend == "nccl") {
    return refuse("in-place recovery runs on Gloo (CPU ranks) here: NCCL's ncclCommShrink path is compiled "
                  "(dist/elastic/in_place/nccl_shrink.h) but not wired into training nor tested (it needs 2 GPUs); "
                  "use --backend=gloo");
  }
  if (r.tp > 1) {
    return refuse("--tp: a replica would be a tensor-parallel row of several ranks, and losing one rank loses the "
                  "row's shards; shrinking then means dropping the whole row, not implemented yet");
  }
  if (r.pp > 1) return refuse("--pp: a replica would be a pipeline of stages; losing one stage loses the row, as with --tp");
  if (r.microbatches > 0) {
    return refuse("--microbatches: the pipeline's step (dist/parallel/pipeline) is not DDP's, whose failed all_reduce "
                  "the in-place loop recovers from; leave --microbatches unset (0) with --min_replicas");
  }
  if (r.zero == 3 || r.zero == 1 || r.zero == 2) {
    return refuse(absl::StrCat("--zero=", r.zero, ": each rank holds the only copy of its shard of the ",
                               r.zero == 3 ? "parameters" : "optimizer state",
                               ", so a lost rank loses state no survivor has; use plain DDP (replicated state)"));
  }
  if (r.join) {
    return refuse("--join: its ranks agree each step on who has data over the old group, and its data rule "
                  "(uneven shards) differs from in-place recovery's (the epoch re-sharded over the survivors)");
  }
  if (r.cuda_graph) return refuse("--cuda_graph: a captured step holds the old group's communicator");
  if (r.grad_accum_steps != 1) return refuse("--grad_accum_steps: not implemented with in-place recovery yet");
  if (r.ddp != "full") return refuse("--ddp: only the production DDP (--ddp=full) is rebuilt after a loss");
  return absl::OkStatus();
}

}  // namespace tinyddp::dist::in_place
