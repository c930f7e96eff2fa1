// Early returns on error, the way Abseil-style code spells them (absl::Status has no public macros in the
// Abseil release Debian 12 ships). Every boundary with the outside world (files, sockets, the store,
// process-group setup, flags, checkpoints) returns absl::Status or absl::StatusOr; these keep the happy
// path readable:
//
//   RETURN_IF_ERROR(store.Set("key", value));              // returns the Status if it is not OK
//   ASSIGN_OR_RETURN(Bytes value, store.Get("key"));       // declares `value`, or returns the error
//
// RETURN_IF_ERROR takes an absl::Status or an absl::StatusOr<T> (whose status it checks).
#ifndef TINYDDP_BASE_STATUS_MACROS_H_
#define TINYDDP_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tinyddp::internal_status {

inline const absl::Status& AsStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& AsStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

}  // namespace tinyddp::internal_status

/// Evaluates `expr` (an absl::Status or absl::StatusOr) once and returns its status from the enclosing
/// function when it is not OK.
#define RETURN_IF_ERROR(expr)                                                          \
  do {                                                                                 \
    const auto& tinyddp_status_or_ = (expr);                                           \
    if (!tinyddp_status_or_.ok()) {                                                    \
      return ::tinyddp::internal_status::AsStatus(tinyddp_status_or_);                 \
    }                                                                                  \
  } while (false)

#define TINYDDP_STATUS_CONCAT_INNER_(a, b) a##b
#define TINYDDP_STATUS_CONCAT_(a, b) TINYDDP_STATUS_CONCAT_INNER_(a, b)

/// `lhs` = the value of the absl::StatusOr `expr`, or returns its error from the enclosing function.
/// `lhs` may declare a variable: ASSIGN_OR_RETURN(auto x, F());
#define ASSIGN_OR_RETURN(lhs, expr) \
  TINYDDP_ASSIGN_OR_RETURN_IMPL_(TINYDDP_STATUS_CONCAT_(tinyddp_statusor_, __LINE__), lhs, expr)

#define TINYDDP_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                   \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = *std::move(statusor)

#endif  // TINYDDP_BASE_STATUS_MACROS_H_
