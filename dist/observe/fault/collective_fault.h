// The fault-injection point "collective" (base/fault_injection.h) as a CollectiveObserver
// (dist/process_group/collective_observer.h): with TINYDDP_FAULT=rank=1,point=collective,step=40,action=kill
// rank 1 dies as it issues collective #40 of its group (numbered, before it runs), so its peers wait in #40
// for a rank that is gone, as they would for a rank killed inside a DDP bucket's all_reduce. For the
// failure tests (tests/faults/); attached by programs that offer fault injection (ddp_mlp), after the
// flight recorder, so that the dead rank's ring still shows the collective it died at.
#ifndef TINYDDP_DIST_OBSERVE_FAULT_COLLECTIVE_FAULT_H_
#define TINYDDP_DIST_OBSERVE_FAULT_COLLECTIVE_FAULT_H_

#include "dist/process_group/collective_observer.h"
#include "dist/process_group/process_group.h"

namespace tinyddp::dist {

/// Hangs, exits or kills this process (base/fault_injection.h's MaybeInjectFault) when TINYDDP_FAULT names
/// point "collective" and the issued call's sequence number.
class CollectiveFaultInjector : public CollectiveObserver {
 public:
  void Issued(const CollectiveInfo& info) override;
};

/// Gives `group` a CollectiveFaultInjector when TINYDDP_FAULT is set (nothing otherwise). Call after
/// AttachFlightRecorder, before the group's first collective.
void AttachCollectiveFaults(ProcessGroup& group);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_OBSERVE_FAULT_COLLECTIVE_FAULT_H_
