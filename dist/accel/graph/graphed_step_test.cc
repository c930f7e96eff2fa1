// GraphedStep where no CUDA graph can be recorded (the CPU half; graphed_step_gpu_test.cc has the GPU one):
// each fact that forbids a capture gives its own reason, which says what to change; a CPU step, with DDP
// over a real Gloo group or without DDP, runs eagerly every time, gives the eager results, and says why once.
#include "dist/accel/graph/graphed_step.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "dist/ddp/ddp.h"
#include "dist/process_group/gloo/process_group_gloo.h"
#include "dist/store/hash_store.h"
#include "gtest/gtest.h"
#include "nn/mlp.h"
#include "nn/sgd.h"
#include "tensor/cuda_device.h"
#include "tensor/ops.h"

namespace tinyddp::dist {
namespace {

using autograd::Variable;

bool Says(const std::string& reason, const std::string& part) { return absl::StrContains(reason, part); }

TEST(WhyNotCapturable, EachFactGivesItsOwnReasonAndWhatToChange) {
  EXPECT_EQ(WhyNotCapturable(CaptureFacts{}), "") << "a GPU step over NCCL, or without DDP, is captured";
  CaptureFacts f;
  f.built_with_cuda = false;
  EXPECT_TRUE(Says(WhyNotCapturable(f), "built without CUDA")) << WhyNotCapturable(f);
  f = {};
  f.on_gpu = false;
  EXPECT_TRUE(Says(WhyNotCapturable(f), "runs on the CPU")) << WhyNotCapturable(f);
  f = {};
  f.collectives_on_gpu = false;
  EXPECT_TRUE(Says(WhyNotCapturable(f), "not NCCL")) << WhyNotCapturable(f);
  f = {};
  f.find_unused_parameters = true;
  EXPECT_TRUE(Says(WhyNotCapturable(f), "find_unused_parameters")) << WhyNotCapturable(f);
  EXPECT_TRUE(Says(WhyNotCapturable(f), "turn it off")) << WhyNotCapturable(f);
  f = {};
  f.tracer = true;
  EXPECT_TRUE(Says(WhyNotCapturable(f), "trace without --cuda_graph")) << WhyNotCapturable(f);
  f = {};
  f.no_sync = true;
  EXPECT_TRUE(Says(WhyNotCapturable(f), "NoSync")) << WhyNotCapturable(f);
  // The first fact that applies is the one reported.
  f = {};
  f.on_gpu = false;
  f.tracer = true;
  EXPECT_TRUE(Says(WhyNotCapturable(f), "runs on the CPU")) << WhyNotCapturable(f);
}

// A small model and its step on the CPU, through DDP over a one-rank Gloo group or without DDP.
struct CpuTrainer {
  std::shared_ptr<nn::Sequential> model = nn::MLP({13, 17, 5}, nn::MlpOptions{.seed = 3});
  std::unique_ptr<DistributedDataParallel> ddp;
  nn::SGD sgd{model->Parameters(), {.lr = 0.1, .momentum = 0.9}};
  Tensor x = Tensor::Empty({9, 13});
  Tensor y = Tensor::FromVector<int64_t>({0, 1, 2, 3, 4, 0, 1, 2, 3}, {9});

