// The cuda:: kernels of tensor/internal/kernel_list.inc for a build without the CUDA toolkit: each one
// stops with a message. ops.cc only reaches them for a tensor on a GPU, and such a tensor cannot be
// created in this build (AllocateStorage already refuses), so in practice these are never called;
// they exist so that ops.cc links the same way with and without CUDA.
#include <cstdio>
#include <cstdlib>

#include "tensor/internal/kernels.h"

namespace tinyddp::cuda {
namespace {

[[noreturn]] void NoCuda(const char* kernel) {
  std::fprintf(stderr,
               "tinyddp: %s: tinyddp was built without CUDA, so CUDA tensors cannot be used; hint: run on "
               "Device::CPU(), or install the CUDA toolkit (/usr/local/cuda or CUDA_HOME) and rebuild.\n",
               kernel);
  std::abort();
}

}  // namespace

void MatMul(const Tensor&, const Tensor&, bool, bool, float, float, Tensor&) { NoCuda("MatMul"); }
void Linear(const Tensor&, const Tensor&, const Tensor&, Tensor&) { NoCuda("Linear"); }
void LinearRelu(const Tensor&, const Tensor&, const Tensor&, Tensor&) { NoCuda("LinearRelu"); }
void BinaryOp(BinaryKind, const Tensor&, const Tensor&, Tensor&) { NoCuda("BinaryOp"); }
void Axpby(double, const Tensor&, double, const Tensor&, Tensor&) { NoCuda("Axpby"); }
void AddRowVector(const Tensor&, const Tensor&, Tensor&) { NoCuda("AddRowVector"); }
void Relu(const Tensor&, Tensor&) { NoCuda("Relu"); }
void ReluBackward(const Tensor&, const Tensor&, Tensor&) { NoCuda("ReluBackward"); }
void Gelu(const Tensor&, Tensor&) { NoCuda("Gelu"); }
void GeluBackward(const Tensor&, const Tensor&, Tensor&) { NoCuda("GeluBackward"); }
void Fill(Tensor&, double) { NoCuda("Fill"); }
void SumAll(const Tensor&, Tensor&) { NoCuda("SumAll"); }
void SumDim(const Tensor&, int64_t, int64_t, int64_t, Tensor&) { NoCuda("SumDim"); }
void SumRows(const Tensor&, float, Tensor&) { NoCuda("SumRows"); }
void ArgMax(const Tensor&, Tensor&) { NoCuda("ArgMax"); }
void LogSoftmax(const Tensor&, Tensor&) { NoCuda("LogSoftmax"); }
void CrossEntropy(const Tensor&, const Tensor&, Tensor&, Tensor&) { NoCuda("CrossEntropy"); }
void CrossEntropyBackward(const Tensor&, const Tensor&, const Tensor&, Tensor&) { NoCuda("CrossEntropyBackward"); }
void MseLoss(const Tensor&, const Tensor&, Tensor&) { NoCuda("MseLoss"); }
void IndexSelectRows(const Tensor&, const Tensor&, Tensor&) { NoCuda("IndexSelectRows"); }
void Cast(const Tensor&, double, Tensor&) { NoCuda("Cast"); }
void Copy(const Tensor&, Tensor&) { NoCuda("Copy"); }
void UniformInit(Tensor&, double, double, uint64_t, uint64_t) { NoCuda("UniformInit"); }
void NormalInit(Tensor&, double, double, uint64_t, uint64_t) { NoCuda("NormalInit"); }
void SgdStep(absl::Span<Tensor>, absl::Span<const Tensor>, absl::Span<Tensor>, const ops::SgdConfig&) {
  NoCuda("SgdStep");
}
void AdamStep(absl::Span<Tensor>, absl::Span<const Tensor>, absl::Span<Tensor>, absl::Span<Tensor>,
              const ops::AdamConfig&) {
  NoCuda("AdamStep");
}
void SgdStepMixed(absl::Span<Tensor>, absl::Span<const Tensor>, absl::Span<Tensor>, const ops::SgdConfig&,
                  absl::Span<Tensor>) {
  NoCuda("SgdStepMixed");
}
void AdamStepMixed(absl::Span<Tensor>, absl::Span<const Tensor>, absl::Span<Tensor>, absl::Span<Tensor>,
                   const ops::AdamConfig&, absl::Span<Tensor>) {
  NoCuda("AdamStepMixed");
}

void LookupAndAdvance(const Tensor&, Tensor&, Tensor&) { NoCuda("LookupAndAdvance"); }

}  // namespace tinyddp::cuda
