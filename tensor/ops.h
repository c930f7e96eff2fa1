// The math of the tensor engine: every op an MLP needs, on CPU and CUDA tensors alike.
//
// Each function checks its inputs (same device, dtypes, shapes), allocates its output on the input's
// device and dispatches to a CPU kernel (Eigen for matmul, loops elsewhere: tensor/internal/cpu_*.cc)
// or a CUDA kernel (cuBLAS/cuBLASLt for matmul, our own kernels elsewhere: tensor/internal/cuda_*.cu).
// CUDA kernels run on the device's current stream (tensor/stream.h) and never synchronise the host.
// A misuse stops the program with one message naming the op, the shapes/dtypes and a hint, e.g.
//   MatMul: inner dimensions differ: a is [64, 784] (trans_a=0), b is [512, 700] (trans_b=1); ...
// Functions ending in `Into`/`_` write into an existing tensor instead of allocating (the optimizer and
// gradient accumulation use them, so a steady-state training step allocates nothing new).
// None of these record gradients: autograd/ wraps them.
//
// Dtypes. The math ops take float32, float64 or bfloat16, all inputs of one dtype, and return that dtype.
// bfloat16 math is float32 math rounded once: GEMMs accumulate in float32 (cuBLASLt, compute type 32F),
// elementwise ops compute in float32 and round each result to nearest even, sums accumulate in double.
// A few ops are mixed on purpose, to save the cast pass mixed-precision training would otherwise need:
// MatMulInto and SumRowsInto can write float32 results of bfloat16 inputs (gradients of float32 master
// weights), the losses of bfloat16 inputs are float32, and the optimizer steps read bfloat16 gradients
// and write bfloat16 copies of their float32 parameters. Each says so below.
#ifndef TINYDDP_TENSOR_OPS_H_
#define TINYDDP_TENSOR_OPS_H_

#include <cstdint>

#include "absl/types/span.h"
#include "tensor/tensor.h"

