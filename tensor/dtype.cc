// DType sizes and names (tensor/dtype.h).
#include "tensor/dtype.h"

#include <cstdio>
#include <cstdlib>

namespace tinyddp {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kBFloat16: return 2;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kUInt8: return 1;
  }
  std::fprintf(stderr, "tinyddp: DTypeSize: unknown dtype %d\n", static_cast<int>(dtype));
  std::abort();
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt8: return "uint8";
  }
  return "unknown-dtype";
}

bool IsFloatingPoint(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kBFloat16;
}

}  // namespace tinyddp