  explicit CpuTrainer(bool with_ddp) {
    ops::NormalInit(x, 0, 1, /*seed=*/21);
    if (!with_ddp) return;
    auto pg = ProcessGroupGloo::Create(std::make_shared<HashStore>(), 0, 1);
    EXPECT_TRUE(pg.ok()) << pg.status();
    auto created = DistributedDataParallel::Create(*model, std::shared_ptr<ProcessGroup>(std::move(*pg)));
    EXPECT_TRUE(created.ok()) << created.status();
    ddp = std::move(*created);
  }
  Tensor Step() {
    sgd.ZeroGrad();
    const Variable logits = ddp ? ddp->Forward(Variable(x)) : model->Forward(Variable(x));
    const Variable loss = autograd::CrossEntropy(logits, y);
    autograd::Backward(loss);
    sgd.Step();
    return loss.data();
  }
};

TEST(GraphedStep, OnTheCpuEveryStepRunsEagerlyGivesTheEagerLossesAndSaysWhyOnce) {
  for (const bool with_ddp : {true, false}) {
    SCOPED_TRACE(with_ddp ? "DDP over Gloo" : "no DDP");
    CpuTrainer eager(with_ddp), graphed_trainer(with_ddp);
    std::vector<std::string> log;
    GraphedStepOptions options;
    options.log = [&log](const std::string& line) { log.push_back(line); };
    GraphedStep graphed(Device::CPU(), [&] { return graphed_trainer.Step(); }, graphed_trainer.ddp.get(),
                        {&graphed_trainer.sgd}, options);
    ASSERT_EQ(log.size(), 1u) << "the reason is given when the GraphedStep is made";
    // The first fact that applies: a build without CUDA says so before it looks at the device.
    const std::string why =
        absl::StrCat(cuda::BuiltWithCuda() ? "the step runs on the CPU" : "this binary was built without CUDA",
                     ", and a CUDA graph records GPU work");
    EXPECT_EQ(log[0], "cuda graph: off, every step runs eagerly: " + why);
    for (int k = 0; k < 8; ++k) {
      const Tensor want = eager.Step();
      absl::StatusOr<Tensor> got = graphed.Run();
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->Item(), want.Item()) << "step " << k;
    }
    EXPECT_EQ(log.size(), 1u) << "said once, not per step";
    EXPECT_EQ(graphed.eager_steps(), 8);
    EXPECT_EQ(graphed.replays(), 0);
    EXPECT_FALSE(graphed.replaying());
    EXPECT_TRUE(Says(graphed.ModeName(), "eager (" + why)) << graphed.ModeName();
    for (size_t i = 0; i < eager.model->Parameters().size(); ++i) {
      EXPECT_EQ(eager.model->Parameters()[i].data().ToVector<float>(),
                graphed_trainer.model->Parameters()[i].data().ToVector<float>());
    }
  }
}

TEST(GraphedStep, AReasonTheCallerGivesSendsEveryStepToEagerAndIsLogged) {
  std::vector<std::string> log;
  GraphedStepOptions options;
  options.log = [&log](const std::string& line) { log.push_back(line); };
  options.eager_reason = "the step gathers ZeRO-1 shards with a host wait";
  int calls = 0;
  GraphedStep graphed(Device::CUDA(0), [&calls] { return Tensor::Full({1}, ++calls); }, nullptr, {}, options);
  ASSERT_EQ(log.size(), 1u);
  // A GPU step without DDP has nothing against capture but the caller's reason (or, without CUDA, that).
  EXPECT_TRUE(Says(log[0], cuda::BuiltWithCuda() ? "ZeRO-1 shards" : "built without CUDA")) << log[0];
  for (int k = 1; k <= 4; ++k) {
    absl::StatusOr<Tensor> got = graphed.Run();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->Item(), k) << "each step calls the function: nothing is recorded";
  }
  EXPECT_FALSE(graphed.graph().captured());
}

TEST(CudaGraph, CaptureWithoutAGpuIsAClearErrorNotACrash) {
  if (cuda::DeviceCount() > 0) GTEST_SKIP() << "a GPU is visible: graphed_step_gpu_test covers this machine";
  cuda::CudaGraph graph;
  bool ran = false;
  const absl::Status s = graph.Capture(cuda::Stream(), [&] { ran = true; });
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(Says(std::string(s.message()), "GPU work")) << s;
  EXPECT_FALSE(ran) << "nothing is recorded, so the body does not run";
  EXPECT_FALSE(graph.captured());
  EXPECT_EQ(graph.Replay().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tinyddp::dist