namespace tinyddp::ops {

// --- Linear algebra --------------------------------------------------------------------------------
/// op(a) @ op(b), where op transposes a 2-D operand when its flag is set. float32, float64 or bfloat16
/// (accumulated in float32, rounded once). float32 means true float32 products: no TF32.
Tensor MatMul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
/// x @ w^T + bias: the forward of nn::Linear (x [N, in], w [out, in], bias [out] or undefined; one dtype).
/// On CUDA the bias add is fused into the GEMM (cuBLASLt epilogue), before the output is rounded.
Tensor Linear(const Tensor& x, const Tensor& w, const Tensor& bias);
/// relu(x @ w^T + bias): Linear followed by ReLU, fused on CUDA (cuBLASLt's RELU_BIAS epilogue), so the
/// pre-activation never goes to memory. ReluBackward(grad, output) is its ReLU's backward.
Tensor LinearRelu(const Tensor& x, const Tensor& w, const Tensor& bias);
/// out = alpha * op(a) @ op(b) + beta * out, in place (the backward of Linear accumulates with beta=1).
/// out has a's dtype, or is float32 when a and b are bfloat16: then the float32 accumulator is written
/// (and beta * out added) without rounding to bfloat16 on the way, so the weight gradient dW = dY^T X of
/// a bfloat16 layer lands in a float32 gradient buffer directly.
void MatMulInto(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha = 1.f,
                float beta = 0.f);

// --- Elementwise (same shapes; AddRowVector broadcasts a [C] vector over the rows of [N, C]) -------
Tensor Add(const Tensor& a, const Tensor& b);
Tensor Sub(const Tensor& a, const Tensor& b);
Tensor Mul(const Tensor& a, const Tensor& b);
Tensor Div(const Tensor& a, const Tensor& b);
Tensor Scale(const Tensor& a, double s);
Tensor AddRowVector(const Tensor& x, const Tensor& row);
Tensor Relu(const Tensor& x);
/// grad * (y > 0), where y = Relu(x) (or x itself).
Tensor ReluBackward(const Tensor& grad, const Tensor& y);
/// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), PyTorch's approximate='tanh'.
Tensor Gelu(const Tensor& x);
Tensor GeluBackward(const Tensor& grad, const Tensor& x);

// --- In place --------------------------------------------------------------------------------------
/// dst += alpha * src (gradient accumulation into a leaf's .grad, which may be a view into a bucket).
void AddInto(Tensor& dst, const Tensor& src, double alpha = 1.0);
/// dst *= s.
void ScaleInPlace(Tensor& dst, double s);
/// Every element = value.
void Fill(Tensor& dst, double value);
/// dst = src, element for element (same numel and dtype; any devices: host<->device copies too).
void CopyInto(Tensor& dst, const Tensor& src);

// --- Reductions ------------------------------------------------------------------------------------
/// Sum of all elements: a scalar tensor (shape []).
Tensor Sum(const Tensor& x);
/// Sum along `dim` (negative counts from the end); keepdim keeps it as size 1.
Tensor Sum(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor Mean(const Tensor& x);
Tensor Mean(const Tensor& x, int64_t dim, bool keepdim = false);
/// out [C] = the sum of the rows of x [N, C] + beta * out: the bias gradient of a Linear layer, written
/// (beta 0) or accumulated (beta 1) in place. out has x's dtype, or is float32 when x is bfloat16 (the
/// sum accumulates in double and is rounded once, to out's dtype). beta == 0 does not read out.
void SumRowsInto(Tensor& out, const Tensor& x, float beta = 0.f);
/// Index of the largest element along the last dim of [N, C]: int64 [N] (first one on ties).
Tensor ArgMax(const Tensor& x);

// --- Losses ----------------------------------------------------------------------------------------
/// log_softmax along the last dim of [N, C], computed stably (max subtracted; bfloat16 in float32).
Tensor LogSoftmax(const Tensor& x);
/// Fused softmax + cross-entropy, mean over the batch: logits [N, C] float, labels [N] int64 in [0, C).
/// Returns the scalar loss; `softmax_out`, if given, receives softmax(logits) for the backward.
/// bfloat16 logits are computed in float32 and give a float32 loss and a float32 softmax (as under
/// PyTorch's autocast): the backward subtracts 1 at the label, and a p rounded to bfloat16 (steps of
/// 2^-8 just below 1) would make p - 1 coarse, and exactly 0 once p > 0.998.
Tensor CrossEntropy(const Tensor& logits, const Tensor& labels, Tensor* softmax_out = nullptr);
/// d loss / d logits = (softmax - onehot(labels)) * grad_loss / N, with grad_loss a scalar tensor of
/// softmax's dtype. The result has softmax's dtype.
Tensor CrossEntropyBackward(const Tensor& softmax, const Tensor& labels, const Tensor& grad_loss);
/// The same, returned as `grad_dtype`: softmax's dtype, or bfloat16 for a float32 softmax (the gradient
/// of bfloat16 logits: computed in float32, rounded once as it is stored).
Tensor CrossEntropyBackward(const Tensor& softmax, const Tensor& labels, const Tensor& grad_loss, DType grad_dtype);
/// mean((a - b)^2) as a scalar tensor (float32 for bfloat16 inputs: losses stay in float32).
Tensor MseLoss(const Tensor& a, const Tensor& b);

// --- Indexing and casts ----------------------------------------------------------------------------
/// Rows of x [N, ...] picked by indices (int64 [B]): the way a batch is gathered from a dataset.
Tensor IndexSelectRows(const Tensor& x, const Tensor& indices);
/// Converts to `dtype`, multiplying by `scale` on the way (uint8 pixels -> float32 with scale 1/255).
Tensor Cast(const Tensor& x, DType dtype, double scale = 1.0);
/// dst = cast(src) without allocating (the bf16 gradient-compression hook uses it both ways).
void CastInto(Tensor& dst, const Tensor& src);

// --- Random initialisation (Philox 4x32-10, counter based) -----------------------------------------
// Element i of a tensor is drawn from Philox(key = seed, counter = offset + i), so the same (seed, offset)
// gives bit-identical numbers on CPU and CUDA, in any launch configuration.
void UniformInit(Tensor& dst, double low, double high, uint64_t seed, uint64_t offset = 0);
void NormalInit(Tensor& dst, double mean, double stddev, uint64_t seed, uint64_t offset = 0);

// --- Fused optimizer steps ------------------------------------------------------------------------
// PyTorch's exact update rules, applied to many parameters at once (one CUDA launch for the whole list
// where possible). params, grads and state tensors are matched by position; all on one device.
//
// Mixed precision (float32 params only): the grads may be bfloat16 (all of one step's; widened exactly
// as they are read), and `bf16_copies`, when not empty, holds one bfloat16 tensor per param (same shape)
// that receives bf16(p_new), rounded to nearest even, in the same pass: the compute copies of the
// weights for the next forward, with no separate cast. The float32 result is the same as with float32
// grads of equal value; state stays float32.

// Device scalars (CUDA graphs, tensor/cuda_graph.h): a kernel recorded into a graph keeps the values it
// was launched with, so a learning rate that changes from step to step must be read from device memory
// when the kernel runs. When `lr_tensor` is defined (float64, one element, on the params' device) the
// step reads its learning rate there and `lr` is ignored; the result is bit for bit the one `lr` holding
// the same value gives (the double is rounded to the params' type the same way on host and device).

struct SgdConfig {
  double lr = 0.01, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  /// True on the first step with momentum: the buffer is set to the gradient instead of updated.
  bool first_step = true;
  /// Defined: the learning rate is read from it (above).
  Tensor lr_tensor;
};
/// torch.optim.SGD: g = grad + wd*p; if momentum: buf = first ? g : momentum*buf + (1-dampening)*g,
/// g = nesterov ? g + momentum*buf : buf; p -= lr*g. momentum_bufs may be empty when momentum == 0.
void SgdStep(absl::Span<Tensor> params, absl::Span<const Tensor> grads, absl::Span<Tensor> momentum_bufs,
             const SgdConfig& config, absl::Span<Tensor> bf16_copies = {});

struct AdamConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  /// true: AdamW (p *= 1 - lr*wd); false: Adam (g += wd*p).
  bool decoupled_weight_decay = true;
  /// 1 on the first step (bias correction uses it).
  int64_t step = 1;
  /// Defined: the learning rate is read from it (above).
  Tensor lr_tensor;
  /// Defined (float64, one element, on the params' device): the step t of this update, read there when
  /// the kernel runs (`step` is ignored), so a recorded step that advances it on the device (nn::Adam with
  /// a device learning rate) counts its replays. On CUDA the bias corrections are then computed on the
  /// device, with CUDA's pow (within an ulp or two of the host's std::pow: the result may differ from a
  /// host-step run in the last bit); on the CPU exactly as with `step`.
  Tensor step_tensor;
};
/// torch.optim.Adam / AdamW: m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
/// p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).
void AdamStep(absl::Span<Tensor> params, absl::Span<const Tensor> grads, absl::Span<Tensor> exp_avgs,
              absl::Span<Tensor> exp_avg_sqs, const AdamConfig& config, absl::Span<Tensor> bf16_copies = {});

/// A cursor over a table, moved by the device: out[0] = table[min(cursor[0], n - 1)], then cursor[0] += 1.
/// How a learning-rate schedule advances inside a CUDA graph (nn/device_lr.h). table: float64 [n], n >= 1;
/// cursor: int64, one element, >= 0; out: float64, one element; all on one device. One tiny kernel on CUDA.
void LookupAndAdvance(const Tensor& table, Tensor& cursor, Tensor& out);

}  // namespace tinyddp::ops

#endif  // TINYDDP_TENSOR_OPS_H_
