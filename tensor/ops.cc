// ops.h: the checks, the output allocation and the dispatch to a backend, for every op.
//
// Each function reads the same way: check the inputs (one TINYDDP_CHECK_OP per rule, each message naming
// the op, both shapes/dtypes and a hint), allocate the output on the input's device, and call the
// kernel of that device: cpu::X (tensor/internal/cpu_*.cc), cpu_bf16::X when a CPU call involves a
// bfloat16 tensor (tensor/internal/cpu_bf16.cc), or cuda::X (tensor/internal/cuda_*.cu). The kernels
// trust these checks and do none of their own, except what only they can see: data-dependent errors
// such as an out-of-range label, which the CPU kernels report.
#include "tensor/ops.h"

#include <initializer_list>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "tensor/internal/kernels.h"

namespace tinyddp::ops {
namespace {

// Whether a kernel argument is (or, for a list, holds) a bfloat16 tensor; other arguments are not.
bool IsBf16(const Tensor& t) { return t.defined() && t.dtype() == DType::kBFloat16; }
bool IsBf16(absl::Span<const Tensor> list) {
  for (const Tensor& t : list) {
    if (IsBf16(t)) return true;
  }
  return false;
}
bool IsBf16(absl::Span<Tensor> list) { return IsBf16(absl::Span<const Tensor>(list)); }
template <typename T>
bool IsBf16(const T&) {
  return false;
}
template <typename... Args>
bool AnyBf16(const Args&... args) {
  return (IsBf16(args) || ...);
}

// Calls the kernel `fn` of the backend that owns `device`: on the CPU, the bfloat16 backend when any
// tensor argument is bfloat16 (the CPU kernels compute in float32/float64; cpu_bf16 widens for them).
#define TINYDDP_DISPATCH(device, fn, ...)                                                       \
  ((device).is_cpu() ? (AnyBf16(__VA_ARGS__) ? ::tinyddp::cpu_bf16::fn(__VA_ARGS__)            \
                                             : ::tinyddp::cpu::fn(__VA_ARGS__))                 \
                     : ::tinyddp::cuda::fn(__VA_ARGS__))

// "[64, 784] float32 cuda:0", the way every message below shows a tensor.
std::string Describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return absl::StrCat(ShapeToString(t.shape()), " ", DTypeName(t.dtype()), " ", t.device().ToString());
}

void CheckDefined(const char* op, const char* name, const Tensor& t) {
  TINYDDP_CHECK_OP(t.defined(), op, name, " is an undefined tensor; hint: create it (Tensor::Empty/Zeros) first");
}

// The math ops compute in float32, float64 or bfloat16; other dtypes get there through Cast.
void CheckFloat(const char* op, const char* name, const Tensor& t) {
  CheckDefined(op, name, t);
  TINYDDP_CHECK_OP(IsFloatingPoint(t.dtype()), op, name, " must be float32, float64 or bfloat16, got ", Describe(t),
                   "; hint: ops::Cast(", name, ", DType::kFloat32) first");
}

// The float32 result of a bfloat16 op that ops.h declares mixed; any other dtype maps to itself.
DType WidenedDType(DType dtype) { return dtype == DType::kBFloat16 ? DType::kFloat32 : dtype; }

// out's dtype is in's, or float32 when in is bfloat16 (the mixed results of MatMulInto and SumRowsInto).
void CheckOutDType(const char* op, const Tensor& out, const char* in_name, const Tensor& in) {
  CheckDefined(op, "out", out);
  TINYDDP_CHECK_OP(out.dtype() == in.dtype() || out.dtype() == WidenedDType(in.dtype()), op, "out is ", Describe(out),
                   " but ", in_name, " is ", Describe(in), "; hint: out has the inputs' dtype, or float32 for "
                   "bfloat16 inputs");
}

void CheckSameDevice(const char* op, const char* na, const Tensor& a, const char* nb, const Tensor& b) {
  TINYDDP_CHECK_OP(a.device() == b.device(), op, na, " is ", Describe(a), " but ", nb, " is ", Describe(b),
                   "; hint: move one with .To(device) so both are on the same device");
}

void CheckSameDType(const char* op, const char* na, const Tensor& a, const char* nb, const Tensor& b) {
  TINYDDP_CHECK_OP(a.dtype() == b.dtype(), op, na, " is ", Describe(a), " but ", nb, " is ", Describe(b),
                   "; hint: ops::Cast one of them so the dtypes match");
}

void CheckSameShape(const char* op, const char* na, const Tensor& a, const char* nb, const Tensor& b) {
  TINYDDP_CHECK_OP(a.shape() == b.shape(), op, "shapes differ: ", na, " is ", Describe(a), ", ", nb, " is ",
                   Describe(b), "; hint: elementwise ops take equal shapes (use AddRowVector to broadcast a bias)");
}

// Two float tensors of one dtype on one device: the precondition of every binary math op.
void CheckPair(const char* op, const char* na, const Tensor& a, const char* nb, const Tensor& b) {
  CheckFloat(op, na, a);
  CheckFloat(op, nb, b);
  CheckSameDevice(op, na, a, nb, b);
  CheckSameDType(op, na, a, nb, b);
}

// True when the bytes of a and b overlap (views into one storage may, e.g. Rows of one tensor).
bool Overlaps(const Tensor& a, const Tensor& b) {
  if (!a.SharesStorageWith(b)) return false;
  const size_t a0 = a.byte_offset(), a1 = a0 + a.nbytes(), b0 = b.byte_offset(), b1 = b0 + b.nbytes();
  return a0 < b1 && b0 < a1;
}

int64_t NormalizeDim(const char* op, const Tensor& x, int64_t dim) {
  const int64_t n = x.dim();
  TINYDDP_CHECK_OP(dim >= -n && dim < n, op, "dim ", dim, " is out of range for ", Describe(x),
                   "; hint: dims go from ", -n, " to ", n - 1);
  return dim < 0 ? dim + n : dim;
}

Tensor Binary(const char* op, BinaryKind kind, const Tensor& a, const Tensor& b) {
  CheckPair(op, "a", a, "b", b);
  CheckSameShape(op, "a", a, "b", b);
  Tensor out = Tensor::Empty(a.shape(), a.dtype(), a.device());
  TINYDDP_DISPATCH(a.device(), BinaryOp, kind, a, b, out);
  return out;
}

// The [m, n] shape of op(a) @ op(b), after checking both are 2-D with matching inner dimensions.
Shape MatMulShape(const char* op, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  CheckPair(op, "a", a, "b", b);
  TINYDDP_CHECK_OP(a.dim() == 2 && b.dim() == 2, op, "needs 2-D operands, a is ", Describe(a), ", b is ",
                   Describe(b), "; hint: View a batch as [N, features] first");
  const int64_t m = trans_a ? a.size(1) : a.size(0), k_a = trans_a ? a.size(0) : a.size(1);
  const int64_t k_b = trans_b ? b.size(1) : b.size(0), n = trans_b ? b.size(0) : b.size(1);
  TINYDDP_CHECK_OP(k_a == k_b, op, "inner dimensions differ: a is ", ShapeToString(a.shape()), " (trans_a=", trans_a,
                   "), b is ", ShapeToString(b.shape()), " (trans_b=", trans_b, "); op(a) has ", k_a,
                   " columns but op(b) has ", k_b, " rows; hint: check the transpose flags");
  return Shape{m, n};
}

}  // namespace

