// ddp_minimal: data-parallel training in one file, nothing else. The C++ twin of section 5 of the NCCL
// tutorial ("NCCL实战：5分钟搞定PyTorch多GPU分布式训练Demo"): init_process_group, a model, a
// DistributedSampler with a DataLoader, DistributedDataParallel, the five lines of a training step, and
// the test accuracy all_reduced so every rank prints the same number.
//
//   ./bazelw run //examples:ddp_minimal                  # 2 CPU ranks over Gloo, or one rank per GPU over NCCL
//   TINYDDP_NPROC=3 ./bazelw run //examples:ddp_minimal  # 3 ranks
//   ./bazelw run //dist/launch -- --nproc_per_node=2 bazel-bin/examples/ddp_minimal   # under the launcher
//
// It uses only the core (store, process group, DDP, launcher) and the tensor/autograd/nn/data packages;
// `examples/ddp_mlp.cc` is the full trainer (flags, checkpoints, tracing, bf16, the ladder, ZeRO, ...).
//
// What runs on every rank (the same program; the rank comes from the environment):
//   1. SpawnWorkersIfNeeded: started by hand, this process becomes a small launcher (torchrun) for itself.
//   2. InitProcessGroup: RANK/WORLD_SIZE/MASTER_ADDR -> the job's TCP store -> NCCL (GPUs) or Gloo (CPU).
//   3. The same MLP on every rank; DistributedDataParallel broadcasts rank 0's weights.
//   4. Each epoch: the sampler gives this rank its 1/N of a shuffled permutation; per batch, the five lines.
//      Backward fires DDP's hooks: buckets of gradients are all_reduced (AVG) while backward still runs.
//   5. Evaluation: every rank scores its shard of the test set; one all_reduce sums the counts.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "autograd/engine.h"         // Backward
#include "autograd/functions.h"      // CrossEntropy
#include "autograd/grad_mode.h"      // NoGradGuard
#include "base/status_macros.h"      // RETURN_IF_ERROR, ASSIGN_OR_RETURN
#include "data/data_loader.h"        // DataLoader
#include "data/distributed_sampler.h"  // DistributedSampler
#include "data/fashion_mnist.h"      // LoadFashionMnist
#include "dist/ddp/ddp.h"            // DistributedDataParallel
#include "dist/init.h"               // InitProcessGroup
#include "dist/launch/spawn.h"       // SpawnWorkersIfNeeded
#include "nn/mlp.h"                  // MLP
#include "nn/sgd.h"                  // SGD
#include "tensor/cuda_device.h"      // CurrentDevice
#include "tensor/ops.h"              // ArgMax

