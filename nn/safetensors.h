// Safetensors files: the checkpoint format of Hugging Face's safetensors library, which PyTorch users
// load with safetensors.torch.load_file. Layout:
//
//   8 bytes   N, little-endian uint64: the size of the header
//   N bytes   JSON header: {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [out, in],
//             "data_offsets": [begin, end]}, ...}, padded with spaces to a multiple of 8 bytes
//   the rest  the tensors' bytes, little-endian, row-major, back to back; offsets count from here
//
// Writing follows the reference library byte for byte: tensors ordered by dtype alignment (largest
// first), then by name; the header compact JSON with keys in the order shown. Writes are atomic.
// Reading trusts nothing: every field of the header is validated before a single data byte is read,
// and every problem is an absl::Status naming the file and the problem, never a crash. This file knows
// nothing of modules; nn/checkpoint.h maps modules and optimizers onto it.
#ifndef TINYDDP_NN_SAFETENSORS_H_
#define TINYDDP_NN_SAFETENSORS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nn/tensor_map.h"
#include "tensor/dtype.h"

namespace tinyddp::nn {

/// Headers larger than this are rejected (the reference implementation's limit), so a corrupt length
/// cannot make a reader allocate gigabytes.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct SafetensorsContents {
  TensorMap tensors;  // on the CPU
  StringMap metadata;
};

/// "F32", "F64", "BF16", "I32", "I64", "U8".
const char* SafetensorsDTypeName(DType dtype);
/// The inverse; InvalidArgument for other names (F16, BOOL, ... are valid safetensors but unsupported).
absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view name);

/// The bytes of a safetensors file holding `tensors` (any device; GPU tensors are copied to the host)
/// and `metadata`. InvalidArgument for an undefined tensor or the reserved name "__metadata__".
absl::StatusOr<std::string> SerializeSafetensors(const TensorMap& tensors, const StringMap& metadata = {});

/// Writes the same bytes to `path` atomically: a temporary file in the same directory, fsync, rename
/// over `path`, fsync of the directory. Either the old file or the complete new one is there after a
/// crash. Errors name the path and the failing call.
absl::Status SaveSafetensors(const std::string& path, const TensorMap& tensors, const StringMap& metadata = {});

/// Parses a whole file held in memory; `source` names it in error messages.
absl::StatusOr<SafetensorsContents> ParseSafetensors(absl::string_view bytes, absl::string_view source = "<memory>");

/// Reads `path`: the header first, fully validated against the file size, then each tensor's bytes
/// straight into a new CPU tensor. Validation: length prefix present, header size <= 100 MB and
/// within the file, valid JSON object, __metadata__ a string->string object, each entry exactly
/// {dtype, shape, data_offsets} with a supported dtype, non-negative integer dims whose product and
/// byte size do not overflow, end - begin == numel * element size, and the entries' byte ranges tiling
/// the data section exactly (from 0, contiguous, no overlap, ending at the end of the file).
absl::StatusOr<SafetensorsContents> LoadSafetensors(const std::string& path);

}  // namespace tinyddp::nn

#endif  // TINYDDP_NN_SAFETENSORS_H_