// --- Linear algebra --------------------------------------------------------------------------------

Tensor MatMul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  Tensor out = Tensor::Empty(MatMulShape("MatMul", a, b, trans_a, trans_b), a.dtype(), a.device());
  TINYDDP_DISPATCH(a.device(), MatMul, a, b, trans_a, trans_b, 1.f, 0.f, out);
  return out;
}

namespace {
// The output of Linear/LinearRelu, after checking x [N, in], w [out, in] and bias [out] (or undefined).
Tensor LinearOutput(const char* op, const Tensor& x, const Tensor& w, const Tensor& bias) {
  Shape shape = MatMulShape(op, x, w, false, true);
  if (bias.defined()) {
    CheckPair(op, "x", x, "bias", bias);
    TINYDDP_CHECK_OP(bias.dim() == 1 && bias.size(0) == w.size(0), op, "bias must be [", w.size(0), "] for weight ",
                     Describe(w), ", got ", Describe(bias), "; hint: bias has one entry per output");
  }
  return Tensor::Empty(shape, x.dtype(), x.device());
}
}  // namespace

Tensor Linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  Tensor out = LinearOutput("Linear", x, w, bias);
  TINYDDP_DISPATCH(x.device(), Linear, x, w, bias, out);
  return out;
}

Tensor LinearRelu(const Tensor& x, const Tensor& w, const Tensor& bias) {
  Tensor out = LinearOutput("LinearRelu", x, w, bias);
  TINYDDP_DISPATCH(x.device(), LinearRelu, x, w, bias, out);
  return out;
}

