// DDP test helpers (dist/testing/ddp_testing.h).
#include "dist/testing/ddp_testing.h"

#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "autograd/grad_mode.h"
#include "dist/process_group/gloo/process_group_gloo.h"
#include "gtest/gtest.h"
#include "tensor/ops.h"

namespace tinyddp::dist::ddp_testing {

Batch MakeBatch(int64_t n, int64_t features, int64_t classes, uint64_t seed, Device device) {
  Batch b;
  b.x = Tensor::Empty({n, features}, DType::kFloat32, device);
  ops::UniformInit(b.x, -1.0, 1.0, seed);
  std::mt19937_64 rng(seed);
  std::vector<int64_t> labels(n);
  for (int64_t& l : labels) l = static_cast<int64_t>(rng() % static_cast<uint64_t>(classes));
  b.labels = Tensor::FromVector<int64_t>(labels, {n}, device);
  return b;
}

Batch Rows(const Batch& batch, int64_t begin, int64_t end) {
  return Batch{batch.x.Rows(begin, end).Clone(), batch.labels.Rows(begin, end).Clone()};
}

std::shared_ptr<ProcessGroup> MakeGlooGroup(const testing::RankContext& ctx) {
  GlooOptions options;
  options.timeout = std::chrono::seconds(120);
  auto pg = ProcessGroupGloo::Create(ctx.store, ctx.rank, ctx.world_size, options);
  EXPECT_TRUE(pg.ok()) << pg.status();
  if (!pg.ok()) return nullptr;
  return std::shared_ptr<ProcessGroup>(std::move(*pg));
}

void ExpectBitIdenticalAcrossRanks(ProcessGroup& pg, const nn::Module& module, const std::string& when) {
  for (const auto& [name, p] : module.NamedParameters()) {
    const Tensor local = p.data().To(Device::CPU()).Flatten();
    Tensor all = Tensor::Empty({local.numel() * pg.size()}, local.dtype(), p.device());
    ASSERT_TRUE(pg.AllGather(all, p.data().Flatten())->Wait().ok());
    const Tensor gathered = all.To(Device::CPU());
    for (int r = 0; r < pg.size(); ++r) {
      const Tensor theirs = gathered.Rows(r * local.numel(), (r + 1) * local.numel());
      EXPECT_EQ(std::memcmp(theirs.data_ptr(), local.data_ptr(), local.nbytes()), 0)
          << "parameter '" << name << "' differs between rank " << pg.rank() << " and rank " << r << " " << when;
    }
  }
}

void ExpectTensorNear(const Tensor& actual, const Tensor& expected, double atol, double rtol, const std::string& what) {
  ASSERT_EQ(actual.numel(), expected.numel()) << what;
  const std::vector<float> a = actual.To(Device::CPU()).ToVector<float>();
  const std::vector<float> e = expected.To(Device::CPU()).ToVector<float>();
  int reported = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double tol = atol + rtol * std::fabs(e[i]);
    if (std::fabs(a[i] - e[i]) > tol && reported++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << a[i] << ", expected " << e[i] << " (tolerance " << tol
                    << ")";
    }
  }
}

void ExpectParametersNear(const nn::Module& a, const nn::Module& b, double atol, double rtol, const std::string& when) {
  const auto pa = a.NamedParameters(), pb = b.NamedParameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    ExpectTensorNear(pa[i].second.data(), pb[i].second.data(), atol, rtol,
                     absl::StrCat("parameter '", pa[i].first, "' ", when));
  }
}

void PerturbParameters(const nn::Module& module, int rank) {
  autograd::NoGradGuard no_grad;
  uint64_t seed = 1000 + rank;
  for (const auto& [name, p] : module.NamedParameters()) {
    Tensor noise = Tensor::Empty(p.shape(), p.dtype(), p.device());
    ops::UniformInit(noise, -0.5, 0.5, seed++);
    Tensor data = p.data();
    ops::AddInto(data, noise);
  }
}

}  // namespace tinyddp::dist::ddp_testing
