// The step cost model (tools/timeline/step_cost_model.h): the ring formula, DDP's rules replayed,
// and a trace turned into the compute profile both need.
#include "tools/timeline/step_cost_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "dist/ddp/bucket_assignment.h"

namespace tinyddp::dist {

ClusterModel SingleLinkCluster(double alpha_us, double busbw_gbps, double base_us) {
  ClusterModel c;
  c.gpus_per_node = 1 << 30;  // one node, however many ranks
  c.base_us = base_us;
  c.nvlink = {alpha_us, busbw_gbps};
  return c;
}

double RingAllReduceUs(int64_t bytes, int n, const ClusterModel& c) {
  if (n <= 1) return 0;
  const int nodes = (n + c.gpus_per_node - 1) / c.gpus_per_node;
  const int steps = 2 * (n - 1), inter_steps = 2 * (nodes - 1);
  const double busbw =
      nodes == 1 ? c.nvlink.busbw_gbps : std::min(c.nvlink.busbw_gbps, c.nics_per_node * c.nic.busbw_gbps);
  const double latency = c.base_us + (steps - inter_steps) * c.nvlink.alpha_us + inter_steps * c.nic.alpha_us;
  return latency + 2.0 * (n - 1) / n * static_cast<double>(bytes) / (busbw * 1e3);  // GB/s = 1e3 bytes/us
}

double StepProfile::ComputeOnlyUs() const {
  return forward_us + backward_us + std::accumulate(optimizer_us.begin(), optimizer_us.end(), 0.0) + other_us;
}

StepPrediction PredictStep(const StepProfile& p, const std::function<double(int bucket)>& all_reduce_us, bool overlap) {
  StepPrediction out;
  double stream_free = 0;  // one communication stream: bucket k after bucket k-1
  for (size_t k = 0; k < p.ready_us.size(); ++k) {
    const double cost = all_reduce_us(static_cast<int>(k));
    const double start = std::max(overlap ? p.ready_us[k] : p.backward_us, stream_free);
    out.start_us.push_back(start);
    out.end_us.push_back(start + cost);
    out.comm_us += cost;
    stream_free = start + cost;
  }
  const double optimizer = std::accumulate(p.optimizer_us.begin(), p.optimizer_us.end(), 0.0);
  double finish = p.backward_us;  // from backward's start to the step's last computation
  if (p.fused_optimizer && !out.end_us.empty()) {
    for (size_t k = 0; k < out.end_us.size(); ++k) {
      finish = std::max(finish, out.end_us[k]) + (k < p.optimizer_us.size() ? p.optimizer_us[k] : 0.0);
    }
  } else {
    finish = std::max(finish, stream_free) + optimizer;
  }
  out.exposed_us = std::max(0.0, finish - p.backward_us - optimizer);
  out.step_us = p.forward_us + finish + p.other_us;
  return out;
}

StepPrediction PredictStepOn(const StepProfile& p, int n, const ClusterModel& cluster, bool overlap) {
  return PredictStep(
      p, [&](int k) { return RingAllReduceUs(p.bucket_bytes[k], n, cluster); }, overlap);
}

namespace {

// y at x on the piecewise-linear curve through `points` (sorted by x), held flat beyond its ends.
double Interpolate(const std::vector<std::pair<double, double>>& points, double x) {
  if (x <= points.front().first) return points.front().second;
  for (size_t i = 1; i < points.size(); ++i) {
    if (x <= points[i].first) {
      const auto& [x0, y0] = points[i - 1];
      const auto& [x1, y1] = points[i];
      return x1 > x0 ? y0 + (y1 - y0) * (x - x0) / (x1 - x0) : y1;
    }
  }
  return points.back().second;
}

// Ready times of one rank's step, from backward's start: the anchors of the header, interpolated.
std::vector<double> ReadyTimes(const std::vector<BucketComm>& comm, const std::vector<int64_t>& bytes, double backward,
                               double tolerance, int64_t backward_start) {
  const size_t n = comm.size();
  std::vector<std::pair<double, double>> anchors = {{0.0, 0.0}};  // (cumulative bytes, ready time)
  double cumulative = 0;
  for (size_t k = 0; k < n; ++k) {
    cumulative += static_cast<double>(bytes[k]);
    const double start = static_cast<double>(comm[k].start_us - backward_start);
    const bool waited_for_gradients = k == 0 || comm[k].start_us > comm[k - 1].end_us + tolerance;
    if (k + 1 == n) {
      anchors.emplace_back(cumulative, backward);  // the last gradients end backward's computation
    } else if (waited_for_gradients) {
      anchors.emplace_back(cumulative, std::min(start, backward));
    }
  }
  std::vector<double> ready;
  cumulative = 0;
  for (size_t k = 0; k < n; ++k) {
    cumulative += static_cast<double>(bytes[k]);
    // A bucket that queued was ready no later than it started.
    const double start = static_cast<double>(comm[k].start_us - backward_start);
    const double estimate = std::min(Interpolate(anchors, cumulative), std::max(start, 0.0));
    ready.push_back(std::max(ready.empty() ? 0.0 : ready.back(), estimate));
  }
  return ready;
}

}  // namespace

absl::StatusOr<StepProfile> ProfileFromTimeline(const StepTimeline& t, MeasuredStep* measured) {
  StepProfile sum;
  MeasuredStep m;
  int count = 0;
  size_t buckets = 0;
  for (const auto& step : t.steps) {
    for (const RankStep& r : step) {
      const TraceSpan* backward = nullptr;
      for (const TraceSpan& s : r.compute) {
        if (s.name == "backward") {
          backward = &s;
          break;
        }
      }
      if (backward == nullptr || r.backward_compute.empty()) continue;
      std::vector<BucketComm> comm = r.comm;
      std::stable_sort(comm.begin(), comm.end(),
                       [](const BucketComm& a, const BucketComm& b) { return a.bucket < b.bucket; });
      if (count == 0) buckets = comm.size();
      if (comm.size() != buckets) continue;  // a step unlike the others (e.g. before the bucket rebuild)
      std::vector<int64_t> bytes;
      for (const BucketComm& c : comm) {
        if (c.bytes <= 0) {
          return absl::FailedPreconditionError(
              absl::StrCat("bucket ", c.bucket,
                           " has no size in the trace: give the buckets' bytes (--bucket_bytes) or the "
                           "MLP's layer sizes (--dims)"));
        }
        bytes.push_back(c.bytes);
      }
      const double backward_us = static_cast<double>(r.backward_compute.front().length_us());
      const double tolerance = std::max(2.0, 0.002 * static_cast<double>(r.step_us()));
      const std::vector<double> ready = ReadyTimes(comm, bytes, backward_us, tolerance, backward->start_us);
      std::vector<double> fused(buckets, 0.0);
      double after = 0;
      bool any_fused = false;
      for (const TraceSpan& s : r.compute) {
        if (s.name.rfind("optimizer", 0) != 0) continue;
        const bool nested = s.start_us > backward->start_us && s.end_us <= backward->end_us;
        if (nested && s.index >= 0 && s.index < static_cast<int64_t>(buckets)) {
          fused[s.index] += static_cast<double>(s.duration_us());
          any_fused = true;
        } else if (!nested) {
          after += static_cast<double>(s.duration_us());
        }
      }
      if (count == 0) {
        sum.bucket_bytes = bytes;
        sum.ready_us.assign(buckets, 0);
        sum.optimizer_us.assign(any_fused ? buckets : 1, 0);
        sum.fused_optimizer = any_fused;
        m.all_reduce_us.assign(buckets, 0);
      }
      sum.forward_us += static_cast<double>(backward->start_us - r.start_us);
      sum.backward_us += backward_us;
      for (size_t k = 0; k < buckets; ++k) {
        sum.ready_us[k] += ready[k];
        m.all_reduce_us[k] += static_cast<double>(comm[k].duration_us());
        if (any_fused) sum.optimizer_us[k] += fused[k];
      }
      if (!any_fused) sum.optimizer_us[0] += after;
      sum.other_us += std::max(0.0, static_cast<double>(r.end_us - backward->end_us) - after);
      m.step_us += static_cast<double>(r.step_us());
      m.exposed_us += static_cast<double>(r.ExposedUs());
      ++count;
    }
  }
  if (count == 0) {
    return absl::FailedPreconditionError("no step of the trace has a backward span on its compute lane");
  }
  const double c = count;
  sum.forward_us /= c;
  sum.backward_us /= c;
  sum.other_us /= c;
  for (double& v : sum.ready_us) v /= c;
  for (double& v : sum.optimizer_us) v /= c;
  for (double& v : m.all_reduce_us) v /= c;
  m.step_us /= c;
  m.exposed_us /= c;
  if (measured != nullptr) *measured = m;
  return sum;
}

ModelGradients MlpGradients(const std::vector<int64_t>& dims) {
  ModelGradients g;
  for (size_t l = 0; l + 1 < dims.size(); ++l) {
    g.bytes.push_back(dims[l] * dims[l + 1] * 4);  // weight [out, in], float32
    g.bytes.push_back(dims[l + 1] * 4);            // bias
  }
  g.order = ReverseOrder(g.bytes.size());
  return g;
}

namespace {

std::vector<std::vector<size_t>> Buckets(const ModelGradients& model, int64_t first, int64_t cap) {
  std::vector<BucketParam> params;
  for (int64_t b : model.bytes) params.push_back({b, DType::kFloat32});
  return AssignBuckets(params, model.order, first, cap);
}

}  // namespace

std::vector<int64_t> BucketBytesFor(const ModelGradients& model, int64_t first, int64_t cap) {
  std::vector<int64_t> out;
  for (const std::vector<size_t>& bucket : Buckets(model, first, cap)) {
    int64_t bytes = 0;
    for (size_t p : bucket) bytes += model.bytes[p];
    out.push_back(bytes);
  }
  return out;
}

absl::StatusOr<StepProfile> Rebucket(const StepProfile& profile, const ModelGradients& model, int64_t first,
                                     int64_t cap) {
  const int64_t traced = std::accumulate(profile.bucket_bytes.begin(), profile.bucket_bytes.end(), int64_t{0});
  const int64_t params = std::accumulate(model.bytes.begin(), model.bytes.end(), int64_t{0});
  if (traced != params) {
    return absl::InvalidArgumentError(absl::StrCat("the model's parameters hold ", params,
                                                   " bytes of gradient but the trace's buckets ", traced,
                                                   ": give the layer sizes of the model that was traced"));
  }
  // Each parameter's ready time, on the curve through (cumulative bytes, ready time) of the buckets.
  std::vector<std::pair<double, double>> curve = {{0.0, 0.0}};
  double cumulative = 0;
  for (size_t k = 0; k < profile.bucket_bytes.size(); ++k) {
    cumulative += static_cast<double>(profile.bucket_bytes[k]);
    curve.emplace_back(cumulative, profile.ready_us[k]);
  }
  std::vector<double> param_ready(model.bytes.size(), 0.0);
  cumulative = 0;
  for (size_t p : model.order) {
    cumulative += static_cast<double>(model.bytes[p]);
    param_ready[p] = Interpolate(curve, cumulative);
  }
  StepProfile out = profile;
  out.ready_us.clear();
  out.bucket_bytes.clear();
  for (const std::vector<size_t>& bucket : Buckets(model, first, cap)) {
    int64_t bytes = 0;
    double ready = 0;
    for (size_t p : bucket) {
      bytes += model.bytes[p];
      ready = std::max(ready, param_ready[p]);
    }
    out.bucket_bytes.push_back(bytes);
    out.ready_us.push_back(std::max(ready, out.ready_us.empty() ? 0.0 : out.ready_us.back()));
  }
  if (profile.fused_optimizer) {
    const double total = std::accumulate(profile.optimizer_us.begin(), profile.optimizer_us.end(), 0.0);
    out.optimizer_us.clear();
    for (int64_t b : out.bucket_bytes) out.optimizer_us.push_back(total * static_cast<double>(b) / traced);
  }
  return out;
}

}  // namespace tinyddp::dist