void MatMulInto(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha, float beta) {
  Shape shape = MatMulShape("MatMulInto", a, b, trans_a, trans_b);
  CheckOutDType("MatMulInto", out, "a", a);
  CheckSameDevice("MatMulInto", "out", out, "a", a);
  TINYDDP_CHECK_OP(out.shape() == shape, "MatMulInto", "out is ", Describe(out), " but op(a) @ op(b) is ",
                   ShapeToString(shape), " (a ", ShapeToString(a.shape()), " trans_a=", trans_a, ", b ",
                   ShapeToString(b.shape()), " trans_b=", trans_b, "); hint: allocate out with that shape");
  TINYDDP_CHECK_OP(!Overlaps(out, a) && !Overlaps(out, b), "MatMulInto",
                   "out overlaps an operand (out ", Describe(out), "); hint: write into a separate tensor");
  TINYDDP_DISPATCH(a.device(), MatMul, a, b, trans_a, trans_b, alpha, beta, out);
}

// --- Elementwise -----------------------------------------------------------------------------------

Tensor Add(const Tensor& a, const Tensor& b) { return Binary("Add", BinaryKind::kAdd, a, b); }
Tensor Sub(const Tensor& a, const Tensor& b) { return Binary("Sub", BinaryKind::kSub, a, b); }
Tensor Mul(const Tensor& a, const Tensor& b) { return Binary("Mul", BinaryKind::kMul, a, b); }
Tensor Div(const Tensor& a, const Tensor& b) { return Binary("Div", BinaryKind::kDiv, a, b); }

Tensor Scale(const Tensor& a, double s) {
  CheckFloat("Scale", "a", a);
  Tensor out = Tensor::Empty(a.shape(), a.dtype(), a.device());
  TINYDDP_DISPATCH(a.device(), Axpby, s, a, 0.0, Tensor(), out);
  return out;
}

Tensor AddRowVector(const Tensor& x, const Tensor& row) {
  CheckPair("AddRowVector", "x", x, "row", row);
  TINYDDP_CHECK_OP(x.dim() == 2 && row.dim() == 1 && row.size(0) == x.size(1), "AddRowVector",
                   "needs x [N, C] and row [C], got x ", Describe(x), ", row ", Describe(row),
                   "; hint: row has one entry per column of x");
  Tensor out = Tensor::Empty(x.shape(), x.dtype(), x.device());
  TINYDDP_DISPATCH(x.device(), AddRowVector, x, row, out);
  return out;
}

Tensor Relu(const Tensor& x) {
  CheckFloat("Relu", "x", x);
  Tensor out = Tensor::Empty(x.shape(), x.dtype(), x.device());
  TINYDDP_DISPATCH(x.device(), Relu, x, out);
  return out;
}

Tensor ReluBackward(const Tensor& grad, const Tensor& y) {
  CheckPair("ReluBackward", "grad", grad, "y", y);
  CheckSameShape("ReluBackward", "grad", grad, "y", y);
  Tensor out = Tensor::Empty(grad.shape(), grad.dtype(), grad.device());
  TINYDDP_DISPATCH(grad.device(), ReluBackward, grad, y, out);
  return out;
}

Tensor Gelu(const Tensor& x) {
  CheckFloat("Gelu", "x", x);
  Tensor out = Tensor::Empty(x.shape(), x.dtype(), x.device());
  TINYDDP_DISPATCH(x.device(), Gelu, x, out);
  return out;
}

Tensor GeluBackward(const Tensor& grad, const Tensor& x) {
  CheckPair("GeluBackward", "grad", grad, "x", x);
  CheckSameShape("GeluBackward", "grad", grad, "x", x);
  Tensor out = Tensor::Empty(grad.shape(), grad.dtype(), grad.device());
  TINYDDP_DISPATCH(grad.device(), GeluBackward, grad, x, out);
  return out;
}

// --- In place --------------------------------------------------------------------------------------

void AddInto(Tensor& dst, const Tensor& src, double alpha) {
  CheckPair("AddInto", "dst", dst, "src", src);
  CheckSameShape("AddInto", "dst", dst, "src", src);
  TINYDDP_DISPATCH(dst.device(), Axpby, 1.0, dst, alpha, src, dst);
}

