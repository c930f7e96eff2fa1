// The differentiable ops: each records a node (node.h) whose backward is written right beside its
// forward, in one .cc per family: linear.cc (Linear, LinearRelu, MatMul), elementwise.cc (Add, Sub, Mul,
// Div, Scale, AddRowVector, View, Cast), activations.cc (Relu, Gelu), reductions.cc (Sum, Mean),
// losses.cc (LogSoftmax, CrossEntropy, MseLoss). Forward and backward use only tensor ops
// (tensor/ops.h), so every op runs on CPU and CUDA alike, and takes the dtypes they take (float32,
// float64, bfloat16). Shapes and dtypes are checked by those ops, whose messages name the op.
//
// Gradients have the dtype of what they are for: a bfloat16 activation gets a bfloat16 gradient, a
// float32 parameter a float32 one. Mixed precision (nn/precision.h) rests on three ops that take what
// the tensor ops' mixed forms take: Linear with LinearValues (bfloat16 compute copies in the forward,
// float32 weight gradients straight from the GEMM), Cast, and the losses (float32 of bfloat16 inputs).
//
// With grad mode off (NoGradGuard) or when no input requires grad, an op just computes its value.
#ifndef TINYDDP_AUTOGRAD_FUNCTIONS_H_
#define TINYDDP_AUTOGRAD_FUNCTIONS_H_

#include <cstdint>

#include "autograd/variable.h"
#include "tensor/tensor.h"

namespace tinyddp::autograd {

// --- linear.cc ---------------------------------------------------------------------------------------
/// x @ w^T + bias: x [N, in], w [out, in], bias [out] or an undefined Variable (no bias). The forward is
/// ops::Linear (bias fused into the GEMM on CUDA); the backward is two GEMMs and a column sum. The
/// weight's and the bias's gradients are written straight into their .grad or gradient destination
/// when the engine offers it (engine.h, point 5).
Variable Linear(const Variable& x, const Variable& w, const Variable& bias);
/// relu(x @ w^T + bias) as one node: ops::LinearRelu (bias and ReLU fused into the GEMM's epilogue on
/// CUDA, so the pre-activation is never stored); the backward masks dy with the output, then is Linear's.
/// Same values as Relu(Linear(x, w, bias)).
Variable LinearRelu(const Variable& x, const Variable& w, const Variable& bias);

/// What a Linear computes with in place of its parameters' data: under mixed precision, the bfloat16
/// compute copies of float32 master weights (nn/precision.h). Same shapes as w and bias, x's dtype;
/// `bias` is undefined exactly when the layer has none.
struct LinearValues {
  Tensor weight, bias;
};
/// Linear and LinearRelu computed with `values` standing in for w's and bias's data. Each gradient keeps
/// its own variable's dtype: dx (= dy @ values.weight) has x's; dw = dy^T x is one GEMM that reads the
/// bfloat16 operands, accumulates in float32 and writes w's float32 gradient directly (into .grad or the
/// gradient destination when offered, so a DDP bucket view is filled with no cast and no copy); db is
/// summed into float32 the same way. The backward reads `values` when it runs: they must not change
/// between the forward and the backward (an optimizer step writes them after).
Variable Linear(const Variable& x, const Variable& w, const Variable& bias, const LinearValues& values);
Variable LinearRelu(const Variable& x, const Variable& w, const Variable& bias, const LinearValues& values);
/// op(a) @ op(b), where op transposes a 2-D operand when its flag is set.
Variable MatMul(const Variable& a, const Variable& b, bool trans_a = false, bool trans_b = false);

// --- elementwise.cc (same shapes; AddRowVector broadcasts [C] over the rows of [N, C]) ------------------
Variable Add(const Variable& a, const Variable& b);
Variable Sub(const Variable& a, const Variable& b);
Variable Mul(const Variable& a, const Variable& b);
Variable Div(const Variable& a, const Variable& b);
Variable Scale(const Variable& a, double s);
Variable AddRowVector(const Variable& x, const Variable& row);
/// Same elements, new shape (one size may be -1); shares memory with x, as Tensor::View.
Variable View(const Variable& x, Shape shape);
/// x converted to `dtype` (rounded to nearest even when narrowing); the gradient is converted back to
/// x's dtype. Mixed precision casts a float32 input to bfloat16 with it.
Variable Cast(const Variable& x, DType dtype);

inline Variable operator+(const Variable& a, const Variable& b) { return Add(a, b); }
inline Variable operator-(const Variable& a, const Variable& b) { return Sub(a, b); }
inline Variable operator*(const Variable& a, const Variable& b) { return Mul(a, b); }
inline Variable operator/(const Variable& a, const Variable& b) { return Div(a, b); }
inline Variable operator*(const Variable& a, double s) { return Scale(a, s); }
inline Variable operator*(double s, const Variable& a) { return Scale(a, s); }

// --- activations.cc ----------------------------------------------------------------------------------
Variable Relu(const Variable& x);
/// GELU with PyTorch's approximate='tanh'.
Variable Gelu(const Variable& x);

// --- reductions.cc -----------------------------------------------------------------------------------
/// Sum of all elements: a scalar (shape []).
Variable Sum(const Variable& x);
/// Sum along `dim` (negative counts from the end); keepdim keeps it as size 1.
Variable Sum(const Variable& x, int64_t dim, bool keepdim = false);
Variable Mean(const Variable& x);
Variable Mean(const Variable& x, int64_t dim, bool keepdim = false);

// --- losses.cc ---------------------------------------------------------------------------------------
/// log_softmax along the last dim of x [N, C].
Variable LogSoftmax(const Variable& x);
/// Fused softmax + cross-entropy, mean over the batch: logits [N, C], labels int64 [N] in [0, C).
/// Labels are data, not a Variable: they get no gradient.
Variable CrossEntropy(const Variable& logits, const Tensor& labels);
/// mean((a - b)^2), a scalar.
Variable MseLoss(const Variable& a, const Variable& b);

}  // namespace tinyddp::autograd

#endif  // TINYDDP_AUTOGRAD_FUNCTIONS_H_
