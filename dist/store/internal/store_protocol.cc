// The TCPStore wire protocol: see store_protocol.h for the message layout and the handshake.
#include "dist/store/internal/store_protocol.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <mutex>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/store/store_secret.h"

namespace tinyddp::dist::internal {

MessageWriter& MessageWriter::Int(uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return *this;
}

MessageWriter& MessageWriter::Raw(const void* data, size_t n) {
  U32(static_cast<uint32_t>(n));
  const uint8_t* p = static_cast<const uint8_t*>(data);
  buf_.insert(buf_.end(), p, p + n);
  return *this;
}

absl::Status MessageReader::Need(size_t n) const {
  if (left() >= n) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("store message truncated: needed ", n, " more bytes at offset ", pos_, " of ", body_.size()));
}

absl::StatusOr<uint64_t> MessageReader::Int(int bytes) {
  RETURN_IF_ERROR(Need(bytes));
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(body_[pos_++]) << (8 * i);
  return v;
}

absl::StatusOr<uint8_t> MessageReader::U8() { return Int(1); }
absl::StatusOr<uint32_t> MessageReader::U32() { return Int(4); }
absl::StatusOr<int64_t> MessageReader::I64() { return Int(8); }

absl::StatusOr<Bytes> MessageReader::Blob() {
  ASSIGN_OR_RETURN(const uint32_t len, U32());
  RETURN_IF_ERROR(Need(len));  // checked against what is left before anything is allocated
  pos_ += len;
  return Bytes(body_.begin() + (pos_ - len), body_.begin() + pos_);
}

absl::StatusOr<std::string> MessageReader::Str() {
  ASSIGN_OR_RETURN(const Bytes b, Blob());
  return std::string(b.begin(), b.end());
}

// --- Requests and responses ----------------------------------------------------------------------------

namespace {

// Each op's fields in wire order: the one list that both EncodeRequest and ParseRequest walk, so the
// encoder and the parser cannot disagree. Calls fields(...) with them; false for an unknown op.
template <typename Request, typename Fields>
bool WithFields(Request& r, Fields&& fields) {
  switch (r.op) {
    case StoreOp::kHello:
    case StoreOp::kSet: fields(r.key, r.value); break;
    case StoreOp::kGet:
    case StoreOp::kAdd: fields(r.key, r.number); break;
    case StoreOp::kCompareSet: fields(r.key, r.expected, r.value); break;
    case StoreOp::kWait: fields(r.keys, r.number); break;
    case StoreOp::kDelete: fields(r.key); break;
    case StoreOp::kNumKeys: fields(); break;
    case StoreOp::kProof: fields(r.value); break;
    default: return false;
  }
  return true;
}

void Write(MessageWriter& out, const std::string& s) { out.Str(s); }
void Write(MessageWriter& out, const Bytes& b) { out.Blob(b); }
void Write(MessageWriter& out, int64_t n) { out.I64(n); }
void Write(MessageWriter& out, const std::vector<std::string>& keys) {
  out.U32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) out.Str(k);
}

template <typename T>
absl::Status Assign(absl::StatusOr<T> read, T& field) {
  RETURN_IF_ERROR(read);
  field = std::move(*read);
  return absl::OkStatus();
}
absl::Status Read(MessageReader& in, std::string& s) { return Assign(in.Str(), s); }
absl::Status Read(MessageReader& in, Bytes& b) { return Assign(in.Blob(), b); }
absl::Status Read(MessageReader& in, int64_t& n) { return Assign(in.I64(), n); }
absl::Status Read(MessageReader& in, std::vector<std::string>& keys) {
  ASSIGN_OR_RETURN(const uint32_t count, in.U32());
  // Refused before reserving anything: the count is the peer's claim, not yet backed by bytes.
  if (count > kMaxStoreWaitKeys) {
    return absl::InvalidArgumentError(absl::StrCat("store: Wait on ", count, " keys, over the limit of ",
                                                   kMaxStoreWaitKeys, " (kMaxStoreWaitKeys)"));
  }
  for (uint32_t i = 0; i < count; ++i) RETURN_IF_ERROR(Read(in, keys.emplace_back()));
  return absl::OkStatus();
}


}  // namespace

