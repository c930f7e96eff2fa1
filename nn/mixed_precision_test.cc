// bf16 mixed precision (nn/precision.h) end to end on the CPU: an MLP set to bf16 trains (the loss goes
// down, the problem is learnt), its parameters stay float32 leaves with float32 gradients, the optimizer
// leaves every compute copy equal to its parameter rounded to bfloat16 after every step, and checkpoints
// hold the float32 masters under PyTorch's names.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/checkpoint.h"
#include "nn/loss.h"
#include "nn/mlp.h"
#include "nn/safetensors.h"
#include "nn/sgd.h"
#include "tensor/ops.h"

namespace tinyddp::nn {
namespace {

struct Data {
  Tensor x, labels;
};

// 512 points in [-1, 1]^10, labelled by the argmax of a fixed random linear map to 4 classes.
Data MakeData() {
  Data d;
  d.x = Tensor::Empty({512, 10});
  ops::UniformInit(d.x, -1.0, 1.0, 100);
  Tensor teacher = Tensor::Empty({4, 10});
  ops::UniformInit(teacher, -1.0, 1.0, 101);
  d.labels = ops::ArgMax(ops::MatMul(d.x, teacher, false, true));
  return d;
}

std::shared_ptr<Sequential> Bf16Mlp(const std::vector<int64_t>& dims, uint64_t seed = 0) {
  MlpOptions options;
  options.seed = seed;
  options.precision = Precision::kBFloat16;
  return MLP(dims, options);
}

double Accuracy(Module& model, const Data& d) {
  autograd::NoGradGuard no_grad;
  const std::vector<int64_t> predicted = ops::ArgMax(model(Variable(d.x)).data()).ToVector<int64_t>();
  const std::vector<int64_t> labels = d.labels.ToVector<int64_t>();
  int correct = 0;
  for (size_t i = 0; i < labels.size(); ++i) correct += predicted[i] == labels[i];
  return static_cast<double>(correct) / labels.size();
}

// Every parameter is a float32 leaf and its compute copy holds exactly its value rounded to bfloat16.
void ExpectCopiesAreTheRoundedMasters(const Module& model, const std::string& when) {
  const auto copies = model.ComputeCopies();
  ASSERT_EQ(copies.size(), model.Parameters().size()) << when;
  for (const auto& [param, copy] : copies) {
    ASSERT_EQ(param.dtype(), DType::kFloat32) << when;
    ASSERT_EQ(copy.dtype(), DType::kBFloat16) << when;
    const std::vector<float> master = param.data().ToVector<float>();
    const std::vector<BFloat16> bits = copy.ToVector<BFloat16>();
    ASSERT_EQ(master.size(), bits.size());
    for (size_t i = 0; i < master.size(); ++i) {
      ASSERT_EQ(bits[i].bits, BFloat16(master[i]).bits) << when << ", " << param.name() << " element " << i;
    }
  }
}

// Trains full-batch, checking the copies after every step; returns (first loss, last loss).
std::pair<double, double> TrainChecked(Module& model, Optimizer& optimizer, const Data& d, int steps) {
  CrossEntropyLoss loss_fn;
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    optimizer.ZeroGrad();
    const Variable logits = model(Variable(d.x));
    EXPECT_EQ(logits.dtype(), DType::kBFloat16);
    const Variable loss = loss_fn(logits, d.labels);
    EXPECT_EQ(loss.dtype(), DType::kFloat32);
    autograd::Backward(loss);
    for (const Variable& p : model.Parameters()) EXPECT_EQ(p.grad().dtype(), DType::kFloat32) << p.name();
    optimizer.Step();
    ExpectCopiesAreTheRoundedMasters(model, absl::StrCat("after step ", step));
    if (::testing::Test::HasFatalFailure()) break;
    (step == 0 ? first : last) = loss.data().Item();
  }
  return {first, last};
}

TEST(MixedPrecisionTraining, Bf16MlpWithSgdMomentumLearnsAndKeepsCopiesEqualToTheRoundedMasters) {
  const Data d = MakeData();
  auto model = Bf16Mlp({10, 32, 4});
  ExpectCopiesAreTheRoundedMasters(*model, "at init");
  SGD sgd(model->Parameters(), {.lr = 0.2, .momentum = 0.9});
  sgd.SetComputeCopies(model->ComputeCopies());
  const auto [first, last] = TrainChecked(*model, sgd, d, 300);
  EXPECT_GT(first, 1.2);  // about log(4) at init
  EXPECT_LT(last, 0.3 * first);
  EXPECT_GT(Accuracy(*model, d), 0.9);
}

TEST(MixedPrecisionTraining, Bf16MlpWithAdamWAndGeluLearns) {
  const Data d = MakeData();
  MlpOptions options;
  options.activation = Activation::kGELU;
  options.precision = Precision::kBFloat16;
  auto model = MLP({10, 32, 32, 4}, options);
  AdamW adamw(model->Parameters(), AdamWOptions());
  adamw.set_lr(0.01);
  adamw.SetComputeCopies(model->ComputeCopies());
  const auto [first, last] = TrainChecked(*model, adamw, d, 200);
  EXPECT_LT(last, 0.3 * first);
  EXPECT_GT(Accuracy(*model, d), 0.9);
}

TEST(MixedPrecisionTraining, Bf16FollowsFloat32TrainingWithinBfloat16Tolerance) {
  // The same model, data and optimizer in both precisions: the bf16 run computes the same function with
  // ~3 significant digits, so after a few steps its float32 masters are close to the float32 run's.
  const Data d = MakeData();
  auto fp32 = MLP({10, 32, 32, 4}), bf16 = Bf16Mlp({10, 32, 32, 4});
  SGD sgd32(fp32->Parameters(), {.lr = 0.1, .momentum = 0.9}), sgd16(bf16->Parameters(), {.lr = 0.1, .momentum = 0.9});
  sgd16.SetComputeCopies(bf16->ComputeCopies());
  CrossEntropyLoss loss_fn;
  for (int step = 0; step < 5; ++step) {
    for (auto [model, sgd] : {std::pair<Module*, SGD*>{fp32.get(), &sgd32}, {bf16.get(), &sgd16}}) {
      sgd->ZeroGrad();
      autograd::Backward(loss_fn((*model)(Variable(d.x)), d.labels));
      sgd->Step();
    }
  }
  const auto p32 = fp32->Parameters(), p16 = bf16->Parameters();
  for (size_t i = 0; i < p32.size(); ++i) {
    const std::vector<float> a = p32[i].data().ToVector<float>(), b = p16[i].data().ToVector<float>();
    double max_diff = 0, max_moved = 0;
    const std::vector<float> init = MLP({10, 32, 32, 4})->Parameters()[i].data().ToVector<float>();
    for (size_t k = 0; k < a.size(); ++k) {
      max_diff = std::max(max_diff, std::abs(double{a[k]} - b[k]));
      max_moved = std::max(max_moved, std::abs(double{a[k]} - init[k]));
    }
    EXPECT_GT(max_moved, 1e-3) << p32[i].name() << " trained";
    EXPECT_LT(max_diff, 0.05 * max_moved) << p32[i].name();
  }
}

TEST(MixedPrecision, SequentialRunsLinearFollowedByReluAsOneNode) {
  auto model = Bf16Mlp({6, 5, 5, 3});
  Tensor x = Tensor::Empty({4, 6});
  ops::UniformInit(x, -1, 1, 3);
  // Walk the graph from the output, following each op's first input: the model's ops, last first.
  std::vector<std::string> ops_seen;
  for (auto node = (*model)(Variable(x)).grad_fn(); node != nullptr; node = node->next()[0]) {
    ops_seen.push_back(node->name());
  }
  EXPECT_EQ(ops_seen, (std::vector<std::string>{"Linear", "LinearInput", "LinearRelu", "LinearInput", "LinearRelu"}))
      << "the float32 input needs no gradient, so its Cast and the first LinearInput are not recorded";
}

TEST(MixedPrecision, Bf16ForwardIsTheFloat32ForwardWithinBfloat16Rounding) {
  auto fp32 = MLP({31, 17, 9}), bf16 = Bf16Mlp({31, 17, 9});  // same seed: same float32 weights
  Tensor x = Tensor::Empty({13, 31});
  ops::UniformInit(x, -1, 1, 4);
  autograd::NoGradGuard no_grad;
  const std::vector<float> want = (*fp32)(Variable(x)).data().ToVector<float>();
  const Tensor got = (*bf16)(Variable(x)).data();
  ASSERT_EQ(got.dtype(), DType::kBFloat16);
  const std::vector<BFloat16> g = got.ToVector<BFloat16>();
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(static_cast<float>(g[i]), want[i], 0.02 + 0.02 * std::abs(want[i])) << i;
  }
}

