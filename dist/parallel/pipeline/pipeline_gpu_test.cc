// The pipeline path on one GPU (tag gpu; skips without one): --pp=1 --microbatches=M runs ddp_mlp's training
// through PipelineRuntime with no messages. On CUDA tensors it must give the bits of the plain gradient-accumulation
// loop on the same GPU, fp32 and bf16, for 1F1B and ZB-H1 (whose W's run the same GEMMs later), and its step cost
// is the plain loop's (the lead times `ddp_mlp --nproc=1 --microbatches=1` against the plain step).
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "dist/parallel/pipeline/pipeline_runtime.h"
#include "dist/parallel/pipeline/schedule.h"
#include "dist/parallel/pipeline/stage_plan.h"
#include "dist/testing/ddp_testing.h"
#include "gtest/gtest.h"
#include "nn/loss.h"
#include "nn/mlp.h"
#include "nn/sgd.h"
#include "tensor/cuda_device.h"
#include "tensor/ops.h"

namespace tinyddp::dist::pipeline {
namespace {

using autograd::Variable;

std::vector<float> Trained(bool pipeline, ScheduleKind kind, nn::Precision precision) {
  const Device gpu = Device::CUDA(0);
  auto model = nn::MLP({64, 96, 80, 10}, {.device = gpu, .seed = 5, .precision = precision});
  nn::SGD sgd(model->Parameters(), {.lr = 0.1, .momentum = 0.9});
  sgd.SetComputeCopies(model->ComputeCopies());
  std::unique_ptr<PipelineRuntime> runtime;
  std::vector<std::shared_ptr<PipelineStage>> stages;
  if (pipeline) {
    auto plan = StagePlan::Make(*model, 1);
    stages = {std::make_shared<PipelineStage>(*model, plan->stages[0])};
    runtime = *PipelineRuntime::Create(*MakeSchedule({.kind = kind, .ranks = 1, .microbatches = 4}), nullptr, stages,
                                       [](const Variable& logits, const Tensor& labels) {
                                         return nn::CrossEntropyLoss()(logits, labels);
                                       });
  }
  for (int step = 0; step < 3; ++step) {
    const ddp_testing::Batch batch = ddp_testing::MakeBatch(32, 64, 10, 40 + step, gpu);
    sgd.ZeroGrad();
    if (pipeline) {
      EXPECT_TRUE(runtime->Step(*SplitBatch(batch.x, batch.labels, 4)).ok());
    } else {
      for (int k = 0; k < 4; ++k) {
        Variable loss = nn::CrossEntropyLoss()(model->Forward(Variable(batch.x.Rows(8 * k, 8 * k + 8))),
                                               batch.labels.Rows(8 * k, 8 * k + 8));
        autograd::Backward(loss, Tensor::Full(loss.shape(), 0.25, loss.dtype(), loss.device()));
      }
    }
    sgd.Step();
  }
  std::vector<float> all;
  for (const Variable& p : model->Parameters()) {
    const std::vector<float> v = p.data().To(Device::CPU()).ToVector<float>();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

TEST(PipelineGpu, OneStageOnAGpuIsThePlainAccumulationLoopBitForBit) {
  if (cuda::DeviceCount() < 1) GTEST_SKIP() << "needs a CUDA device";
  for (nn::Precision precision : {nn::Precision::kFloat32, nn::Precision::kBFloat16}) {
    const std::vector<float> plain = Trained(false, ScheduleKind::kOneFOneB, precision);
    for (ScheduleKind kind : {ScheduleKind::kOneFOneB, ScheduleKind::kZeroBubble}) {
      const std::vector<float> piped = Trained(true, kind, precision);
      ASSERT_EQ(piped.size(), plain.size());
      EXPECT_EQ(std::memcmp(piped.data(), plain.data(), plain.size() * sizeof(float)), 0)
          << ScheduleName(kind) << (precision == nn::Precision::kBFloat16 ? " bf16" : " fp32");
    }
  }
}

}  // namespace
}  // namespace tinyddp::dist::pipeline
