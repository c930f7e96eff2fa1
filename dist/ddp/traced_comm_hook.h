// TracedCommHook: a decorator that records each bucket's communication in a Tracer (trace.h), labelled
// with the path the wrapped hook took ("NCCL all_reduce", "copy engines"). DDP wraps its hook with it
// when DdpOptions::tracer is set, so that the reducer's launch path knows nothing of tracing.
//
// What lands on the trace's comm track, one "all_reduce" interval per bucket (args: bucket index, path):
//   GPU  from a timing event on the group's stream, recorded once the gradients are ready (the stream
//        first waits for the compute stream, as the group itself does before the collective), to a
//        timing event recorded where the collective really ends: a side stream made to wait for the
//        Work (SynchronizeStream), since an external all_reduce may end beyond the group's stream;
//   CPU  the interval the backend's thread ran the collective (Work::HostInterval, Gloo), or from the
//        launch to the end of backward when the backend does not say.
// While the tracer is null or disabled the wrapped hook runs untouched. Recording allocates nothing
// per bucket once every bucket has been seen (per-bucket records are kept and reused).
#ifndef TINYDDP_DIST_DDP_TRACED_COMM_HOOK_H_
#define TINYDDP_DIST_DDP_TRACED_COMM_HOOK_H_

#include "dist/ddp/comm_hooks.h"
#include "dist/ddp/trace.h"
#include "tensor/stream.h"

namespace tinyddp::dist {

/// `inner`, recorded into `tracer` (not owned; must outlive the hook). `comm_stream`: the stream the
/// group runs its collectives on (CollectiveStream, comm_stream.h); none for a host backend.
CommHook TracedCommHook(CommHook inner, Tracer* tracer, cuda::Stream comm_stream);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_DDP_TRACED_COMM_HOOK_H_