TEST(MixedPrecision, CheckpointHoldsFloat32MastersUnderTheFloat32ModelsNames) {
  auto model = Bf16Mlp({6, 5, 3}, /*seed=*/1);
  const std::string path = absl::StrCat(::testing::TempDir(), "/bf16_mlp.safetensors");
  ASSERT_TRUE(SaveModule(*model, path).ok());
  absl::StatusOr<SafetensorsContents> file = LoadSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<std::string> names;
  for (const auto& [name, t] : file->tensors) names.push_back(name);
  std::vector<std::string> fp32_names;
  for (const auto& [name, p] : MLP({6, 5, 3})->NamedParameters()) fp32_names.push_back(name);
  std::sort(fp32_names.begin(), fp32_names.end());
  EXPECT_EQ(names, fp32_names);
  for (const auto& [name, p] : model->NamedParameters()) {
    const Tensor& saved = file->tensors.at(name);
    EXPECT_EQ(saved.dtype(), DType::kFloat32) << name;
    EXPECT_EQ(saved.ToVector<float>(), p.data().ToVector<float>()) << name << ": the masters, not the copies";
  }
  // Loading into a bf16 model (another seed) casts its compute copies from the loaded masters.
  auto other = Bf16Mlp({6, 5, 3}, /*seed=*/2);
  ASSERT_TRUE(LoadModule(*other, path).ok());
  ExpectCopiesAreTheRoundedMasters(*other, "after LoadModule");
  EXPECT_EQ(other->Parameters()[0].data().ToVector<float>(), model->Parameters()[0].data().ToVector<float>());
}

