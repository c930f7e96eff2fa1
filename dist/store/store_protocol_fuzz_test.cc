// A fuzz-style test of the store's wire protocol: random and mutated bytes go through every parser an
// untrusted peer can reach (ParseRequest on the server, ReadResponseStatus on the client, RecvFrame on
// both), and finally at a real server over a socket. Nothing may crash (run it under --config=asan too),
// every failure must be an error status, and what the request parser accepts must be canonical:
// re-encoding it gives back the very same bytes.
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dist/store/internal/socket.h"
#include "dist/store/internal/store_protocol.h"
#include "dist/store/tcp_store.h"
#include "dist/store/tcp_store_server.h"
#include "dist/testing/store_abuse.h"
#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

using internal::EncodeRequest;
using internal::ParseRequest;
using internal::StoreOp;
using internal::StoreRequest;

bool operator==(const StoreRequest& a, const StoreRequest& b) {
  return std::tie(a.op, a.key, a.keys, a.value, a.expected, a.number) ==
         std::tie(b.op, b.key, b.keys, b.value, b.expected, b.number);
}

Bytes RandomBytes(std::mt19937& rng, size_t n) {
  Bytes b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

std::string RandomKey(std::mt19937& rng) {
  const Bytes b = RandomBytes(rng, rng() % 24);
  return std::string(b.begin(), b.end());
}

// A well-formed request of a random op with random fields.
StoreRequest RandomRequest(std::mt19937& rng) {
  StoreRequest r;
  r.op = static_cast<StoreOp>(1 + rng() % 9);
  const int64_t number = static_cast<int64_t>(static_cast<uint64_t>(rng()) << 32 | rng());
  switch (r.op) {
    case StoreOp::kHello:
    case StoreOp::kSet:
      r.key = RandomKey(rng);
      r.value = RandomBytes(rng, rng() % 40);
      break;
    case StoreOp::kGet:
    case StoreOp::kAdd:
      r.key = RandomKey(rng);
      r.number = number;
      break;
    case StoreOp::kCompareSet:
      r.key = RandomKey(rng);
      r.expected = RandomBytes(rng, rng() % 40);
      r.value = RandomBytes(rng, rng() % 40);
      break;
    case StoreOp::kWait:
      for (int i = rng() % 6; i > 0; --i) r.keys.push_back(RandomKey(rng));
      r.number = number;
      break;
    case StoreOp::kDelete:
      r.key = RandomKey(rng);
      break;
    case StoreOp::kNumKeys:
      break;
    case StoreOp::kProof:
      r.value = RandomBytes(rng, rng() % 40);
      break;
  }
  return r;
}

// One of the mutations a fuzzer tries: flip a bit, overwrite a byte, truncate, extend, splice a
// length field that claims far more than is there.
Bytes Mutate(std::mt19937& rng, Bytes b) {
  switch (rng() % 5) {
    case 0:
      if (!b.empty()) b[rng() % b.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
      break;
    case 1:
      if (!b.empty()) b[rng() % b.size()] = static_cast<uint8_t>(rng());
      break;
    case 2:
      b.resize(b.empty() ? 0 : rng() % b.size());
      break;
    case 3: {
      const Bytes extra = RandomBytes(rng, 1 + rng() % 8);
      b.insert(b.begin() + (b.empty() ? 0 : rng() % b.size()), extra.begin(), extra.end());
      break;
    }
    case 4:
      if (b.size() >= 5) {
        const size_t at = 1 + rng() % (b.size() - 4);
        const uint32_t huge = 0xffffffffu - static_cast<uint32_t>(rng() % 1024);
        for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(huge >> (8 * i));
      }
      break;
  }
  return b;
}

// The parser's contract on any input: an error is InvalidArgument; an accepted body is canonical.
void ExpectParsedOrRefused(const Bytes& body) {
  auto parsed = ParseRequest(body);
  if (!parsed.ok()) {
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status())) << parsed.status();
    return;
  }
  EXPECT_EQ(EncodeRequest(*parsed), body) << "an accepted request must re-encode to the same bytes";
}

TEST(StoreProtocolFuzz, EveryWellFormedRequestRoundTrips) {
  std::mt19937 rng(1);
  for (int i = 0; i < 20000; ++i) {
    const StoreRequest r = RandomRequest(rng);
    auto back = ParseRequest(EncodeRequest(r));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(*back == r) << "op " << static_cast<int>(r.op);
  }
}

TEST(StoreProtocolFuzz, RandomBytesNeverCrashTheRequestParser) {
  std::mt19937 rng(2);
  for (int i = 0; i < 200000; ++i) {
    Bytes body = RandomBytes(rng, rng() % 48);
    if (!body.empty() && rng() % 2) body[0] = static_cast<uint8_t>(1 + rng() % 9);  // a valid op, half the time
    ExpectParsedOrRefused(body);
  }
}

