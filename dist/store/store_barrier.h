// StoreBarrier: a barrier made of two store calls, for the moments before any process group exists
// (rendezvous, startup, shutdown): every rank Adds 1 to a counter, the last arrival sets a "done" key,
// and everyone Waits for it. Works over any Store (TCPStore across processes, HashStore across threads).
#ifndef TINYDDP_DIST_STORE_STORE_BARRIER_H_
#define TINYDDP_DIST_STORE_STORE_BARRIER_H_

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "dist/store/store.h"

namespace tinyddp::dist {

/// Returns once `world_size` callers have entered the barrier `name`, or DeadlineExceeded after `timeout`
/// saying how many arrived. Precondition: each name is used for one barrier only (add a counter to reuse),
/// and exactly world_size callers use it.
absl::Status StoreBarrier(Store& store, const std::string& name, int world_size,
                          std::chrono::milliseconds timeout);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_STORE_STORE_BARRIER_H_