void ScaleInPlace(Tensor& dst, double s) {
  CheckFloat("ScaleInPlace", "dst", dst);
  TINYDDP_DISPATCH(dst.device(), Axpby, s, dst, 0.0, Tensor(), dst);
}

void Fill(Tensor& dst, double value) {
  CheckDefined("Fill", "dst", dst);
  TINYDDP_DISPATCH(dst.device(), Fill, dst, value);
}

void CopyInto(Tensor& dst, const Tensor& src) {
  CheckDefined("CopyInto", "dst", dst);
  CheckDefined("CopyInto", "src", src);
  CheckSameDType("CopyInto", "dst", dst, "src", src);
  TINYDDP_CHECK_OP(dst.numel() == src.numel(), "CopyInto", "element counts differ: dst is ", Describe(dst),
                   ", src is ", Describe(src), "; hint: View one of them so the sizes match");
  if (dst.data_ptr() == src.data_ptr() && dst.device() == src.device()) return;  // copying onto itself
  TINYDDP_CHECK_OP(!Overlaps(dst, src), "CopyInto", "dst and src overlap in one storage (dst ", Describe(dst),
                   ", src ", Describe(src), "); hint: copy through a Clone()");
  if (dst.device() == src.device()) {
    TINYDDP_DISPATCH(dst.device(), Copy, src, dst);
  } else {
    // Host<->device or GPU<->GPU: the stream-ordered byte copy (synchronous when dst is the host).
    CopyBytes(dst.data_ptr(), dst.device(), src.data_ptr(), src.device(), src.nbytes());
  }
}

// --- Reductions ------------------------------------------------------------------------------------

Tensor Sum(const Tensor& x) {
  CheckFloat("Sum", "x", x);
  Tensor out = Tensor::Empty({}, x.dtype(), x.device());
  TINYDDP_DISPATCH(x.device(), SumAll, x, out);
  return out;
}

namespace {
// The sum of x along `dim`, as a new tensor of `dtype` (x's, or float32 for bfloat16 x).
Tensor SumAlong(const char* op, const Tensor& x, int64_t dim, bool keepdim, DType dtype) {
  CheckFloat(op, "x", x);
  const int64_t d = NormalizeDim(op, x, dim);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= x.size(i);
  for (int64_t i = d + 1; i < x.dim(); ++i) inner *= x.size(i);
  Shape shape;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i != d) shape.push_back(x.size(i));
    else if (keepdim) shape.push_back(1);
  }
  Tensor out = Tensor::Empty(shape, dtype, x.device());
  TINYDDP_DISPATCH(x.device(), SumDim, x, outer, x.size(d), inner, out);
  return out;
}
}  // namespace

Tensor Sum(const Tensor& x, int64_t dim, bool keepdim) {
  return SumAlong("Sum", x, dim, keepdim, x.dtype());
}

namespace {
// sum / n in the sum's dtype. A bfloat16 mean is summed into float32 and rounded once, after the
// division (the kernels may write a float32 sum of bfloat16 input), not rounded twice.
Tensor DivideSum(const Tensor& x, Tensor sum, int64_t n) {
  if (x.dtype() != DType::kBFloat16) {
    ScaleInPlace(sum, 1.0 / static_cast<double>(n));
    return sum;
  }
  return Cast(sum, DType::kBFloat16, 1.0 / static_cast<double>(n));
}
}  // namespace

Tensor Mean(const Tensor& x) {
  CheckFloat("Mean", "x", x);
  TINYDDP_CHECK_OP(x.numel() > 0, "Mean", "of an empty tensor ", Describe(x), " is undefined");
  Tensor sum = Tensor::Empty({}, WidenedDType(x.dtype()), x.device());
  TINYDDP_DISPATCH(x.device(), SumAll, x, sum);
  return DivideSum(x, sum, x.numel());
}

Tensor Mean(const Tensor& x, int64_t dim, bool keepdim) {
  CheckFloat("Mean", "x", x);
  const int64_t n = x.size(NormalizeDim("Mean", x, dim));
  TINYDDP_CHECK_OP(n > 0, "Mean", "over dim ", dim, " of size 0 in ", Describe(x), " is undefined");
  return DivideSum(x, SumAlong("Mean", x, dim, keepdim, WidenedDType(x.dtype())), n);
}

