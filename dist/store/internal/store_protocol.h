// The TCPStore wire protocol: one request frame, one response frame per call (frames: socket.h).
//
//   request  = op:u8, then the op's fields, in this order, and nothing after them
//   response = code:u8 (absl::StatusCode), then the result if code is OK, else message:string
//   string   = length:u32 little-endian, then the bytes;   i64 = 8 bytes little-endian
//
//   op          fields                               result
//   kHello      magic, client nonce                  server nonce       the handshake (handshake.h):
//   kProof      client MAC                           server MAC         first on every connection
//   kSet        key, value                           -
//   kGet        key, timeout_ms:i64                  value              (waits server-side)
//   kAdd        key, delta:i64                       new value:i64
//   kCompareSet key, expected, desired               value now stored
//   kWait       count:u32, count keys, timeout_ms    -                  (waits server-side)
//   kDelete     key                                  existed:u8
//   kNumKeys    -                                    count:i64
//
// The server trusts nothing it reads: ParseRequest checks every length against what is left of the
// frame before using it, refuses a Wait count over kMaxStoreWaitKeys before allocating for it, and
// rejects trailing bytes, so the accepted encoding is canonical (Encode(Parse(b)) == b; the fuzz test
// store_protocol_fuzz_test.cc holds it to that).
#ifndef TINYDDP_DIST_STORE_INTERNAL_STORE_PROTOCOL_H_
#define TINYDDP_DIST_STORE_INTERNAL_STORE_PROTOCOL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dist/store/store.h"

namespace tinyddp::dist::internal {

enum class StoreOp : uint8_t { kHello = 1, kSet, kGet, kAdd, kCompareSet, kWait, kDelete, kNumKeys, kProof };

/// The hello's magic: a client of another protocol version (or not a store client at all) is told so.
inline constexpr char kProtocolMagic[] = "tinyddp-store/3";

/// The largest handshake message (a magic, a nonce or a MAC fits many times over). Until a connection
/// has completed the handshake, nothing larger is read from it.
inline constexpr uint32_t kMaxHelloBytes = 1024;
/// The largest request body a server accepts after the hello: a CompareSet with two values at their
/// limit (32 MiB), its key and the field lengths fit in the extra MiB.
inline constexpr uint32_t kMaxRequestBytes = 2 * kMaxStoreValueBytes + (1 << 20);
/// The largest response body a client accepts: a value at its limit, or an error message.
inline constexpr uint32_t kMaxResponseBytes = kMaxStoreValueBytes + (1 << 20);

/// One decoded request; the fields its op does not use stay empty.
struct StoreRequest {
  StoreOp op = StoreOp::kNumKeys;
  std::string key;                // every single-key op; kHello: the magic
  std::vector<std::string> keys;  // kWait
  Bytes value;                    // kSet; kCompareSet: desired; kHello: the nonce; kProof: the MAC
  Bytes expected;                 // kCompareSet
  int64_t number = 0;             // kGet, kWait: timeout in ms; kAdd: delta

  bool operator==(const StoreRequest& other) const;
};

/// The request's body. Precondition: keys.size() fits in u32 (the client checks kMaxStoreWaitKeys).
Bytes EncodeRequest(const StoreRequest& request);
/// Decodes a request body from an untrusted peer. A malformed body is InvalidArgument, never a crash.
absl::StatusOr<StoreRequest> ParseRequest(const Bytes& body);

/// Appends fields to a message body.
class MessageWriter {
 public:
  MessageWriter& U8(uint8_t v);
  MessageWriter& U32(uint32_t v);
  MessageWriter& I64(int64_t v);
  MessageWriter& Str(const std::string& s) { return Raw(s.data(), s.size()); }
  MessageWriter& Blob(const Bytes& b) { return Raw(b.data(), b.size()); }
  Bytes Take() { return std::move(buf_); }

 private:
  MessageWriter& Raw(const void* data, size_t n);
  Bytes buf_;
};

/// Reads fields back; a short or malformed body is InvalidArgument, never a crash.
class MessageReader {
 public:
  explicit MessageReader(const Bytes& body) : body_(body) {}
  absl::StatusOr<uint8_t> U8();
  absl::StatusOr<uint32_t> U32();
  absl::StatusOr<int64_t> I64();
  absl::StatusOr<Bytes> Blob();
  absl::StatusOr<std::string> Str();
  size_t left() const { return body_.size() - pos_; }

 private:
  absl::Status Need(size_t n) const;
  const Bytes& body_;
  size_t pos_ = 0;
};

/// An OK response with nothing after the code; add the result with the returned writer.
MessageWriter OkResponse();
/// A response frame carrying a non-OK `status` and its message.
Bytes ErrorResponse(const absl::Status& status);
/// Splits a response: a non-OK code becomes that absl::Status; OK leaves `reader` at the result.
/// A code that is not an absl::StatusCode is reported as Unknown, never trusted.
absl::Status ReadResponseStatus(MessageReader& reader);

}  // namespace tinyddp::dist::internal

#endif  // TINYDDP_DIST_STORE_INTERNAL_STORE_PROTOCOL_H_
