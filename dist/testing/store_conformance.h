// Store conformance checks shared by the tests of every Store implementation (HashStore, TCPStore,
// PrefixStore), so they are all held to the same semantics. Each function records gtest failures.
#ifndef TINYDDP_DIST_TESTING_STORE_CONFORMANCE_H_
#define TINYDDP_DIST_TESTING_STORE_CONFORMANCE_H_

#include <functional>
#include <memory>

#include "dist/store/store.h"

namespace tinyddp::dist::testing {

/// Makes a fresh handle on the store under test: another client of the same TCPStore, or the same
/// HashStore. Threads of one test each get their own handle.
using StoreHandleFactory = std::function<std::shared_ptr<Store>()>;

/// Set/Get round-trips random binary values (odd sizes, zero bytes, empty), overwrites, Delete, NumKeys.
void CheckSetGetDeleteNumKeys(Store& store);
/// Add from zero, negative deltas, on a non-integer value (InvalidArgument), and its text form via Get.
void CheckAdd(Store& store);
/// CompareSet on an absent key, on a mismatch and on a match.
void CheckCompareSet(Store& store);
/// Get and Wait with a short timeout on keys nobody sets fail with DeadlineExceeded naming the keys.
void CheckTimeoutsNameTheKeys(Store& store);
/// A Get blocked in one thread returns the value another thread sets later; Wait likewise.
void CheckBlockingGetWakesOnSet(const StoreHandleFactory& handles);
/// `threads` threads each Add random deltas many times: the total is exact; each sees distinct results.
void CheckConcurrentAddsAreAtomic(const StoreHandleFactory& handles, int threads);
/// Keys, values and Wait lists over store.h's limits are InvalidArgument naming the limit; values at the
/// limit round-trip; the store keeps working afterwards.
void CheckLimitsAreEnforcedWithClearErrors(Store& store);
/// A Wait on `n` keys (a duplicate among them) returns once another handle has set them all, in random
/// order, one of them set, deleted and set again.
void CheckWaitOnManyKeysEndsWhenTheLastArrives(const StoreHandleFactory& handles, int n);

}  // namespace tinyddp::dist::testing

#endif  // TINYDDP_DIST_TESTING_STORE_CONFORMANCE_H_
