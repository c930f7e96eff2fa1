// The IDX file format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/), read and checked.
//
// An IDX file is a 4-byte magic number, one big-endian uint32 size per dimension, then the elements in
// row-major order:
//   byte 0, 1: zero        byte 2: element type (0x08 = uint8)        byte 3: number of dimensions
// so images are 0x00000803 ([N, rows, cols]) and labels 0x00000801 ([N]). Files may be gzip-compressed
// (inflated no further than the header says: a gzip bomb costs no memory).
// Everything is validated against the file's real size, so a truncated or corrupt file gives an
// absl::Status naming the file and the problem, never a crash or a silent short read.
// Sits below fashion_mnist.h, which turns an images file and a labels file into a TensorDataset.
#ifndef TINYDDP_DATA_IDX_H_
#define TINYDDP_DATA_IDX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tinyddp::data {

/// A uint8 IDX array: dims as in the header, elements in row-major order.
struct IdxArray {
  std::vector<int64_t> dims;
  std::string contents;      // the whole (inflated) file; elements start at data_offset
  size_t data_offset = 0;
  int64_t num_elements() const;
  const uint8_t* data() const { return reinterpret_cast<const uint8_t*>(contents.data()) + data_offset; }
};

/// Parses IDX bytes already in memory; `name` (a path) prefixes every error message.
/// Requires element type uint8 and exactly `expected_ndims` dimensions (3 for images, 1 for labels).
/// Errors (InvalidArgument for a wrong magic or type, DataLoss for sizes that disagree with the bytes):
///   bad magic, unsupported element type, wrong number of dimensions, header shorter than its dims,
///   fewer data bytes than the dims promise (truncated), or bytes left over after them.
absl::StatusOr<IdxArray> ParseIdx(std::string contents, int expected_ndims, const std::string& name);

/// Reads `path` (plain or gzip, detected by content) and parses it as above. A gzip file is inflated no
/// further than its header says it holds: one that holds more (a gzip bomb, or damage) is DataLoss, naming the
/// file and the size promised, having used no more memory than that.
absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path, int expected_ndims);

}  // namespace tinyddp::data

#endif  // TINYDDP_DATA_IDX_H_
