// The ring: n-1 steps of "send my running sum left, receive one from the right, add my own block".
#include "dist/process_group/gloo/gloo_ring_reduce_scatter.h"

#include <algorithm>
#include <cstring>

#include "dist/process_group/host_reduce.h"
#include "gloo/common/error.h"
#include "gloo/transport/unbound_buffer.h"
#include "gloo/types.h"

namespace tinyddp::dist {

namespace {

// A slot prefix Gloo's own algorithms do not use (they take 0x01..0x08), so our messages never match theirs.
constexpr uint8_t kRingReduceScatterSlotPrefix = 0x7e;

int Mod(int a, int n) { return ((a % n) + n) % n; }

}  // namespace

void RingReduceScatter(gloo::Context& context, const Tensor& input, const Tensor& output, ReduceOp op, uint32_t tag,
                       std::chrono::milliseconds timeout, std::vector<uint8_t>& scratch) {
  const int n = context.size;
  const int rank = context.rank;
  const size_t block_bytes = output.nbytes();
  const uint8_t* blocks = static_cast<const uint8_t*>(input.data_ptr());
  auto block = [&](int b) { return blocks + static_cast<size_t>(b) * block_bytes; };
  if (n == 1) {
    if (output.data_ptr() != block(0)) std::memcpy(output.data_ptr(), block(0), block_bytes);
    return;
  }
  // Two staging blocks: `sending` holds the running sum travelling left, `arriving` the one from the right.
  if (scratch.size() < 2 * block_bytes) scratch.resize(2 * block_bytes);
  uint8_t* sending = scratch.data();
  uint8_t* arriving = scratch.data() + block_bytes;
  auto send_buf = context.createUnboundBuffer(sending, block_bytes);
  auto recv_buf = context.createUnboundBuffer(arriving, block_bytes);
  const int left = Mod(rank - 1, n);
  const int right = Mod(rank + 1, n);
  const uint64_t slot = gloo::Slot::build(kRingReduceScatterSlotPrefix, tag);
  const HostReduceFn reduce = GetHostReduceFn(output.dtype(), op);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto remaining = [&] {
    auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    // Gloo reads 0 as "no timeout"; an exhausted budget must still time out, so wait 1 ms at least.
    return std::max(left_ms, std::chrono::milliseconds(1));
  };

  // Step s sends block (rank + s + 1) and receives block (rank + s + 2): the first send is our own data,
  // and the block that arrives at the last step (s = n - 2) is block `rank`, complete but for our share.
  // So block b sets out from rank b - 1 and gathers b - 2, b - 3, ... on its way to rank b, as in Gloo.
  std::memcpy(sending, block(Mod(rank + 1, n)), block_bytes);
  for (int s = 0; s < n - 1; ++s) {
    send_buf->send(left, slot);
    recv_buf->recv(right, slot);
    if (!recv_buf->waitRecv(remaining()) || !send_buf->waitSend(remaining())) {
      throw gloo::IoException("ring reduce-scatter: a send or receive was aborted");
    }
    const int b = Mod(rank + s + 2, n);
    void* into = (s == n - 2) ? output.data_ptr() : static_cast<void*>(sending);
    reduce(into, arriving, block(b), output.numel());
  }
}

}  // namespace tinyddp::dist