Bytes EncodeRequest(const StoreRequest& r) {
  MessageWriter out;
  out.U8(static_cast<uint8_t>(r.op));
  WithFields(r, [&out](const auto&... field) { (Write(out, field), ...); });
  return out.Take();
}

absl::StatusOr<StoreRequest> ParseRequest(Bytes body) {
  MessageReader in(std::move(body));
  StoreRequest r;
  ASSIGN_OR_RETURN(const uint8_t op, in.U8());
  r.op = static_cast<StoreOp>(op);
  absl::Status read;  // the first field that fails to read ends the && chain
  if (!WithFields(r, [&](auto&... field) { (void)((read = Read(in, field)).ok() && ...); })) {
    return absl::InvalidArgumentError(
        absl::StrCat("store: unknown request op ", static_cast<int>(op), " (is the client a tinyddp store client?)"));
  }
  RETURN_IF_ERROR(read);
  if (in.left() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("store: ", in.left(), " unexpected bytes after the request (op ", static_cast<int>(op), ")"));
  }
  return r;
}

MessageWriter OkResponse() {
  MessageWriter w;
  w.U8(0);
  return w;
}

Bytes ErrorResponse(const absl::Status& status) {
  return MessageWriter().U8(static_cast<uint8_t>(status.code())).Str(std::string(status.message())).Take();
}

absl::Status ReadResponseStatus(MessageReader& reader) {
  ASSIGN_OR_RETURN(const uint8_t code, reader.U8());
  if (code == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string message, reader.Str());
  const bool known = code <= static_cast<uint8_t>(absl::StatusCode::kUnauthenticated);
  return absl::Status(known ? static_cast<absl::StatusCode>(code) : absl::StatusCode::kUnknown, message);
}

// --- The handshake -------------------------------------------------------------------------------------

namespace {

constexpr size_t kNonceBytes = 32;
constexpr int kKdfRounds = 100000;

// From the kernel (getrandom): up to 256 bytes come whole or not at all.
absl::StatusOr<Bytes> Nonce() {
  Bytes nonce(kNonceBytes);
  if (::getrandom(nonce.data(), kNonceBytes, 0) != static_cast<ssize_t>(kNonceBytes)) {
    return absl::InternalError("getrandom() failed: no nonce for the store's handshake");
  }
  return nonce;
}

bool MacsMatch(const Bytes& a, const Bytes& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

Bytes HandshakeMac(const std::string& key, const char* role, const Bytes& client_nonce, const Bytes& server_nonce) {
  if (key.empty()) return {};
  const std::string label = absl::StrCat(kProtocolMagic, " ", role);
  Bytes input(label.begin(), label.end());
  input.insert(input.end(), client_nonce.begin(), client_nonce.end());
  input.insert(input.end(), server_nonce.begin(), server_nonce.end());
  Bytes mac(EVP_MAX_MD_SIZE);
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), input.data(), input.size(), mac.data(), &len);
  mac.resize(len);
  return mac;
}

namespace {

// Sends a request and returns the blob after the response's OK.
absl::StatusOr<Bytes> Exchange(int fd, const StoreRequest& request, SteadyTime deadline) {
  RETURN_IF_ERROR(SendFrame(fd, EncodeRequest(request), deadline));
  ASSIGN_OR_RETURN(Bytes reply, RecvFrame(fd, kMaxResponseBytes, deadline));
  MessageReader reader(std::move(reply));
  RETURN_IF_ERROR(ReadResponseStatus(reader));
  return reader.Blob();
}

}  // namespace

