// CUDA matrix products: MatMul (transpose flags, alpha, beta), Linear (x @ w^T + bias) and LinearRelu,
// on cuBLASLt for float32 and bfloat16 and cuBLAS for float64 (the CPU half is cpu_matmul.cc, on Eigen).
//
// Row-major on column-major. cuBLAS thinks in column-major matrices; a row-major [r, c] matrix is the
// same bytes as a column-major [c, r] one, its transpose. So C = op(A) op(B) (row-major, [m, n]) is
// computed as C^T = op(B)^T op(A)^T in column-major terms: cuBLAS's first operand is our B, its second
// our A, and its m, n are our n, m. Linear's bias, one value per output feature, then runs along the
// rows of cuBLAS's D, exactly what cuBLASLt's BIAS epilogue adds, so the bias add costs no extra pass;
// LinearRelu's ReLU comes with it (the RELU_BIAS epilogue), so the pre-activation is never stored.
//
// Precision: CUBLAS_COMPUTE_32F. float32: true float32 products with no TF32 (PyTorch's default for
// matmul). bfloat16: tensor-core products accumulated in float32, the epilogue (alpha, beta * C, bias,
// ReLU) applied in float32 too, and one rounding as D is stored. D (and C) may also be float32 for
// bfloat16 A and B: the weight gradient of float32 master weights, written or accumulated (beta 1)
// straight into a float32 gradient buffer, never rounded to bfloat16 on the way.
//
// No work on the hot path beyond the GEMM itself: one cuBLASLt and one cuBLAS handle per device,
// created on first use; the matmul descriptor, the three layouts and the algorithm the heuristic chose
// are cached per shape, dtypes, epilogue and operand alignment (which the choice depends on); the
// 32 MiB workspace is per stream (two streams must not share one) and comes from the caching allocator
// once. Where cuBLASLt has no algorithm (some odd leading dimensions), cublasGemmEx computes the same
// product and our own kernels add the bias and the ReLU afterwards (for bfloat16, after one rounding).
//
// Not fused here: the backward's ReLU mask and bias gradient (ReluBackward, SumRows). cuBLASLt's
// DRELU_BGRAD epilogue would fold both into the dX GEMM, but it needs a bit mask that the forward writes
// (RELU_AUX_BIAS, with its own leading-dimension rules), and the two passes it saves are ~1.5% of the
// large MLP's mixed-precision step (about 40 us of memory traffic against ~2.5 ms).
#include <cublasLt.h>
#include <cublas_v2.h>

#include <climits>
#include <cstdio>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tensor/cuda_device.h"
#include "tensor/internal/cuda_common.cuh"
#include "tensor/internal/kernels.h"