void SumRowsInto(Tensor& out, const Tensor& x, float beta) {
  CheckFloat("SumRowsInto", "x", x);
  CheckOutDType("SumRowsInto", out, "x", x);
  CheckSameDevice("SumRowsInto", "out", out, "x", x);
  TINYDDP_CHECK_OP(x.dim() == 2 && out.dim() == 1 && out.size(0) == x.size(1), "SumRowsInto",
                   "needs x [N, C] and out [C], got x ", Describe(x), ", out ", Describe(out),
                   "; hint: out has one entry per column of x (a bias gradient has the bias's shape)");
  TINYDDP_CHECK_OP(!Overlaps(out, x), "SumRowsInto", "out ", Describe(out), " overlaps x ", Describe(x),
                   "; hint: write into a separate tensor");
  TINYDDP_DISPATCH(x.device(), SumRows, x, beta, out);
}

Tensor ArgMax(const Tensor& x) {
  CheckFloat("ArgMax", "x", x);
  TINYDDP_CHECK_OP(x.dim() == 2 && x.size(1) > 0, "ArgMax", "needs [N, C] with C > 0, got ", Describe(x),
                   "; hint: View the scores as [N, C]");
  Tensor out = Tensor::Empty({x.size(0)}, DType::kInt64, x.device());
  TINYDDP_DISPATCH(x.device(), ArgMax, x, out);
  return out;
}

// --- Losses ----------------------------------------------------------------------------------------

Tensor LogSoftmax(const Tensor& x) {
  CheckFloat("LogSoftmax", "x", x);
  TINYDDP_CHECK_OP(x.dim() == 2 && x.size(1) > 0, "LogSoftmax", "needs [N, C] with C > 0, got ", Describe(x),
                   "; hint: View the logits as [N, C]");
  Tensor out = Tensor::Empty(x.shape(), x.dtype(), x.device());
  TINYDDP_DISPATCH(x.device(), LogSoftmax, x, out);
  return out;
}

namespace {
void CheckLogitsAndLabels(const char* op, const char* logits_name, const Tensor& logits, const Tensor& labels) {
  CheckFloat(op, logits_name, logits);
  CheckDefined(op, "labels", labels);
  CheckSameDevice(op, logits_name, logits, "labels", labels);
  TINYDDP_CHECK_OP(logits.dim() == 2 && logits.size(0) > 0 && logits.size(1) > 0, op, logits_name,
                   " must be [N, C] with N, C > 0, got ", Describe(logits));
  TINYDDP_CHECK_OP(labels.dtype() == DType::kInt64 && labels.dim() == 1 && labels.size(0) == logits.size(0), op,
                   "labels must be int64 [", logits.size(0), "] (one class index per row of ", logits_name, " ",
                   Describe(logits), "), got ", Describe(labels), "; hint: ops::Cast(labels, DType::kInt64)");
}
}  // namespace

Tensor CrossEntropy(const Tensor& logits, const Tensor& labels, Tensor* softmax_out) {
  CheckLogitsAndLabels("CrossEntropy", "logits", logits, labels);
  const DType dtype = WidenedDType(logits.dtype());  // the loss is float32 for bfloat16 logits
  Tensor loss = Tensor::Empty({}, dtype, logits.device());
  Tensor softmax = Tensor::Empty(logits.shape(), dtype, logits.device());
  TINYDDP_DISPATCH(logits.device(), CrossEntropy, logits, labels, loss, softmax);
  if (softmax_out != nullptr) *softmax_out = softmax;
  return loss;
}

Tensor CrossEntropyBackward(const Tensor& softmax, const Tensor& labels, const Tensor& grad_loss) {
  CheckDefined("CrossEntropyBackward", "softmax", softmax);
  return CrossEntropyBackward(softmax, labels, grad_loss, softmax.dtype());
}

Tensor CrossEntropyBackward(const Tensor& softmax, const Tensor& labels, const Tensor& grad_loss, DType grad_dtype) {
  CheckLogitsAndLabels("CrossEntropyBackward", "softmax", softmax, labels);
  CheckPair("CrossEntropyBackward", "softmax", softmax, "grad_loss", grad_loss);
  TINYDDP_CHECK_OP(grad_loss.numel() == 1, "CrossEntropyBackward", "grad_loss must be a scalar, got ",
                   Describe(grad_loss), "; hint: the loss is a mean, its gradient one number");
  TINYDDP_CHECK_OP(grad_dtype == softmax.dtype() || WidenedDType(grad_dtype) == softmax.dtype(),
                   "CrossEntropyBackward", "cannot return a ", DTypeName(grad_dtype), " gradient from softmax ",
                   Describe(softmax), "; hint: the gradient has softmax's dtype, or bfloat16 from a float32 softmax");
  Tensor out = Tensor::Empty(softmax.shape(), grad_dtype, softmax.device());
  TINYDDP_DISPATCH(softmax.device(), CrossEntropyBackward, softmax, labels, grad_loss, out);
  return out;
}

