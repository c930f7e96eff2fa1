// FailOp: the one place tensor/ prints a misuse message and stops (base/check.h).
#include "base/check.h"

#include <cstdio>
#include <cstdlib>

namespace tinyddp::internal {

void FailOp(const char* op, const std::string& message, const char* file, int line) {
  std::fprintf(stderr, "tinyddp: %s: %s [%s:%d]\n", op, message.c_str(), file, line);
  std::fflush(stderr);
  std::abort();
}

}  // namespace tinyddp::internal
