// IDX parsing: every field of the header is checked against the bytes actually present.
#include "data/idx.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "data/internal/file_contents.h"

namespace tinyddp::data {
namespace {

uint32_t BigEndian32(const std::string& bytes, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + at);
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// The IDX element type codes, for a helpful message when a file holds something other than uint8.
const char* TypeName(int code) {
  switch (code) {
    case 0x08: return "uint8";
    case 0x09: return "int8";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "unknown";
  }
}

}  // namespace

int64_t IdxArray::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

absl::StatusOr<IdxArray> ParseIdx(std::string contents, int expected_ndims, const std::string& name) {
  const size_t size = contents.size();
  if (size < 4) {
    return absl::DataLossError(absl::StrCat(name, ": truncated IDX header: the file has ", size,
                                            " bytes, fewer than the 4-byte magic number"));
  }
  const uint32_t magic = BigEndian32(contents, 0);
  const int type_code = (magic >> 8) & 0xff;
  const int ndims = magic & 0xff;
  if ((magic >> 16) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: bad magic number 0x%08x: not an IDX file (an IDX file starts with two zero bytes, e.g. "
        "0x00000803 for images, 0x00000801 for labels)",
        name, magic));
  }
  if (type_code != 0x08) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: element type 0x%02x (%s) is not supported; MNIST-style files hold uint8 (0x08)", name, type_code,
        TypeName(type_code)));
  }
  if (ndims != expected_ndims) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: magic number 0x%08x says %d dimensions, expected %d (0x%08x: %s)", name, magic, ndims,
        expected_ndims, 0x800 + expected_ndims, expected_ndims == 1 ? "a labels file" : "an images file"));
  }
  const size_t header = 4 + 4 * static_cast<size_t>(ndims);
  if (size < header) {
    return absl::DataLossError(absl::StrCat(name, ": truncated IDX header: ", ndims, " dimensions need ", header,
                                            " header bytes but the file has ", size));
  }
  IdxArray array;
  // The element count, saturated at "more than the file holds" so that a corrupt header with huge
  // dims cannot overflow the product (a zero dim still makes it zero).
  uint64_t elements = 1;
  bool zero = false;
  for (int d = 0; d < ndims; ++d) {
    const uint32_t dim = BigEndian32(contents, 4 + 4 * d);
    array.dims.push_back(dim);
    if (dim == 0) zero = true;
    if (dim != 0) elements = elements > size / dim ? size + 1 : elements * dim;
  }
  if (zero) elements = 0;
  const size_t data_bytes = size - header;
  if (elements > data_bytes) {
    return absl::DataLossError(absl::StrCat(name, ": truncated data: the header promises ",
                                            absl::StrJoin(array.dims, "x"), " uint8 elements but only ", data_bytes,
                                            " bytes follow the ", header, "-byte header"));
  }
  if (elements < data_bytes) {
    return absl::DataLossError(absl::StrCat(name, ": ", data_bytes - elements,
                                            " unexpected bytes after the data (header says ",
                                            absl::StrJoin(array.dims, "x"), ")"));
  }
  array.contents = std::move(contents);
  array.data_offset = header;
  return array;
}

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path, int expected_ndims) {
  absl::StatusOr<std::string> contents = internal::ReadFileContents(path);
  RETURN_IF_ERROR(contents);
  return ParseIdx(*std::move(contents), expected_ndims, path);
}

}  // namespace tinyddp::data