Tensor MseLoss(const Tensor& a, const Tensor& b) {
  CheckPair("MseLoss", "a", a, "b", b);
  CheckSameShape("MseLoss", "a", a, "b", b);
  TINYDDP_CHECK_OP(a.numel() > 0, "MseLoss", "of empty tensors ", Describe(a), " is undefined");
  Tensor out = Tensor::Empty({}, WidenedDType(a.dtype()), a.device());
  TINYDDP_DISPATCH(a.device(), MseLoss, a, b, out);
  return out;
}

// --- Indexing and casts ----------------------------------------------------------------------------

Tensor IndexSelectRows(const Tensor& x, const Tensor& indices) {
  CheckDefined("IndexSelectRows", "x", x);
  CheckDefined("IndexSelectRows", "indices", indices);
  CheckSameDevice("IndexSelectRows", "x", x, "indices", indices);
  TINYDDP_CHECK_OP(x.dim() >= 1, "IndexSelectRows", "x must have a row dimension, got ", Describe(x));
  TINYDDP_CHECK_OP(indices.dtype() == DType::kInt64 && indices.dim() == 1, "IndexSelectRows",
                   "indices must be int64 [B], got ", Describe(indices), "; hint: ops::Cast(indices, kInt64)");
  Shape shape = x.shape();
  shape[0] = indices.size(0);
  Tensor out = Tensor::Empty(shape, x.dtype(), x.device());
  TINYDDP_DISPATCH(x.device(), IndexSelectRows, x, indices, out);
  return out;
}

Tensor Cast(const Tensor& x, DType dtype, double scale) {
  CheckDefined("Cast", "x", x);
  Tensor out = Tensor::Empty(x.shape(), dtype, x.device());
  TINYDDP_DISPATCH(x.device(), Cast, x, scale, out);
  return out;
}

void CastInto(Tensor& dst, const Tensor& src) {
  CheckDefined("CastInto", "dst", dst);
  CheckDefined("CastInto", "src", src);
  CheckSameDevice("CastInto", "dst", dst, "src", src);
  TINYDDP_CHECK_OP(dst.numel() == src.numel(), "CastInto", "element counts differ: dst is ", Describe(dst),
                   ", src is ", Describe(src), "; hint: View one of them so the sizes match");
  TINYDDP_CHECK_OP(!Overlaps(dst, src), "CastInto", "dst ", Describe(dst), " overlaps src ", Describe(src),
                   "; hint: cast into a separate buffer");
  TINYDDP_DISPATCH(dst.device(), Cast, src, 1.0, dst);
}

// --- Random initialisation -------------------------------------------------------------------------

namespace {
void CheckRandomTarget(const char* op, const Tensor& dst) {
  CheckDefined(op, "dst", dst);
  TINYDDP_CHECK_OP(IsFloatingPoint(dst.dtype()), op, "dst must be floating point, got ", Describe(dst),
                   "; hint: initialise a float32 tensor and Cast it");
}
}  // namespace

void UniformInit(Tensor& dst, double low, double high, uint64_t seed, uint64_t offset) {
  CheckRandomTarget("UniformInit", dst);
  TINYDDP_CHECK_OP(low <= high, "UniformInit", "low ", low, " > high ", high, "; hint: swap them");
  TINYDDP_DISPATCH(dst.device(), UniformInit, dst, low, high, seed, offset);
}

void NormalInit(Tensor& dst, double mean, double stddev, uint64_t seed, uint64_t offset) {
  CheckRandomTarget("NormalInit", dst);
  TINYDDP_CHECK_OP(stddev >= 0, "NormalInit", "stddev ", stddev, " is negative");
  TINYDDP_DISPATCH(dst.device(), NormalInit, dst, mean, stddev, seed, offset);
}

// --- Fused optimizer steps ------------------------------------------------------------------------