TEST(MixedPrecision, SetPrecisionBackToFp32DropsTheCopiesAndComputesInFloat32) {
  auto model = Bf16Mlp({6, 5, 3});
  EXPECT_EQ(model->ComputeCopies().size(), 4u);
  model->SetPrecision(Precision::kFloat32);
  EXPECT_TRUE(model->ComputeCopies().empty());
  EXPECT_EQ(model->precision(), Precision::kFloat32);
  EXPECT_EQ((*model)(Variable(Tensor::Zeros({2, 6}))).dtype(), DType::kFloat32);
}

TEST(MixedPrecision, SetComputeCopyPutsACopyIntoAGivenViewThatForwardAndRefreshUse) {
  // ZeRO-1's use: the copies of several parameters as views into one flat bfloat16 buffer.
  auto model = Bf16Mlp({6, 5, 3});
  const Variable input(Tensor::Full({2, 6}, 0.5, DType::kFloat32));
  auto forward = [&] {  // the output's bytes (bfloat16)
    autograd::NoGradGuard no_grad;
    const Tensor y = (*model)(input).data();
    return std::string(static_cast<const char*>(y.data_ptr()), y.nbytes());
  };
  const std::string before = forward();
  Tensor flat = Tensor::Zeros({64}, DType::kBFloat16);
  int64_t offset = 1;  // not at the start: a real view
  for (const auto& [param, copy] : model->ComputeCopies()) {
    model->SetComputeCopy(param, flat.Rows(offset, offset + param.numel()).View(param.shape()));
    offset += param.numel();
  }
  ExpectCopiesAreTheRoundedMasters(*model, "after SetComputeCopy");
  for (const auto& [param, copy] : model->ComputeCopies()) EXPECT_TRUE(copy.SharesStorageWith(flat)) << param.name();
  EXPECT_EQ(forward(), before);
  // Writing the flat buffer is what the layers see; RefreshComputeCopies writes into it, not elsewhere.
  ops::Fill(flat, 0.0);
  EXPECT_NE(forward(), before);
  model->RefreshComputeCopies();
  EXPECT_EQ(forward(), before);
  EXPECT_DEATH(model->SetComputeCopy(model->Parameters()[0], Tensor::Zeros({4, 4}, DType::kBFloat16)),
               "must be bfloat16 \\[5, 6\\]");
}

TEST(MixedPrecision, MisuseStopsWithAMessage) {
  MlpOptions f64;
  f64.dtype = DType::kFloat64;
  EXPECT_DEATH(MLP({4, 3}, f64)->SetPrecision(Precision::kBFloat16), "keeps float32 master weights");
  auto model = Bf16Mlp({4, 3});
  SGD sgd(model->Parameters(), {.lr = 0.1});
  const Variable w = model->Parameters()[0];
  EXPECT_DEATH(sgd.SetComputeCopies({{w, Tensor::Zeros(w.shape())}}), "must be a bfloat16 \\[3, 4\\] tensor");
  EXPECT_FALSE(ParsePrecision("fp16").ok());
  EXPECT_EQ(ParsePrecision("bf16").value(), Precision::kBFloat16);
  EXPECT_EQ(ParsePrecision("fp32").value(), Precision::kFloat32);
}

}  // namespace
}  // namespace tinyddp::nn
