// TracedCommHook: a decorator that records each bucket's communication in a Tracer (trace.h), labelled
// with the path the wrapped hook took ("NCCL all_reduce", "copy engines"). It attaches through DDP's comm
// hook seam: a program that traces wraps the hook it gives DDP (DdpOptions::comm_hook; AllReduceHook for
// the default), so that neither DDP nor the reducer knows anything of tracing:
//
//   options.comm_hook = TracedCommHook(AllReduceHook(), &tracer);
//
// What lands on the trace's comm track, one "all_reduce" interval per bucket (args: bucket index, path):
//   GPU  from a timing event on the group's stream (ProcessGroup::collective_stream), recorded once the
//        gradients are ready (the stream first waits for the compute stream, as the group itself does
//        before the collective), to a timing event recorded where the collective really ends: a side
//        stream made to wait for the Work (SynchronizeStream), since an external all_reduce may end
//        beyond the group's stream;
//   CPU  the interval the backend's thread ran the collective (Work::HostInterval, Gloo), or from the
//        launch to the end of backward when the backend does not say.
// While the tracer is null or disabled the wrapped hook runs untouched. Everything else of the wrapped
// hook (its path, padded_numel, on_buckets_rebuilt) is passed through. Recording allocates nothing per
// bucket once every bucket has been seen (per-bucket records are kept and reused).
#ifndef TINYDDP_DIST_OBSERVE_TRACE_TRACED_COMM_HOOK_H_
#define TINYDDP_DIST_OBSERVE_TRACE_TRACED_COMM_HOOK_H_

#include "dist/ddp/comm_hooks.h"
#include "dist/observe/trace/trace.h"

namespace tinyddp::dist {

/// `inner`, recorded into `tracer` (not owned; must outlive the hook). An empty `inner` is AllReduceHook.
CommHook TracedCommHook(CommHook inner, Tracer* tracer);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_OBSERVE_TRACE_TRACED_COMM_HOOK_H_