namespace tinyddp {
namespace {

constexpr int kEpochs = 2;
constexpr int64_t kBatchSize = 64;  // per rank: the global batch is kBatchSize * world size
constexpr double kLearningRate = 0.05;
const char* const kDataDir = "/usr/share/datasets/fashion-mnist";  // Debian's dataset-fashion-mnist

// Correct predictions and examples scored on this rank's shard of the test set.
absl::StatusOr<std::vector<double>> ScoreShard(nn::Module& model, const data::Dataset& test,
                                               const data::DistributedSampler& shard, Device device) {
  autograd::NoGradGuard no_grad;  // evaluation builds no graph
  std::vector<double> counts = {0, 0};
  const std::vector<int64_t> indices = shard.Indices();
  // Without drop_last the sampler pads the last ranks' shards with repeats; count each example once.
  const int64_t real = shard.num_real_samples();
  for (int64_t begin = 0; begin < real; begin += 1000) {
    const int64_t end = std::min(real, begin + 1000);
    ASSIGN_OR_RETURN(data::Batch batch,
                     test.GetBatch(absl::MakeConstSpan(indices.data() + begin, static_cast<size_t>(end - begin))));
    const Tensor logits = model(autograd::Variable(batch.inputs.To(device))).data();
    const std::vector<int64_t> predicted = ops::ArgMax(logits).ToVector<int64_t>();
    const std::vector<int64_t> truth = batch.labels.ToVector<int64_t>();
    for (size_t i = 0; i < truth.size(); ++i) counts[0] += predicted[i] == truth[i];
    counts[1] += static_cast<double>(truth.size());
  }
  return counts;
}

absl::Status Train() {
  // --- 2. Join the job: dist.init_process_group(backend="nccl" or "gloo") ---------------------------
  ASSIGN_OR_RETURN(std::shared_ptr<dist::ProcessGroup> pg, dist::InitProcessGroup());
  const int rank = pg->rank();
  const int world_size = pg->size();
  const bool on_gpu = std::string(pg->backend_name()) == "nccl";
  const Device device = on_gpu ? Device::CUDA(cuda::CurrentDevice()) : Device::CPU();  // cuda:LOCAL_RANK

  // --- Data: every rank loads the files; the sampler decides which examples are this rank's ----------
  ASSIGN_OR_RETURN(data::TensorDataset train_set, data::LoadFashionMnist(kDataDir, "train"));
  ASSIGN_OR_RETURN(data::TensorDataset test_set, data::LoadFashionMnist(kDataDir, "test"));
  auto train_data = std::make_shared<data::TensorDataset>(std::move(train_set));
  ASSIGN_OR_RETURN(data::DistributedSampler sampler,
                   data::DistributedSampler::Create(train_data->Size(), {.num_replicas = world_size,
                                                                         .rank = rank,
                                                                         .shuffle = true,
                                                                         .seed = 0}));
  ASSIGN_OR_RETURN(std::unique_ptr<data::DataLoader> loader,
                   data::DataLoader::Create(train_data, sampler, {.batch_size = kBatchSize, .device = device}));

  // --- 3. The model, wrapped: model = DDP(MLP().to(device)) ------------------------------------------
  std::shared_ptr<nn::Sequential> model = nn::MLP({784, 512, 512, 10}, {.device = device, .seed = 1});
  ASSIGN_OR_RETURN(std::unique_ptr<dist::DistributedDataParallel> ddp,
                   dist::DistributedDataParallel::Create(*model, pg));
  nn::SGD optimizer(model->Parameters(), {.lr = kLearningRate, .momentum = 0.9});
  if (rank == 0) {
    std::printf("ddp_minimal: %d rank(s) over %s, MLP 784-512-512-10, batch %lld per rank\n", world_size,
                pg->backend_name(), static_cast<long long>(kBatchSize));
  }

  // --- 4. Train: sampler.set_epoch(epoch), then PyTorch's five lines per batch -----------------------
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    double loss_sum = 0;
    int64_t steps = 0;
    loader->Reset(epoch);  // sampler.set_epoch(epoch): a new shuffle, the same on every rank
    while (std::optional<data::Batch> batch = loader->Next()) {
      optimizer.ZeroGrad();                                                   // optimizer.zero_grad()
      autograd::Variable output = ddp->Forward(autograd::Variable(batch->inputs));  // output = model(x)
      autograd::Variable loss = autograd::CrossEntropy(output, batch->labels);      // loss = criterion(...)
      autograd::Backward(loss);   // loss.backward(): DDP averages the gradients across ranks meanwhile
      RETURN_IF_ERROR(ddp->status());  // a dead or frozen peer ends the job here, with its reason
      optimizer.Step();                                                       // optimizer.step()
      if (++steps % 100 == 0) loss_sum += loss.data().Item();
    }
    RETURN_IF_ERROR(loader->status());

    // --- 5. Evaluate on every rank's shard; all_reduce(SUM) the counts -----------------------------
    ASSIGN_OR_RETURN(data::DistributedSampler shard,
                     data::DistributedSampler::Create(test_set.Size(), {.num_replicas = world_size,
                                                                        .rank = rank,
                                                                        .shuffle = false}));
    ASSIGN_OR_RETURN(std::vector<double> counts, ScoreShard(*model, test_set, shard, device));
    Tensor totals = Tensor::FromVector<double>(counts, {2}, device);
    RETURN_IF_ERROR(pg->AllReduce(totals, dist::ReduceOp::kSum)->Wait());
    const std::vector<double> total = totals.ToVector<double>();
    if (rank == 0) {
      std::printf("epoch %d/%d: %lld steps per rank, loss %.4f (every 100th step, rank 0) | test accuracy %.2f%% "
                  "(%.0f examples, all ranks)\n",
                  epoch + 1, kEpochs, static_cast<long long>(steps), loss_sum / std::max<int64_t>(1, steps / 100),
                  100.0 * total[0] / total[1], total[1]);
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tinyddp

int main(int argc, char** argv) {
  // --- 1. torchrun: run by hand, start the ranks (TINYDDP_NPROC, default one per GPU or 2 on CPU) -----
  if (absl::Status s = tinyddp::dist::SpawnWorkersIfNeeded(argc, argv); !s.ok()) {
    std::fprintf(stderr, "ddp_minimal: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  if (absl::Status s = tinyddp::Train(); !s.ok()) {
    std::fprintf(stderr, "ddp_minimal: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
