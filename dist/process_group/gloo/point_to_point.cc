// ProcessGroupGloo's Send, Recv and BatchSendRecv: Gloo's unbound buffers, posted and waited for on the
// worker thread. Gloo's TCP transport is rendezvous-style (a send moves data only once the receiver has
// posted its recv), so the ops of one call are all posted before any is waited for.
#include <algorithm>
#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "dist/process_group/gloo/process_group_gloo.h"
#include "gloo/common/error.h"
#include "gloo/context.h"
#include "gloo/transport/unbound_buffer.h"

namespace tinyddp::dist {

// A slot prefix no Gloo algorithm uses (they take 0x01..0x08, our ring reduce-scatter 0x7e).
constexpr uint64_t kPointToPointSlotPrefix = 0x7d;

std::shared_ptr<Work> ProcessGroupGloo::RunPointToPoint(std::vector<P2POp> ops, const Call& call) {
  std::vector<uint64_t> slots;  // prefix | tag (24 bits) | the message's count for its (peer, tag, direction)
  for (const P2POp& op : ops) {
    uint32_t& count = p2p_counts_[{op.peer, op.tag, op.kind == P2POp::Kind::kSend}];
    slots.push_back(kPointToPointSlotPrefix << 56 | static_cast<uint64_t>(op.tag) << 32 | count++);
  }
  return Enqueue(call, [this, ops = std::move(ops), slots](uint32_t, std::chrono::milliseconds budget) {
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> buffers;
    for (size_t i = 0; i < ops.size(); ++i) {
      buffers.push_back(context_->createUnboundBuffer(ops[i].tensor.data_ptr(), ops[i].tensor.nbytes()));
      if (ops[i].kind == P2POp::Kind::kSend) buffers[i]->send(ops[i].peer, slots[i]);
      else buffers[i]->recv(ops[i].peer, slots[i]);
    }
    const auto deadline = std::chrono::steady_clock::now() + budget;
    for (size_t i = 0; i < ops.size(); ++i) {
      const bool send = ops[i].kind == P2POp::Kind::kSend;
      // Gloo reads 0 as "no timeout": an exhausted budget still waits 1 ms, then times out.
      const auto left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     deadline - std::chrono::steady_clock::now()), std::chrono::milliseconds(1));
      try {
        if (!(send ? buffers[i]->waitSend(left) : buffers[i]->waitRecv(left))) throw gloo::IoException("aborted");
      } catch (const gloo::IoException& e) {
        throw gloo::IoException(absl::StrCat(
            "rank ", ops[i].peer, " did not ", send ? "receive" : "send", " the message with tag ", ops[i].tag,
            " (it must post the matching ", send ? "Recv" : "Send", " naming rank ", rank(),
            ", same tag and size; if both ranks Send before they Recv, make the pair one BatchSendRecv): ",
            e.what()));
      }
    }
  });
}

}  // namespace tinyddp::dist
