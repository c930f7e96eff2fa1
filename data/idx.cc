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

namespace {

// What an IDX header says, checked: element type uint8, `expected_ndims` dimensions, all present.
struct IdxHeader {
  std::vector<int64_t> dims;
  size_t bytes = 0;        // the header's own: 4 + 4 per dimension
  uint64_t elements = 0;   // the product of the dims, saturated at cap + 1 (see ParseHeader)
};

// Reads the header at the start of `contents`. The element count saturates at `cap` + 1 ("more than
// that"), so that a corrupt header with huge dims cannot overflow the product (a zero dim still makes it 0).
absl::StatusOr<IdxHeader> ParseHeader(const std::string& contents, int expected_ndims, const std::string& name,
                                      uint64_t cap) {
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
  IdxHeader header;
  header.bytes = 4 + 4 * static_cast<size_t>(ndims);
  if (size < header.bytes) {
    return absl::DataLossError(absl::StrCat(name, ": truncated IDX header: ", ndims, " dimensions need ",
                                            header.bytes, " header bytes but the file has ", size));
  }
  uint64_t elements = 1;
  bool zero = false;
  for (int d = 0; d < ndims; ++d) {
    const uint32_t dim = BigEndian32(contents, 4 + 4 * d);
    header.dims.push_back(dim);
    if (dim == 0) zero = true;
    if (dim != 0) elements = elements > cap / dim ? cap + 1 : elements * dim;
  }
  header.elements = zero ? 0 : elements;
  return header;
}

}  // namespace

absl::StatusOr<IdxArray> ParseIdx(std::string contents, int expected_ndims, const std::string& name) {
  ASSIGN_OR_RETURN(IdxHeader header, ParseHeader(contents, expected_ndims, name, /*cap=*/contents.size()));
  const size_t data_bytes = contents.size() - header.bytes;
  if (header.elements > data_bytes) {
    return absl::DataLossError(absl::StrCat(name, ": truncated data: the header promises ",
                                            absl::StrJoin(header.dims, "x"), " uint8 elements but only ", data_bytes,
                                            " bytes follow the ", header.bytes, "-byte header"));
  }
  if (header.elements < data_bytes) {
    return absl::DataLossError(absl::StrCat(name, ": ", data_bytes - header.elements,
                                            " unexpected bytes after the data (header says ",
                                            absl::StrJoin(header.dims, "x"), ")"));
  }
  IdxArray array;
  array.dims = std::move(header.dims);
  array.contents = std::move(contents);
  array.data_offset = header.bytes;
  return array;
}

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path, int expected_ndims) {
  ASSIGN_OR_RETURN(std::string bytes, internal::ReadFileBytes(path));
  if (!internal::LooksGzipped(bytes)) return ParseIdx(std::move(bytes), expected_ndims, path);
  // gzip: inflate no more than the header says the file holds. A few kilobytes of gzip can inflate to
  // gigabytes (a gzip bomb, or damage), which would end the run in bad_alloc instead of this message.
  constexpr size_t kLongestHeader = 4 + 4 * 255;  // the number of dimensions is one byte
  ASSIGN_OR_RETURN(const std::string head, internal::GunzipPrefix(bytes, path, kLongestHeader));
  absl::StatusOr<IdxHeader> header = ParseHeader(head, expected_ndims, path, /*cap=*/uint64_t{1} << 48);
  if (!header.ok() && head.size() == kLongestHeader) return header.status();
  // A stream shorter than the longest header is inflated whole (its CRC checked), and ParseIdx says why not.
  const uint64_t promised = header.ok() ? header->bytes + header->elements : head.size();
  absl::StatusOr<std::string> inflated = internal::Gunzip(bytes, path, promised);
  if (header.ok() && absl::IsOutOfRange(inflated.status())) {
    return absl::DataLossError(absl::StrCat(
        path, ": its IDX header promises ", absl::StrJoin(header->dims, "x"), " uint8 elements (", promised,
        " bytes with the header), but the file holds more: a gzip bomb or a damaged file; re-download it "
        "(Fashion-MNIST: sudo apt-get install --reinstall dataset-fashion-mnist)"));
  }
  RETURN_IF_ERROR(inflated.status());
  return ParseIdx(*std::move(inflated), expected_ndims, path);
}

}  // namespace tinyddp::data