std::string DeriveStoreKey(const std::string& secret) {
  static std::mutex mu;  // one remembered secret: rank 0's server and client, a test's many clients
  static std::string last_secret, last_key;
  if (secret.empty()) return "";
  std::lock_guard<std::mutex> lock(mu);
  if (secret == last_secret) return last_key;
  unsigned char key[32];
  const auto* salt = reinterpret_cast<const unsigned char*>(kProtocolMagic);  // fixed: see docs/security.md
  PKCS5_PBKDF2_HMAC(secret.data(), static_cast<int>(secret.size()), salt, sizeof(kProtocolMagic) - 1, kKdfRounds,
                    EVP_sha256(), sizeof(key), key);
  last_secret = secret;
  last_key.assign(reinterpret_cast<const char*>(key), sizeof(key));
  return last_key;
}

absl::Status ClientHandshake(int fd, const std::string& key, SteadyTime deadline) {
  ASSIGN_OR_RETURN(const Bytes client_nonce, Nonce());  // 1 and 2
  ASSIGN_OR_RETURN(const Bytes server_nonce,
                   Exchange(fd, {.op = StoreOp::kHello, .key = kProtocolMagic, .value = client_nonce}, deadline));
  if (server_nonce.size() != kNonceBytes) {
    return absl::FailedPreconditionError("the store server's challenge is malformed: is it a tinyddp store server?");
  }
  ASSIGN_OR_RETURN(const Bytes server_mac,  // 3 and 4
                   Exchange(fd, {.op = StoreOp::kProof, .value = HandshakeMac(key, "client", client_nonce, server_nonce)},
                            deadline));
  if (key.empty() || MacsMatch(server_mac, HandshakeMac(key, "server", client_nonce, server_nonce))) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      server_mac.empty() ? "it runs without a job secret" : "it does not know the job secret", ", while this "
      "process has one (", kStoreSecretEnv, "): it is not this job's store (another job's on this port? something "
      "posing as it?), or its host was started without the secret; refusing it"));
}

absl::StatusOr<Bytes> ServerChallenge(Bytes first, Bytes* nonces) {  // 1 -> 2
  auto hello = ParseRequest(std::move(first));
  if (!hello.ok() || hello->op != StoreOp::kHello) {
    return absl::UnauthenticatedError("the first message on a store connection must be the hello; "
                                      "is this client a tinyddp store client?");
  }
  if (hello->key != kProtocolMagic) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this client speaks store protocol '", hello->key.substr(0, 32), "', this server '", kProtocolMagic,
        "': build the launcher and every rank from the same tinyddp"));
  }
  if (hello->value.size() != kNonceBytes) return absl::UnauthenticatedError("malformed store hello (its nonce)");
  ASSIGN_OR_RETURN(const Bytes server_nonce, Nonce());
  *nonces = hello->value;
  nonces->insert(nonces->end(), server_nonce.begin(), server_nonce.end());
  return OkResponse().Blob(server_nonce).Take();
}

absl::StatusOr<Bytes> ServerAnswer(Bytes second, const std::string& key, const Bytes& nonces) {  // 3 -> 4
  const Bytes client_nonce(nonces.begin(), nonces.begin() + kNonceBytes), server_nonce(nonces.begin() + kNonceBytes, nonces.end());
  auto proof = ParseRequest(std::move(second));
  if (!proof.ok() || proof->op != StoreOp::kProof) {
    return absl::UnauthenticatedError("the store handshake's third message must be the client's proof");
  }
  if (!key.empty() && proof->value.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "this job's store requires the job secret and this client has none: set ", kStoreSecretEnv,
        " in this process's environment to the job's secret (`launch` sets it for the workers it starts; "
        "with srun, mpirun or by hand, give every rank the same value)"));
  }
  if (!key.empty() && !MacsMatch(proof->value, HandshakeMac(key, "client", client_nonce, server_nonce))) {
    return absl::PermissionDeniedError(absl::StrCat(
        "wrong job secret: this client's ", kStoreSecretEnv, " is not the one this store was started with "
        "(another job's store on this port? a stale variable?), or it replayed another connection's handshake"));
  }
  return OkResponse().Blob(HandshakeMac(key, "server", client_nonce, server_nonce)).Take();  // 4
}

}  // namespace tinyddp::dist::internal
