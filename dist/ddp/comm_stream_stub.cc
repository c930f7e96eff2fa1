// CollectiveStream without CUDA (dist/ddp/comm_stream.h): Gloo runs on a host thread, there is no stream.
#include "dist/ddp/comm_stream.h"

namespace tinyddp::dist {

cuda::Stream CollectiveStream(ProcessGroup&) { return cuda::Stream(); }

}  // namespace tinyddp::dist