TEST(StoreProtocolFuzz, MutatedRequestsNeverCrashTheRequestParser) {
  std::mt19937 rng(3);
  int accepted = 0;
  for (int i = 0; i < 200000; ++i) {
    Bytes body = EncodeRequest(RandomRequest(rng));
    for (int m = 1 + rng() % 3; m > 0; --m) body = Mutate(rng, std::move(body));
    accepted += ParseRequest(body).ok() ? 1 : 0;
    ExpectParsedOrRefused(body);
  }
  EXPECT_GT(accepted, 0) << "the mutations never produced a valid request: they test nothing but the first byte";
}

TEST(StoreProtocolFuzz, RandomResponsesNeverCrashTheClientDecoder) {
  std::mt19937 rng(4);
  for (int i = 0; i < 200000; ++i) {
    Bytes body = RandomBytes(rng, rng() % 32);
    if (rng() % 2) body = Mutate(rng, internal::ErrorResponse(absl::NotFoundError(RandomKey(rng))));
    internal::MessageReader reader(body);
    absl::Status s = internal::ReadResponseStatus(reader);
    if (body.empty()) {
      EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    } else if (body[0] == 0) {
      EXPECT_TRUE(s.ok()) << s;
      (void)reader.Blob();  // reading a result past the end is an error, not a crash
    } else if (body[0] > static_cast<uint8_t>(absl::StatusCode::kUnauthenticated)) {
      EXPECT_TRUE(absl::IsUnknown(s) || absl::IsInvalidArgument(s)) << "a code absl does not know was trusted: " << s;
    } else {
      EXPECT_FALSE(s.ok());
    }
  }
}

TEST(StoreProtocolFuzz, RandomFramesNeverCrashTheFrameReader) {
  std::mt19937 rng(5);
  for (int i = 0; i < 3000; ++i) {
    int pair[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
    internal::Socket reader(pair[0]), writer(pair[1]);
    const Bytes bytes = RandomBytes(rng, rng() % 64);
    ASSERT_TRUE(internal::SendAll(writer.fd(), bytes.data(), bytes.size(), internal::kNoDeadline).ok());
    if (rng() % 2) writer.Close();  // sometimes the peer hangs up, sometimes it just stops
    auto frame = internal::RecvFrame(reader.fd(), 1 + rng() % 64, internal::DeadlineAfter(std::chrono::milliseconds(1)));
    if (frame.ok()) {
      EXPECT_LE(frame->size() + 4, bytes.size());
    } else {
      EXPECT_TRUE(absl::IsResourceExhausted(frame.status()) || absl::IsUnavailable(frame.status()) ||
                  absl::IsDeadlineExceeded(frame.status()))
          << frame.status();
    }
  }
}

TEST(StoreProtocolFuzz, ARealServerAnswersEveryMutatedFrameAndKeepsItsData) {
  auto server = TCPStoreServer::Start({});
  ASSERT_TRUE(server.ok()) << server.status();
  auto honest = TCPStore::Create({.host = "127.0.0.1", .port = (*server)->port()});
  ASSERT_TRUE(honest.ok()) << honest.status();
  ASSERT_TRUE((*honest)->Set("honest/before", std::string("kept")).ok());
  std::mt19937 rng(6);
  auto connect = [&] {
    auto c = testing::RawStoreConnection::Connect((*server)->port());
    EXPECT_TRUE(c.ok() && c->Hello("").ok());
    return std::move(*c);
  };
  testing::RawStoreConnection c = connect();
  int answered = 0, closed = 0;
  for (int i = 0; i < 5000; ++i) {
    Bytes body = Mutate(rng, EncodeRequest(RandomRequest(rng)));
    // A valid Get or Wait would block server-side for its (random) timeout: ask for none instead.
    if (auto r = ParseRequest(body); r.ok() && (r->op == StoreOp::kGet || r->op == StoreOp::kWait)) {
      r->number = 0;
      body = EncodeRequest(*r);
    }
    ASSERT_TRUE(c.SendFrame(body).ok());
    absl::Status s = c.ReadResponse();
    if (absl::IsUnavailable(s)) {  // the server may hang up on a connection (never because of a valid frame)
      ++closed;
      c = connect();
    } else {
      ++answered;
    }
  }
  EXPECT_EQ(answered + closed, 5000);
  EXPECT_GT(answered, 4000) << "closed " << closed;
  EXPECT_EQ(*(*honest)->GetString("honest/before"), "kept");
  ASSERT_TRUE((*honest)->Set("honest/after", std::string("still served")).ok());
  EXPECT_EQ(*(*honest)->GetString("honest/after"), "still served");
}

}  // namespace
}  // namespace tinyddp::dist
