// CPU losses: log_softmax, fused softmax + cross-entropy (mean over the batch) and its backward, MSE.
//
// Stability: softmax and log_softmax of a row subtract the row's max before exponentiating, so the
// largest exponent is exp(0) = 1 and nothing overflows however large the logits are:
//   log_softmax(x)_j = x_j - m - log(sum_k exp(x_k - m)),  m = max_k x_k.
// Cross-entropy of row i is then -log_softmax(x_i)_{label_i} = log(sum) + m - x_{i,label}.
#include <cmath>

#include "tensor/internal/cpu_common.h"
#include "tensor/internal/kernels.h"

namespace tinyddp::cpu {
namespace {

template <typename T>
T RowMax(const T* row, int64_t cols) {
  T m = row[0];
  for (int64_t j = 1; j < cols; ++j) m = row[j] > m ? row[j] : m;
  return m;
}

}  // namespace

void LogSoftmax(const Tensor& x, Tensor& out) {
  DispatchFloat(x.dtype(), "LogSoftmax", [&](auto tag) {
    using T = decltype(tag);
    const int64_t rows = x.size(0), cols = x.size(1);
    for (int64_t i = 0; i < rows; ++i) {
      const T* row = x.data<T>() + i * cols;
      T* o = out.data<T>() + i * cols;
      const T m = RowMax(row, cols);
      double sum = 0;
      for (int64_t j = 0; j < cols; ++j) sum += std::exp(static_cast<double>(row[j] - m));
      const T log_sum = static_cast<T>(std::log(sum));
      for (int64_t j = 0; j < cols; ++j) o[j] = row[j] - m - log_sum;
    }
  });
}

void CrossEntropy(const Tensor& logits, const Tensor& labels, Tensor& loss, Tensor& softmax) {
  DispatchFloat(logits.dtype(), "CrossEntropy", [&](auto tag) {
    using T = decltype(tag);
    const int64_t rows = logits.size(0), cols = logits.size(1);
    const int64_t* label = labels.data<int64_t>();
    double total = 0;
    for (int64_t i = 0; i < rows; ++i) {
      TINYDDP_CHECK_OP(label[i] >= 0 && label[i] < cols, "CrossEntropy", "label ", label[i], " at row ", i,
                       " is out of range for logits [", rows, ", ", cols, "] (", cols,
                       " classes); hint: labels are class indices in [0, C)");
      const T* row = logits.data<T>() + i * cols;
      T* p = softmax.data<T>() + i * cols;
      const T m = RowMax(row, cols);
      double sum = 0;
      for (int64_t j = 0; j < cols; ++j) {
        const double e = std::exp(static_cast<double>(row[j] - m));
        p[j] = static_cast<T>(e);
        sum += e;
      }
      const T inv = static_cast<T>(1.0 / sum);
      for (int64_t j = 0; j < cols; ++j) p[j] *= inv;
      total += std::log(sum) + static_cast<double>(m) - static_cast<double>(row[label[i]]);
    }
    *loss.data<T>() = static_cast<T>(total / static_cast<double>(rows));
  });
}

void CrossEntropyBackward(const Tensor& softmax, const Tensor& labels, const Tensor& grad_loss, Tensor& out) {
  DispatchFloat(softmax.dtype(), "CrossEntropyBackward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t rows = softmax.size(0), cols = softmax.size(1);
    const int64_t* label = labels.data<int64_t>();
    // d mean_i(loss_i) / d logits_ij = (softmax_ij - [j == label_i]) / N, times the incoming gradient.
    const T scale = static_cast<T>(static_cast<double>(*grad_loss.data<T>()) / static_cast<double>(rows));
    for (int64_t i = 0; i < rows; ++i) {
      TINYDDP_CHECK_OP(label[i] >= 0 && label[i] < cols, "CrossEntropyBackward", "label ", label[i], " at row ", i,
                       " is out of range for ", cols, " classes; hint: labels are class indices in [0, C)");
      const T* p = softmax.data<T>() + i * cols;
      T* o = out.data<T>() + i * cols;
      for (int64_t j = 0; j < cols; ++j) o[j] = p[j] * scale;
      o[label[i]] = (p[label[i]] - T(1)) * scale;
    }
  });
}

void MseLoss(const Tensor& a, const Tensor& b, Tensor& out) {
  DispatchFloat(a.dtype(), "MseLoss", [&](auto tag) {
    using T = decltype(tag);
    const T* x = a.data<T>();
    const T* y = b.data<T>();
    const int64_t n = a.numel();
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(x[i]) - static_cast<double>(y[i]);
      total += d * d;
    }
    *out.data<T>() = static_cast<T>(total / static_cast<double>(n));
  });
}

}  // namespace tinyddp::cpu