namespace {
// params[i] and each state list's [i] agree in shape, dtype and device, and all share one device;
// grads[i] may also be bfloat16 for a float32 param, and bf16_copies is empty or one bfloat16 tensor per
// float32 param. Returns true when the step is mixed (bfloat16 grads or copies: the *Mixed kernels).
// Runs every step, so nothing here allocates unless a check fails (messages are built only then).
bool CheckOptimizerLists(const char* op, absl::Span<Tensor> params, absl::Span<const Tensor> grads,
                         std::initializer_list<std::pair<const char*, absl::Span<Tensor>>> states,
                         absl::Span<Tensor> bf16_copies) {
  TINYDDP_CHECK_OP(params.size() == grads.size(), op, params.size(), " params but ", grads.size(),
                   " grads; hint: one gradient per parameter, in the same order");
  for (const auto& [name, list] : states) {
    TINYDDP_CHECK_OP(list.size() == params.size(), op, params.size(), " params but ", list.size(), " ", name,
                     "; hint: one state tensor per parameter, in the same order");
  }
  TINYDDP_CHECK_OP(bf16_copies.empty() || bf16_copies.size() == params.size(), op, params.size(), " params but ",
                   bf16_copies.size(), " bf16_copies; hint: one copy per parameter, or none");
  bool mixed = !bf16_copies.empty();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    TINYDDP_CHECK_OP(p.defined() && (p.dtype() == DType::kFloat32 || p.dtype() == DType::kFloat64), op, "params[",
                     i, "] must be a float32 or float64 tensor, got ", Describe(p),
                     "; hint: keep master weights in float32 and pass their bfloat16 copies as bf16_copies");
    TINYDDP_CHECK_OP(p.device() == params[0].device() && p.dtype() == params[0].dtype(), op, "params[", i, "] is ",
                     Describe(p), " but params[0] is ", Describe(params[0]),
                     "; hint: one optimizer step covers one device and one dtype");
    auto matches = [&p](const Tensor& t, DType dtype) {
      return t.defined() && t.dtype() == dtype && t.device() == p.device() && t.shape() == p.shape();
    };
    const bool bf16_grad = p.dtype() == DType::kFloat32 && matches(grads[i], DType::kBFloat16);
    mixed = mixed || bf16_grad;
    TINYDDP_CHECK_OP(matches(grads[i], p.dtype()) || bf16_grad, op, "grads[", i, "] is ", Describe(grads[i]),
                     " but params[", i, "] is ", Describe(p), "; hint: a gradient has its parameter's shape, dtype "
                     "(or bfloat16 for a float32 parameter) and device (parameters without a gradient must be left "
                     "out of the lists)");
    TINYDDP_CHECK_OP(grads[i].dtype() == grads[0].dtype(), op, "grads[", i, "] is ", Describe(grads[i]),
                     " but grads[0] is ", Describe(grads[0]), "; hint: the gradients of one step share a dtype "
                     "(all float32 or all bfloat16)");
    for (const auto& [name, list] : states) {
      TINYDDP_CHECK_OP(matches(list[i], p.dtype()), op, name, "[", i, "] is ", Describe(list[i]), " but params[", i,
                       "] is ", Describe(p), "; hint: create optimizer state with Tensor::Zeros(param.shape(), ...)");
    }
    if (!bf16_copies.empty()) {
      TINYDDP_CHECK_OP(p.dtype() == DType::kFloat32 && matches(bf16_copies[i], DType::kBFloat16), op,
                       "bf16_copies[", i, "] is ", Describe(bf16_copies[i]), " but params[", i, "] is ", Describe(p),
                       "; hint: a copy is a bfloat16 tensor of a float32 parameter's shape, on its device");
      TINYDDP_CHECK_OP(!Overlaps(bf16_copies[i], p), op, "bf16_copies[", i, "] overlaps params[", i,
                       "]; hint: the copy needs its own storage");
    }
  }
  return mixed;
}
}  // namespace

namespace {
// A device scalar of the optimizer steps (ops.h, "Device scalars"): `dtype`, one element, on `device`.
void CheckDeviceScalar(const char* op, const char* name, const Tensor& t, DType dtype, Device device) {
  TINYDDP_CHECK_OP(t.numel() == 1 && t.dtype() == dtype && t.device() == device, op, name, " is ", Describe(t),
                   " but must be a one-element ", DTypeName(dtype), " tensor on the parameters' device ",
                   device.ToString(), "; hint: nn/device_lr.h makes the learning rate one");
}
}  // namespace

