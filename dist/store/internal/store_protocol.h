// The TCPStore wire protocol: a handshake opens every connection, then one request frame and one response
// frame per call (frames: socket.h).
//
//   request  = op:u8, then the op's fields, in this order, and nothing after them
//   response = code:u8 (absl::StatusCode), then the result if code is OK, else message:string
//   string   = length:u32 little-endian, then the bytes;   i64 = 8 bytes little-endian
//
//   op          fields                               result
//   kHello      magic, client nonce                  server nonce       the handshake (below):
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
//
// The handshake: each side proves that it knows the job secret (store_secret.h) without sending it,
// and a recorded handshake is worth nothing on another connection (docs/security.md says more).
//
//   client                                                      server
//   1. hello      kHello: magic, Nc (32 random bytes)         ->
//   2. challenge                                              <-  OK, Ns (32 random bytes)
//   3. proof      kProof: HMAC(K, "<magic> client" Nc Ns)     ->
//   4. answer                                                 <-  OK, HMAC(K, "<magic> server" Nc Ns)
//
// K = PBKDF2-HMAC-SHA256(secret) (OpenSSL's): stretching makes guessing a weak secret from a captured
// handshake slow. The other side's fresh nonce stops a replay; the role in the MAC stops one side's proof
// being sent back to it as the other's. MACs are compared in constant time. Without a secret a side sends
// an empty MAC: a server without one admits anyone, a client without one trusts any server, and a client
// with one refuses a server whose MAC is missing or wrong. Only the start of a connection is authenticated:
// requests then travel in the clear, unsigned.
#ifndef TINYDDP_DIST_STORE_INTERNAL_STORE_PROTOCOL_H_
#define TINYDDP_DIST_STORE_INTERNAL_STORE_PROTOCOL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dist/store/internal/socket.h"
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
};

/// The request's body. Precondition: keys.size() fits in u32 (the client checks kMaxStoreWaitKeys).
Bytes EncodeRequest(const StoreRequest& request);
/// Decodes a request body from an untrusted peer. A malformed body is InvalidArgument, never a crash.
absl::StatusOr<StoreRequest> ParseRequest(Bytes body);

/// Appends fields to a message body.
class MessageWriter {
 public:
  MessageWriter& U8(uint8_t v) { return Int(v, 1); }
  MessageWriter& U32(uint32_t v) { return Int(v, 4); }
  MessageWriter& I64(int64_t v) { return Int(static_cast<uint64_t>(v), 8); }
  MessageWriter& Str(const std::string& s) { return Raw(s.data(), s.size()); }
  MessageWriter& Blob(const Bytes& b) { return Raw(b.data(), b.size()); }
  Bytes Take() { return std::move(buf_); }

 private:
  MessageWriter& Int(uint64_t v, int bytes);  // little-endian
  MessageWriter& Raw(const void* data, size_t n);
  Bytes buf_;
};

/// Reads fields back; a short or malformed body is InvalidArgument, never a crash.
class MessageReader {
 public:
  explicit MessageReader(Bytes body) : body_(std::move(body)) {}
  absl::StatusOr<uint8_t> U8();
  absl::StatusOr<uint32_t> U32();
  absl::StatusOr<int64_t> I64();
  absl::StatusOr<Bytes> Blob();
  absl::StatusOr<std::string> Str();
  size_t left() const { return body_.size() - pos_; }

 private:
  absl::Status Need(size_t n) const;
  absl::StatusOr<uint64_t> Int(int bytes);  // little-endian
  Bytes body_;
  size_t pos_ = 0;
};

/// An OK response with nothing after the code; add the result with the returned writer.
MessageWriter OkResponse();
/// A response frame carrying a non-OK `status` and its message.
Bytes ErrorResponse(const absl::Status& status);
/// Splits a response: a non-OK code becomes that absl::Status; OK leaves `reader` at the result.
/// A code that is not an absl::StatusCode is reported as Unknown, never trusted.
absl::Status ReadResponseStatus(MessageReader& reader);

/// The key both sides MAC with, derived from the job secret; "" for no secret. The first derivation of
/// a secret takes about 60 ms (100,000 rounds); the process then remembers it.
std::string DeriveStoreKey(const std::string& secret);

/// The client's half of the handshake: sends 1 and 3, checks 4. OK once the server has proved that it
/// knows `key` (any server, when `key` is ""). The server's refusals come back as it sent them
/// (Unauthenticated, PermissionDenied, FailedPrecondition; ResourceExhausted when it is full); a server
/// that fails to prove itself is PermissionDenied.
absl::Status ClientHandshake(int fd, const std::string& key, SteadyTime deadline);

/// The server's half, a message at a time (its event loop never waits on one client): 1 -> 2 keeping both
/// nonces in *nonces, then 3 -> 4. An error says why the client is refused, for the caller to send.
absl::StatusOr<Bytes> ServerChallenge(Bytes hello, Bytes* nonces);
absl::StatusOr<Bytes> ServerAnswer(Bytes proof, const std::string& key, const Bytes& nonces);

/// HMAC(key, "<magic> <role>" Nc Ns): `role`'s proof ("client" or "server"); empty without a key.
Bytes HandshakeMac(const std::string& key, const char* role, const Bytes& client_nonce, const Bytes& server_nonce);

}  // namespace tinyddp::dist::internal

#endif  // TINYDDP_DIST_STORE_INTERNAL_STORE_PROTOCOL_H_
