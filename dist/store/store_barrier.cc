// StoreBarrier: see store_barrier.h.
#include "dist/store/store_barrier.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "dist/store/internal/kv_table.h"

namespace tinyddp::dist {

absl::Status StoreBarrier(Store& store, const std::string& name, int world_size,
                          std::chrono::milliseconds timeout) {
  const std::string arrived_key = name + "/arrived";
  const std::string done_key = name + "/done";
  auto arrived = store.Add(arrived_key, 1);
  RETURN_IF_ERROR(arrived);
  if (*arrived == world_size) {
    RETURN_IF_ERROR(store.Set(done_key, std::string("1")));
  }
  absl::Status waited = store.Wait({done_key}, timeout);
  if (absl::IsDeadlineExceeded(waited)) {
    auto now = store.Add(arrived_key, 0);
    return absl::DeadlineExceededError(absl::StrCat(
        "barrier '", name, "': only ", now.ok() ? absl::StrCat(*now) : "?", " of ", world_size,
        " ranks arrived within ", absl::FormatDuration(absl::FromChrono(timeout)),
        " (a rank crashed, is stuck, or WORLD_SIZE is larger than the number of ranks started)"));
  }
  return waited;
}

}  // namespace tinyddp::dist