void SgdStep(absl::Span<Tensor> params, absl::Span<const Tensor> grads, absl::Span<Tensor> momentum_bufs,
             const SgdConfig& config_in, absl::Span<Tensor> bf16_copies) {
  // On the CPU a device scalar is simply read now; CUDA kernels read it when they run.
  SgdConfig config = config_in;
  if (config.lr_tensor.defined() && !params.empty()) {
    CheckDeviceScalar("SgdStep", "lr_tensor", config.lr_tensor, DType::kFloat64, params[0].device());
    if (params[0].device().is_cpu()) config.lr = *config.lr_tensor.data<double>();
  }
  bool mixed;
  if (config.momentum != 0.0) {
    mixed = CheckOptimizerLists("SgdStep", params, grads, {{"momentum_bufs", momentum_bufs}}, bf16_copies);
  } else {
    mixed = CheckOptimizerLists("SgdStep", params, grads, {}, bf16_copies);
  }
  TINYDDP_CHECK_OP(!config.nesterov || (config.momentum > 0 && config.dampening == 0), "SgdStep",
                   "nesterov needs momentum > 0 and dampening 0 (got momentum ", config.momentum, ", dampening ",
                   config.dampening, "), as in torch.optim.SGD");
  if (params.empty()) return;
  if (mixed) {
    TINYDDP_DISPATCH(params[0].device(), SgdStepMixed, params, grads, momentum_bufs, config, bf16_copies);
  } else {
    TINYDDP_DISPATCH(params[0].device(), SgdStep, params, grads, momentum_bufs, config);
  }
}

void AdamStep(absl::Span<Tensor> params, absl::Span<const Tensor> grads, absl::Span<Tensor> exp_avgs,
              absl::Span<Tensor> exp_avg_sqs, const AdamConfig& config_in, absl::Span<Tensor> bf16_copies) {
  const bool mixed = CheckOptimizerLists("AdamStep", params, grads,
                                         {{"exp_avgs", exp_avgs}, {"exp_avg_sqs", exp_avg_sqs}}, bf16_copies);
  AdamConfig config = config_in;
  if (params.empty()) return;
  const Device device = params[0].device();
  if (config.lr_tensor.defined()) {
    CheckDeviceScalar("AdamStep", "lr_tensor", config.lr_tensor, DType::kFloat64, device);
    if (device.is_cpu()) config.lr = *config.lr_tensor.data<double>();
  }
  if (config.step_tensor.defined()) {
    CheckDeviceScalar("AdamStep", "step_tensor", config.step_tensor, DType::kFloat64, device);
    if (device.is_cpu()) config.step = static_cast<int64_t>(*config.step_tensor.data<double>());
  }
  // A device step is not read here (that would wait for the GPU); the kernel takes what it finds.
  TINYDDP_CHECK_OP(config.step >= 1 || (config.step_tensor.defined() && device.is_cuda()), "AdamStep", "step is ",
                   config.step, "; hint: steps count from 1");
  if (mixed) {
    TINYDDP_DISPATCH(params[0].device(), AdamStepMixed, params, grads, exp_avgs, exp_avg_sqs, config, bf16_copies);
  } else {
    TINYDDP_DISPATCH(params[0].device(), AdamStep, params, grads, exp_avgs, exp_avg_sqs, config);
  }
}

// --- Device cursors --------------------------------------------------------------------------------

void LookupAndAdvance(const Tensor& table, Tensor& cursor, Tensor& out) {
  CheckDefined("LookupAndAdvance", "table", table);
  TINYDDP_CHECK_OP(table.dtype() == DType::kFloat64 && table.dim() == 1 && table.numel() >= 1, "LookupAndAdvance",
                   "table is ", Describe(table), " but must be a non-empty 1-D float64 tensor");
  CheckDeviceScalar("LookupAndAdvance", "cursor", cursor, DType::kInt64, table.device());
  CheckDeviceScalar("LookupAndAdvance", "out", out, DType::kFloat64, table.device());
  // No bfloat16 here, so no cpu_bf16 variant: the CPU or the CUDA kernel.
  if (table.device().is_cpu()) {
    cpu::LookupAndAdvance(table, cursor, out);
  } else {
    cuda::LookupAndAdvance(table, cursor, out);
  }
}

}  // namespace tinyddp::ops
