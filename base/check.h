// How math code stops on misuse: one line naming the op, what was wrong (shapes, dtypes, devices) and a
// hint, then abort(). Math misuse is a programming error, not a runtime condition to recover from, so
// it is not an absl::Status (docs/design.md, "Errors"); the message is what makes it cheap to fix.
#ifndef TINYDDP_BASE_CHECK_H_
#define TINYDDP_BASE_CHECK_H_

#include <string>

#include "absl/strings/str_cat.h"

namespace tinyddp::internal {

/// Prints "tinyddp: <op>: <message> [file:line]" to stderr and aborts.
[[noreturn]] void FailOp(const char* op, const std::string& message, const char* file, int line);

}  // namespace tinyddp::internal

/// Stops with "tinyddp: <op>: <pieces...>" unless `cond` holds. The pieces go through absl::StrCat,
/// so shapes (ShapeToString), dtypes (DTypeName) and numbers mix freely:
///   TINYDDP_CHECK_OP(a.dim() == 2, "MatMul", "a must be 2-D, got ", ShapeToString(a.shape()),
///                    "; hint: flatten the batch first");
#define TINYDDP_CHECK_OP(cond, op, ...)                                                      \
  do {                                                                                       \
    if (!(cond)) ::tinyddp::internal::FailOp((op), ::absl::StrCat(__VA_ARGS__), __FILE__, __LINE__); \
  } while (0)

#endif  // TINYDDP_BASE_CHECK_H_
