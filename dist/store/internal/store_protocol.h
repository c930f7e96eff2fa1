// The TCPStore wire protocol: one request frame, one response frame per call (frames: socket.h).
//
//   request  = op:u8, key:string, then the op's other arguments
//   response = code:u8 (absl::StatusCode), then the result if code == OK, else a message string
//   string   = length:u32 little-endian, then the bytes;   int64 = 8 bytes little-endian
//
//   op          key                 other arguments               result
//   kSet        key                 value                         -
//   kGet        key                 timeout_ms                    value            (waits server-side)
//   kAdd        key                 delta                         new value
//   kCompareSet key                 expected, desired             value now stored
//   kWait       n (decimal text)    n keys, timeout_ms            -                (waits server-side)
//   kDelete     key                 -                             existed:u8
//   kNumKeys    "" (unused)         -                             count
#ifndef TINYDDP_DIST_STORE_INTERNAL_STORE_PROTOCOL_H_
#define TINYDDP_DIST_STORE_INTERNAL_STORE_PROTOCOL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dist/store/store.h"

namespace tinyddp::dist::internal {

enum class StoreOp : uint8_t { kSet = 1, kGet, kAdd, kCompareSet, kWait, kDelete, kNumKeys };

/// Appends fields to a message body.
class MessageWriter {
 public:
  MessageWriter& U8(uint8_t v);
  MessageWriter& I64(int64_t v);
  MessageWriter& Str(const std::string& s) { return Raw(s.data(), s.size()); }
  MessageWriter& Blob(const Bytes& b) { return Raw(b.data(), b.size()); }
  Bytes Take() { return std::move(buf_); }

 private:
  MessageWriter& Raw(const void* data, size_t n);
  Bytes buf_;
};

/// Reads fields back; a short or malformed body is DataLoss, never a crash.
class MessageReader {
 public:
  explicit MessageReader(const Bytes& body) : body_(body) {}
  absl::StatusOr<uint8_t> U8();
  absl::StatusOr<int64_t> I64();
  absl::StatusOr<Bytes> Blob();
  absl::StatusOr<std::string> Str();

 private:
  absl::Status Need(size_t n) const;
  const Bytes& body_;
  size_t pos_ = 0;
};

/// A response frame carrying `status` (and, when OK, the bytes already written by the caller).
Bytes ErrorResponse(const absl::Status& status);
/// Splits a response: a non-OK code becomes that absl::Status; OK leaves `reader` at the result.
absl::Status ReadResponseStatus(MessageReader& reader);

}  // namespace tinyddp::dist::internal

#endif  // TINYDDP_DIST_STORE_INTERNAL_STORE_PROTOCOL_H_
