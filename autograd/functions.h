// The differentiable ops: each records a node (node.h) whose backward is written right beside its
// forward, in one .cc per family: linear.cc (Linear, MatMul), elementwise.cc (Add, Sub, Mul, Div, Scale,
// AddRowVector, View), activations.cc (Relu, Gelu), reductions.cc (Sum, Mean), losses.cc (LogSoftmax,
// CrossEntropy, MseLoss). Forward and backward use only tensor ops (tensor/ops.h), so every op runs on
// CPU and CUDA alike. Shapes and dtypes are checked by those ops, whose messages name the op.
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
/// ops::Linear (bias fused into the GEMM on CUDA); the backward is two GEMMs and a column sum.
Variable Linear(const Variable& x, const Variable& w, const Variable& bias);
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
