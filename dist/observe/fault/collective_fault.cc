// CollectiveFaultInjector: MaybeInjectFault("collective", seq) as each call is issued.
#include "dist/observe/fault/collective_fault.h"

#include <cstdlib>
#include <memory>

#include "base/fault_injection.h"

namespace tinyddp::dist {

void CollectiveFaultInjector::Issued(const CollectiveInfo& info) { MaybeInjectFault("collective", info.seq); }

void AttachCollectiveFaults(ProcessGroup& group) {
  if (std::getenv(kFaultEnv) == nullptr) return;
  group.AddObserver(std::make_shared<CollectiveFaultInjector>());
}

}  // namespace tinyddp::dist