namespace tinyddp::cuda {
namespace {

using internal::LaunchScope;

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // what cuBLAS recommends for Hopper

// --- Plans: what a GEMM of one shape needs, prepared once ------------------------------------------

/// What a GEMM adds to the product before storing it: cuBLASLt's epilogues that we use.
enum class Epilogue : uint8_t { kNone, kBias, kRelu, kReluBias };

cublasLtEpilogue_t LtEpilogue(Epilogue e) {
  switch (e) {
    case Epilogue::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::kRelu:
      return CUBLASLT_EPILOGUE_RELU;
    case Epilogue::kReluBias:
      return CUBLASLT_EPILOGUE_RELU_BIAS;
    case Epilogue::kNone:
      break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool HasBias(Epilogue e) { return e == Epilogue::kBias || e == Epilogue::kReluBias; }

struct GemmKey {
  bool trans_a, trans_b;
  Epilogue epilogue;
  cudaDataType_t in_type, out_type;  // of A and B; of C and D
  int64_t m, n, k;
  uint32_t align_a, align_b, align_c, align_bias;  // bytes; the algorithm must not assume more
  bool operator==(const GemmKey& o) const {
    return trans_a == o.trans_a && trans_b == o.trans_b && epilogue == o.epilogue && in_type == o.in_type &&
           out_type == o.out_type && m == o.m && n == o.n && k == o.k && align_a == o.align_a &&
           align_b == o.align_b && align_c == o.align_c && align_bias == o.align_bias;
  }
};

struct GemmKeyHash {
  size_t operator()(const GemmKey& key) const {
    uint64_t h = static_cast<uint64_t>(key.m) * 0x9E3779B97F4A7C15ull;
    h ^= static_cast<uint64_t>(key.n) + 0x7F4A7C159E3779B9ull + (h << 6) + (h >> 2);
    h ^= static_cast<uint64_t>(key.k) + 0x94D049BB133111EBull + (h << 6) + (h >> 2);
    const uint64_t flags = (key.trans_a ? 1u : 0u) | (key.trans_b ? 2u : 0u) |
                           (static_cast<uint64_t>(key.epilogue) << 2) |
                           (static_cast<uint64_t>(key.in_type) << 4) ^ (static_cast<uint64_t>(key.out_type) << 10);
    const uint64_t aligns = (static_cast<uint64_t>(key.align_a) << 48) ^ (static_cast<uint64_t>(key.align_b) << 32) ^
                            (static_cast<uint64_t>(key.align_c) << 16) ^ key.align_bias;
    return static_cast<size_t>(h ^ (flags << 44) ^ aligns);
  }
};

struct GemmPlan {
  bool usable = false;  // false: cuBLASLt has no algorithm for it; use cublasGemmEx instead
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;  // cuBLAS's A (our b), B (our a), C/D
  cublasLtMatmulAlgo_t algo;
};

/// The largest power of two (at most 256) that divides the address.
uint32_t AlignmentOf(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

// One per device: the handles, the plan cache and the lock that guards them (cuBLAS handles carry
// per-call state such as the stream; plans carry the bias pointer).
struct BlasContext {
  std::mutex mu;
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;
  std::unordered_map<GemmKey, std::unique_ptr<GemmPlan>, GemmKeyHash> plans;
};

BlasContext& ContextFor(int device) {
  static std::mutex mu;
  static auto* contexts = new std::vector<std::unique_ptr<BlasContext>>(DeviceCount());
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<BlasContext>& ctx = (*contexts)[device];
  if (ctx == nullptr) {
    ctx = std::make_unique<BlasContext>();
    internal::DeviceGuard guard(device);
    CUBLAS_CHECK(cublasLtCreate(&ctx->lt));
    CUBLAS_CHECK(cublasCreate(&ctx->blas));
    CUBLAS_CHECK(cublasSetMathMode(ctx->blas, CUBLAS_DEFAULT_MATH));  // no TF32
  }
  return *ctx;
}

template <typename V>
void SetDesc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const V& value) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}
template <typename V>
void SetPref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const V& value) {
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

std::unique_ptr<GemmPlan> MakePlan(cublasLtHandle_t lt, const GemmKey& key, const void* bias) {
  auto plan = std::make_unique<GemmPlan>();
  const cublasOperation_t op_first = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  // Scale type float32 for both input types: alpha and beta are floats, the epilogue runs in float32.
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, op_first);
  SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, op_second);
  if (key.epilogue != Epilogue::kNone) SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, LtEpilogue(key.epilogue));
  if (const int32_t sms = GemmSmCountTarget(); sms > 0) SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, sms);
  if (HasBias(key.epilogue)) {
    // The bias has D's type (cuBLASLt's default); the heuristic reads the pointer's alignment.
    SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  }
  // Stored (pre-op) shapes in column-major terms; see the comment at the top of the file.
  const int64_t m = key.m, n = key.n, k = key.k;
  if (key.trans_b) {
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->first, key.in_type, k, n, k));
  } else {
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->first, key.in_type, n, k, n));
  }
  if (key.trans_a) {
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->second, key.in_type, m, k, m));
  } else {
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->second, key.in_type, k, m, k));
  }
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->out, key.out_type, n, m, n));

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  SetPref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(kWorkspaceBytes));
  SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b);  // cuBLAS's A is our b
  SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a);
  SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c);
  SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c);
  cublasLtMatmulHeuristicResult_t result = {};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(lt, plan->desc, plan->first, plan->second, plan->out,
                                                               plan->out, pref, 1, &result, &found);
  CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  // No algorithm is an answer, not an error: that shape goes to cublasGemmEx (the epilogue to kernels
  // of ours). NOT_SUPPORTED is the usual way to say it; anything else is reported once, since it points
  // at a descriptor cuBLASLt did not like, and the product is still computed correctly.
  if (status != CUBLAS_STATUS_SUCCESS && status != CUBLAS_STATUS_NOT_SUPPORTED) {
    std::fprintf(stderr,
                 "tinyddp: cuBLASLt found no algorithm for m=%lld n=%lld k=%lld trans_a=%d trans_b=%d epilogue=%d "
                 "in_type=%d out_type=%d (%s); using cublasGemmEx for this shape.\n",
                 static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k), key.trans_a,
                 key.trans_b, static_cast<int>(key.epilogue), static_cast<int>(key.in_type),
                 static_cast<int>(key.out_type), cublasGetStatusString(status));
  }
  plan->usable = status == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (plan->usable) plan->algo = result.algo;
  return plan;
}

