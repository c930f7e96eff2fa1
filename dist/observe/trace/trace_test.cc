// The Tracer (trace.h) and TracedCommHook (traced_comm_hook.h) on real processes with Gloo: one trace file
// for the job, a process per rank, the training loop's spans, and every bucket's all_reduce on the comm
// track with the path that carried it, attached to DDP only through its comm hook.
#include "dist/observe/trace/trace.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "dist/ddp/comm_hooks.h"
#include "dist/ddp/ddp.h"
#include "dist/observe/trace/traced_comm_hook.h"
#include "dist/testing/ddp_testing.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "nn/mlp.h"

namespace tinyddp::dist {
namespace {

using autograd::Variable;
using ddp_testing::Batch;
using testing::RankContext;
using testing::RunOnRanks;

TEST(Tracer, WritesOneProcessPerRankWithForwardBackwardAndEveryBucketsAllReduce) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/ddp_trace.json");
  std::remove(path.c_str());
  RunOnRanks(2, [&path](const RankContext& ctx) {
    auto pg = ddp_testing::MakeGlooGroup(ctx);
    ASSERT_NE(pg, nullptr);
    nn::MlpOptions mo;
    mo.seed = 9;
    auto model = nn::MLP({13, 17, 11, 5}, mo);
    Tracer tracer(ctx.rank, Device::CPU());
    DdpOptions options;
    options.first_bucket_bytes = 256;
    options.bucket_cap_bytes = 700;
    options.comm_hook = TracedCommHook(AllReduceHook(), &tracer);  // each bucket's all_reduce
    auto ddp = DistributedDataParallel::Create(*model, pg, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    for (int step = 0; step < 2; ++step) {
      const Batch batch = ddp_testing::MakeBatch(5, 13, 5, 500 + 17 * ctx.rank + step);
      Variable loss;
      {
        Tracer::Span forward = tracer.Scope("forward", step);  // the training loop's phases, as ddp_mlp's
        loss = autograd::CrossEntropy((*ddp)->Forward(Variable(batch.x)), batch.labels);
      }
      Tracer::Span backward = tracer.Scope("backward", step);
      autograd::Backward(loss);
    }
    ASSERT_TRUE(tracer.WriteChromeTrace(pg.get(), path).ok());
  });
  if (testing::IsRankProcess()) return;

  std::ifstream file(path);
  ASSERT_TRUE(file.good()) << path;
  const nlohmann::json trace = nlohmann::json::parse(file);
  std::map<int, std::map<std::string, int>> counts;  // pid -> name -> complete events
  std::map<int, std::vector<int64_t>> buckets;        // pid -> all_reduce bucket indices in order
  std::map<int, int64_t> comm_end;                    // pid -> end of the last all_reduce seen
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    EXPECT_GE(e.at("dur").get<int64_t>(), 0);
    const int pid = e.at("pid").get<int>();
    ++counts[pid][e.at("name").get<std::string>()];
    if (e.at("name") == "all_reduce") {
      EXPECT_EQ(e.at("tid").get<int>(), static_cast<int>(TraceTrack::kComm));
      EXPECT_EQ(e.at("args").at("path"), "Gloo all_reduce") << "each all_reduce names the path that carried it";
      buckets[pid].push_back(e.at("args").at("i").get<int64_t>());
      // Gloo's one worker thread runs them one after another: each starts after the previous one ended.
      const int64_t ts = e.at("ts").get<int64_t>();
      EXPECT_GE(ts, comm_end[pid]) << "all_reduce intervals overlap on rank " << pid;
      comm_end[pid] = ts + e.at("dur").get<int64_t>();
    }
  }
  ASSERT_EQ(counts.size(), 2u) << "one process per rank";
  for (int pid : {0, 1}) {
    EXPECT_EQ(counts[pid]["forward"], 2) << "rank " << pid;
    EXPECT_EQ(counts[pid]["backward"], 2) << "rank " << pid;
    // Three buckets per step (the rebuild keeps three), each all-reduced once, in bucket order.
    EXPECT_EQ(buckets[pid], (std::vector<int64_t>{0, 1, 2, 0, 1, 2})) << "rank " << pid;
  }
}

}  // namespace
}  // namespace tinyddp::dist
