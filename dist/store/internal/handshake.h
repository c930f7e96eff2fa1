// The handshake that opens every TCPStore connection: a mutual challenge-response over the job secret
// (store_secret.h). Each side proves that it knows the secret without sending it, and a recorded
// handshake is worth nothing on another connection. The MAC and the key derivation are OpenSSL's.
//
//   client                                                      server
//   1. hello      kHello: magic, Nc (32 random bytes)         ->
//   2. challenge                                              <-  OK, Ns (32 random bytes)
//   3. proof      kProof: HMAC(K, "<magic> client" Nc Ns)     ->
//   4. answer                                                 <-  OK, HMAC(K, "<magic> server" Nc Ns)
//
// K = PBKDF2-HMAC-SHA256(secret): stretching makes guessing a weak secret from a captured handshake slow.
// The other side's fresh nonce stops a replay; the role in the MAC stops one side's proof being sent back
// to it as the other's. MACs are compared in constant time. Without a secret a side sends an empty MAC: a
// server without one admits anyone, a client without one trusts any server, and a client with one refuses
// a server whose MAC is missing or wrong.
//
// Not done: only the start of a connection is authenticated. Requests and values then travel in the
// clear, unsigned, so someone who can alter traffic between a rank and the store (not just watch it) can
// take over an open connection. docs/security.md says what follows.
#ifndef TINYDDP_DIST_STORE_INTERNAL_HANDSHAKE_H_
#define TINYDDP_DIST_STORE_INTERNAL_HANDSHAKE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dist/store/internal/socket.h"
#include "dist/store/store.h"

namespace tinyddp::dist::internal {

/// The key both sides MAC with, derived from the job secret; "" for no secret. The first derivation of
/// a secret takes about 60 ms (100,000 rounds); the process then remembers it.
std::string DeriveStoreKey(const std::string& secret);

/// The client's half: sends 1 and 3, checks 4. OK once the server has proved that it knows `key` (any
/// server, when `key` is ""). The server's refusals come back as it sent them (Unauthenticated,
/// PermissionDenied, FailedPrecondition; ResourceExhausted when it is full); a server that fails to
/// prove itself is PermissionDenied.
absl::Status ClientHandshake(int fd, const std::string& key, SteadyTime deadline);

/// The server's half: reads 1, sends 2, reads and checks 3, and returns 4 for the caller to send once it
/// has admitted the connection. Errors: Unavailable or DeadlineExceeded when the peer hung up or went
/// quiet (nothing to answer); anything else says why the client is refused, for the caller to send it.
absl::StatusOr<Bytes> ServerHandshake(int fd, const std::string& key, SteadyTime deadline);

}  // namespace tinyddp::dist::internal

#endif  // TINYDDP_DIST_STORE_INTERNAL_HANDSHAKE_H_
