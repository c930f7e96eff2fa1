// KeepFreedHostMemoryMapped: two mallopt() calls, made once (tensor/internal/host_heap.h says why).
#include "tensor/internal/host_heap.h"

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tinyddp::internal {

void KeepFreedHostMemoryMapped() {
  [[maybe_unused]] static const bool done = [] {
#if defined(__GLIBC__)
    // The user's own settings (glibc reads these variables at start-up) take precedence.
    if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr) mallopt(M_MMAP_THRESHOLD, 32 << 20);
    if (std::getenv("MALLOC_TRIM_THRESHOLD_") == nullptr) mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
    return true;
  }();
}

}  // namespace tinyddp::internal
