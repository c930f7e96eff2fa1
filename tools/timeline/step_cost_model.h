// StepCostModel: DDP on paper, past this machine. A trace gives one step's compute timeline - forward,
// backward, and when each bucket's gradients became ready - which does not change with the number of
// GPUs (each rank keeps its batch); an alpha-beta model of ring all_reduce gives each bucket's
// communication time on n GPUs. Replaying DDP's rules on both predicts the step and its exposed
// communication on 2 .. 1024 GPUs, and what buckets and overlap are worth there.
//
// Ring all_reduce on n ranks, N = ceil(n / gpus_per_node) nodes (NCCL's own cost model for ring, in
// src/graph/tuning.cc): 2(n-1) steps, of which 2(N-1) cross between nodes, each step paying its hop's
// latency; and every rank sends and receives 2(n-1)/n of the buffer, at the ring's bus bandwidth:
//     T(bytes) = base + (2(n-1) - 2(N-1)) * alpha_nvlink + 2(N-1) * alpha_net + 2(n-1)/n * bytes / busbw
//     busbw    = busbw_nvlink inside one node, min(busbw_nvlink, nics_per_node * busbw_nic) across nodes
// (a ring leaves each node once per channel, so the node's NICs carry the channels side by side).
//
// DDP's rules, replayed (the reducer, dist/ddp/reducer.h): bucket k's all_reduce starts when its
// gradients are ready and bucket k-1's has ended (one stream, in order); backward's end waits for the
// last one; fused optimizers step bucket k once its all_reduce has ended, in order; otherwise the
// optimizer runs after all of them. Exposed communication = the time the compute lane spends waiting.
#ifndef TINYDDP_TOOLS_TIMELINE_STEP_COST_MODEL_H_
#define TINYDDP_TOOLS_TIMELINE_STEP_COST_MODEL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/timeline/step_timeline.h"

namespace tinyddp::dist {

/// One kind of hop of a ring.
struct LinkModel {
  double alpha_us = 0;    // latency of one ring step over it
  double busbw_gbps = 1;  // bus bandwidth a ring reaches over it, GB/s
};

struct ClusterModel {
  int gpus_per_node = 8;
  int nics_per_node = 8;
  /// NCCL's figures for ring / Simple protocol (tuning.cc: baseLat 8.4 us, hwLat NVLink 3.4 us, network
  /// 9.6 us per step); busbw measured on 2x H200 at 1 GiB (docs/performance.md: 327-331 GB/s).
  double base_us = 8.4;
  LinkModel nvlink{3.4, 330};
  /// One 400 Gb/s InfiniBand NIC: 50 GB/s on the wire, ~45 GB/s for a ring (an assumption: ~90%).
  LinkModel nic{9.6, 45};
};

/// A cluster made of one link (a measured pair of ranks, e.g. Gloo over loopback): every rank on one node.
ClusterModel SingleLinkCluster(double alpha_us, double busbw_gbps, double base_us = 0);

/// Ring all_reduce time of `bytes` on `n` ranks (the formula in the header); 0 for n <= 1.
double RingAllReduceUs(int64_t bytes, int n, const ClusterModel& cluster);

/// One step as one rank computes it, without the cost of communication (times in microseconds).
struct StepProfile {
  double forward_us = 0;              // step start to backward start (forward and loss)
  double backward_us = 0;             // backward's own computation
  std::vector<double> ready_us;       // bucket k's gradients ready, from backward's start; increasing
  std::vector<int64_t> bucket_bytes;  // bucket k's bytes
  bool fused_optimizer = false;       // optimizer_us per bucket (stepped as each arrives), else one entry
  std::vector<double> optimizer_us;
  double other_us = 0;           // the rest of the step (zero_grad, host gaps)
  double ComputeOnlyUs() const;  // the step if communication were free
};

struct StepPrediction {
  double step_us = 0;
  double exposed_us = 0;                 // time the compute lane waits for communication
  double comm_us = 0;                    // sum of the all_reduce times
  std::vector<double> start_us, end_us;  // each bucket's all_reduce, from backward's start
};

/// Replays DDP's rules on `profile` with `all_reduce_us(bucket)` the time of bucket k's all_reduce.
/// `overlap` false: no all_reduce starts before backward has ended (communication after backward).
StepPrediction PredictStep(const StepProfile& profile, const std::function<double(int bucket)>& all_reduce_us,
                           bool overlap = true);
/// The same with every bucket's all_reduce timed by RingAllReduceUs on `n` ranks of `cluster`.
StepPrediction PredictStepOn(const StepProfile& profile, int n, const ClusterModel& cluster, bool overlap = true);

/// The mean step profile of `timeline` (all its steps and ranks; every step must have the same buckets,
/// each with known bytes). Ready times: where an all_reduce started after the previous one had ended,
/// its gradients were ready then; the last bucket's are ready when backward's computation ends; other
/// buckets' are interpolated on cumulative bytes between those anchors (and are no later than their
/// all_reduce's start). Also returns, through
/// `measured`, the timeline's mean step, exposed time and per-bucket all_reduce times.
struct MeasuredStep {
  double step_us = 0;
  double exposed_us = 0;
  std::vector<double> all_reduce_us;  // per bucket
};
absl::StatusOr<StepProfile> ProfileFromTimeline(const StepTimeline& timeline, MeasuredStep* measured = nullptr);

/// An MLP's parameters as DDP sees them (nn::MLP: per layer a weight [out, in], then a bias; float32).
struct ModelGradients {
  std::vector<int64_t> bytes;  // per parameter, in registration order
  std::vector<size_t> order;   // the order backward produces their gradients (indices into `bytes`)
};
/// For dims d0, d1, ..., dL. The order is reverse registration order (the last layer's bias first): the
/// reducer's first guess, and for an MLP also the order it observes (its bucket table shows the same
/// buckets before and after the rebuild).
ModelGradients MlpGradients(const std::vector<int64_t>& dims);
/// The buckets DDP makes of them (dist/ddp/bucket_assignment.h): bytes per bucket, in launch order.
std::vector<int64_t> BucketBytesFor(const ModelGradients& model, int64_t first_bucket_bytes, int64_t bucket_cap_bytes);

/// `profile` with its gradients re-bucketed under other limits: each parameter's ready time is
/// interpolated on cumulative bytes from the profile's buckets, a new bucket is ready with its last
/// parameter, fused optimizer time is shared out by bytes. InvalidArgument when the parameters' bytes
/// do not add up to the profile's buckets (the profile came from another model).
absl::StatusOr<StepProfile> Rebucket(const StepProfile& profile, const ModelGradients& model,
                                     int64_t first_bucket_bytes, int64_t bucket_cap_bytes);

}  // namespace tinyddp::dist

#endif  // TINYDDP_TOOLS_TIMELINE_STEP_COST_MODEL_H_
