// One template loop per (dtype, op) pair, chosen once per collective through a function pointer.
#include "dist/process_group/host_reduce.h"

#include <algorithm>

namespace tinyddp::dist {

namespace {

// Arithmetic happens in Acc: the element type itself, except float for bfloat16.
template <typename T> struct Accumulate { using type = T; };
template <> struct Accumulate<BFloat16> { using type = float; };

template <typename T> typename Accumulate<T>::type Widen(T v) { return v; }
template <> float Widen<BFloat16>(BFloat16 v) { return static_cast<float>(v); }
template <typename T> T Narrow(typename Accumulate<T>::type v) { return v; }
template <> BFloat16 Narrow<BFloat16>(float v) { return BFloat16(v); }

struct Sum { template <typename A> A operator()(A x, A y) const { return x + y; } };
struct Product { template <typename A> A operator()(A x, A y) const { return x * y; } };
struct Max { template <typename A> A operator()(A x, A y) const { return std::max(x, y); } };
struct Min { template <typename A> A operator()(A x, A y) const { return std::min(x, y); } };

template <typename T, typename Op>
void ReduceLoop(void* c, const void* a, const void* b, size_t n) {
  T* out = static_cast<T*>(c);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  Op op;
  for (size_t i = 0; i < n; ++i) out[i] = Narrow<T>(op(Widen(x[i]), Widen(y[i])));
}

template <typename T>
HostReduceFn ForOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return &ReduceLoop<T, Sum>;
    case ReduceOp::kProduct: return &ReduceLoop<T, Product>;
    case ReduceOp::kMax: return &ReduceLoop<T, Max>;
    case ReduceOp::kMin: return &ReduceLoop<T, Min>;
  }
  return nullptr;
}

}  // namespace

bool IsCollectiveDType(DType dtype) {
  bool visited = false;
  VisitCollectiveDType(dtype, [&](auto) { visited = true; });
  return visited;
}

HostReduceFn GetHostReduceFn(DType dtype, ReduceOp op) {
  HostReduceFn fn = nullptr;
  VisitCollectiveDType(dtype, [&](auto tag) { fn = ForOp<decltype(tag)>(op); });
  return fn;
}

void DivideInPlace(void* data, size_t n, DType dtype, int divisor) {
  VisitCollectiveDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = typename Accumulate<T>::type;
    T* p = static_cast<T*>(data);
    for (size_t i = 0; i < n; ++i) p[i] = Narrow<T>(Widen(p[i]) / static_cast<A>(divisor));
  });
}

}  // namespace tinyddp::dist