// --- The products ------------------------------------------------------------------------------------

/// cuBLAS's name for a float32 or bfloat16 tensor's element type.
cudaDataType_t BlasType(DType dtype) { return dtype == DType::kBFloat16 ? CUDA_R_16BF : CUDA_R_32F; }

/// One product on cuBLASLt: c [m, n] = epilogue(alpha * op(a) op(b) + beta * c), row-major, a and b of
/// `in_type`, c of `out_type` (float32 or bfloat16 each), the epilogue adding bias[n] to every row and/or
/// applying ReLU (only with beta == 0). Returns false when the epilogue could not be fused: the product
/// was then computed by cublasGemmEx and the caller applies the epilogue itself.
bool GemmLt(const LaunchScope& scope, cudaDataType_t in_type, cudaDataType_t out_type, const void* a, const void* b,
            void* c, const void* bias, bool relu, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
            float alpha, float beta) {
  BlasContext& ctx = ContextFor(scope.device());
  void* workspace =
      internal::StreamScratch(internal::ScratchKind::kGemmWorkspace, scope.device(), scope.stream(), kWorkspaceBytes);
  const Epilogue epilogue = bias != nullptr ? (relu ? Epilogue::kReluBias : Epilogue::kBias)
                                            : (relu ? Epilogue::kRelu : Epilogue::kNone);
  // A bias that is a view at an address not aligned to 16 bytes (a layer's bias inside one flat buffer, as
  // ZeRO-3 gathers it) is not fused: cuBLASLt's bias epilogue read such a bfloat16 bias wrongly on an H200
  // (results that changed from run to run). The product then runs below and the caller adds the bias.
  const bool fusable = bias == nullptr || AlignmentOf(bias) >= 16;
  const GemmKey key{trans_a,        trans_b,        epilogue,       in_type,          out_type, m, n, k,
                    AlignmentOf(a), AlignmentOf(b), AlignmentOf(c), AlignmentOf(bias)};
  std::lock_guard<std::mutex> lock(ctx.mu);
  auto it = ctx.plans.end();
  if (fusable) {
    it = ctx.plans.find(key);
    if (it == ctx.plans.end()) it = ctx.plans.emplace(key, MakePlan(ctx.lt, key, bias)).first;
  }
  if (fusable && it->second->usable) {
    const GemmPlan& plan = *it->second;
    if (bias != nullptr) SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    CUBLAS_CHECK(cublasLtMatmul(ctx.lt, plan.desc, &alpha, b, plan.first, a, plan.second, &beta, c, plan.out, c,
                                plan.out, &plan.algo, workspace, kWorkspaceBytes, scope.stream()));
    return true;
  }
  CUBLAS_CHECK(cublasSetStream(ctx.blas, scope.stream()));  // resets the workspace, so it goes first
  CUBLAS_CHECK(cublasSetWorkspace(ctx.blas, workspace, kWorkspaceBytes));
  CUBLAS_CHECK(cublasGemmEx(ctx.blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                            static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b, in_type,
                            static_cast<int>(trans_b ? k : n), a, in_type, static_cast<int>(trans_a ? m : k), &beta, c,
                            out_type, static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return epilogue == Epilogue::kNone;
}

/// The same for float64 with cublasDgemm (cuBLASLt's float64 support adds nothing here).
void GemmF64(const LaunchScope& scope, const double* a, const double* b, double* c, bool trans_a, bool trans_b,
             int64_t m, int64_t n, int64_t k, double alpha, double beta) {
  BlasContext& ctx = ContextFor(scope.device());
  void* workspace =
      internal::StreamScratch(internal::ScratchKind::kGemmWorkspace, scope.device(), scope.stream(), kWorkspaceBytes);
  std::lock_guard<std::mutex> lock(ctx.mu);
  CUBLAS_CHECK(cublasSetStream(ctx.blas, scope.stream()));
  CUBLAS_CHECK(cublasSetWorkspace(ctx.blas, workspace, kWorkspaceBytes));
  CUBLAS_CHECK(cublasDgemm(ctx.blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                           static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
                           static_cast<int>(trans_b ? k : n), a, static_cast<int>(trans_a ? m : k), &beta, c,
                           static_cast<int>(n)));
}

void CheckGemmSize(int64_t m, int64_t n, int64_t k) {
  TINYDDP_CHECK_OP(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX, "MatMul", "dimensions m=", m, " n=", n, " k=", k,
                   " exceed cuBLAS's 32-bit limit; hint: split the product");
}

void CheckGemmTypes(const char* op, const Tensor& a, const Tensor& out) {
  const bool ok = a.dtype() == DType::kFloat32 || a.dtype() == DType::kBFloat16;
  TINYDDP_CHECK_OP(ok && (out.dtype() == a.dtype() || out.dtype() == DType::kFloat32), op,
                   "the CUDA kernel handles float32, float64 and bfloat16 (with a float32 or bfloat16 result), not ",
                   DTypeName(a.dtype()), " -> ", DTypeName(out.dtype()));
}

/// out = [relu](x @ w^T + bias): Linear and LinearRelu.
void LinearWithEpilogue(const char* op, const Tensor& x, const Tensor& w, const Tensor& bias, bool relu,
                        Tensor& out) {
  const int64_t m = x.size(0), n = w.size(0), k = x.size(1);
  if (m == 0 || n == 0) return;
  bool fused = false;
  if (k == 0) {
    Fill(out, 0.0);
  } else {
    CheckGemmSize(m, n, k);
    LaunchScope scope(out);
    if (x.dtype() == DType::kFloat64) {
      GemmF64(scope, x.data<double>(), w.data<double>(), out.data<double>(), false, true, m, n, k, 1.0, 0.0);
    } else {
      CheckGemmTypes(op, x, out);
      fused = GemmLt(scope, BlasType(x.dtype()), BlasType(out.dtype()), x.data_ptr(), w.data_ptr(), out.data_ptr(),
                     bias.defined() ? bias.data_ptr() : nullptr, relu, false, true, m, n, k, 1.f, 0.f);
    }
  }
  if (!fused) {  // float64, k == 0, or no cuBLASLt algorithm: the epilogue as separate kernels
    if (bias.defined()) AddRowVector(out, bias, out);
    if (relu) Relu(out, out);
  }
}

}  // namespace

void MatMul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha, float beta, Tensor& out) {
  const int64_t m = out.size(0), n = out.size(1), k = trans_a ? a.size(0) : a.size(1);
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: out = beta * out (cuBLAS rejects k = 0)
    if (beta == 0.f) return Fill(out, 0.0);
    return Axpby(beta, out, 0.0, Tensor(), out);
  }
  CheckGemmSize(m, n, k);
  LaunchScope scope(out);
  if (a.dtype() == DType::kFloat64) {
    return GemmF64(scope, a.data<double>(), b.data<double>(), out.data<double>(), trans_a, trans_b, m, n, k, alpha,
                   beta);
  }
  CheckGemmTypes("MatMul", a, out);
  GemmLt(scope, BlasType(a.dtype()), BlasType(out.dtype()), a.data_ptr(), b.data_ptr(), out.data_ptr(), nullptr,
         false, trans_a, trans_b, m, n, k, alpha, beta);
}

void Linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  LinearWithEpilogue("Linear", x, w, bias, false, out);
}

void LinearRelu(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  LinearWithEpilogue("LinearRelu", x, w, bias, true, out);
}

}  // namespace tinyddp::cuda
