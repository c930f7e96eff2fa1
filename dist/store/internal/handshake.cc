// The store's handshake: see handshake.h for the four messages.
#include "dist/store/internal/handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <mutex>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/store/internal/store_protocol.h"
#include "dist/store/store_secret.h"

namespace tinyddp::dist::internal {
namespace {

constexpr size_t kNonceBytes = 32;
constexpr int kKdfRounds = 100000;

// From the kernel (getrandom), not RAND_bytes: OpenSSL keeps a generator per thread (~4.6 KiB), and the
// server has a thread per connection. Up to 256 bytes come whole or not at all.
absl::StatusOr<Bytes> Nonce() {
  Bytes nonce(kNonceBytes);
  if (::getrandom(nonce.data(), kNonceBytes, 0) != static_cast<ssize_t>(kNonceBytes)) {
    return absl::InternalError("getrandom() failed: no nonce for the store's handshake");
  }
  return nonce;
}

// HMAC-SHA256(key, "<magic> <role>" | client nonce | server nonce); empty without a key.
Bytes Mac(const std::string& key, const char* role, const Bytes& client_nonce, const Bytes& server_nonce) {
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

bool MacsMatch(const Bytes& a, const Bytes& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// Reads a handshake message; a larger frame (e.g. an HTTP probe's "GET " read as a length) is no client's.
absl::StatusOr<Bytes> RecvHandshakeFrame(int fd, SteadyTime deadline) {
  auto frame = RecvFrame(fd, kMaxHelloBytes, deadline);
  if (absl::IsResourceExhausted(frame.status())) {
    return absl::UnauthenticatedError("this is a tinyddp store server: a connection must begin with its handshake");
  }
  return frame;
}

// Sends a request and returns the blob after the response's OK.
absl::StatusOr<Bytes> Exchange(int fd, const StoreRequest& request, SteadyTime deadline) {
  RETURN_IF_ERROR(SendFrame(fd, EncodeRequest(request), deadline));
  ASSIGN_OR_RETURN(const Bytes reply, RecvFrame(fd, kMaxResponseBytes, deadline));
  MessageReader reader(reply);
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
                   Exchange(fd, {.op = StoreOp::kProof, .value = Mac(key, "client", client_nonce, server_nonce)},
                            deadline));
  if (key.empty() || MacsMatch(server_mac, Mac(key, "server", client_nonce, server_nonce))) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      server_mac.empty() ? "it runs without a job secret" : "it does not know the job secret", ", while this "
      "process has one (", kStoreSecretEnv, "): it is not this job's store (another job's on this port? something "
      "posing as it?), or its host was started without the secret; refusing it"));
}

absl::StatusOr<Bytes> ServerHandshake(int fd, const std::string& key, SteadyTime deadline) {
  ASSIGN_OR_RETURN(const Bytes first, RecvHandshakeFrame(fd, deadline));  // 1
  auto hello = ParseRequest(first);
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
  RETURN_IF_ERROR(SendFrame(fd, OkResponse().Blob(server_nonce).Take(), deadline));  // 2

  ASSIGN_OR_RETURN(const Bytes second, RecvHandshakeFrame(fd, deadline));  // 3
  auto proof = ParseRequest(second);
  if (!proof.ok() || proof->op != StoreOp::kProof) {
    return absl::UnauthenticatedError("the store handshake's third message must be the client's proof");
  }
  if (!key.empty() && proof->value.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "this job's store requires the job secret and this client has none: set ", kStoreSecretEnv,
        " in this process's environment to the job's secret (`launch` sets it for the workers it starts; "
        "with srun, mpirun or by hand, give every rank the same value)"));
  }
  if (!key.empty() && !MacsMatch(proof->value, Mac(key, "client", hello->value, server_nonce))) {
    return absl::PermissionDeniedError(absl::StrCat(
        "wrong job secret: this client's ", kStoreSecretEnv, " is not the one this store was started with "
        "(another job's store on this port? a stale variable?), or it replayed another connection's handshake"));
  }
  return OkResponse().Blob(Mac(key, "server", hello->value, server_nonce)).Take();  // 4
}

}  // namespace tinyddp::dist::internal
