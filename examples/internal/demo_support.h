// What the two collective demos (all_reduce_demo, collectives_demo) share: their main() (flags, starting
// their own ranks, joining the group) and printing tensors rank by rank, so each demo file is only the
// collectives it shows.
#ifndef TINYDDP_EXAMPLES_INTERNAL_DEMO_SUPPORT_H_
#define TINYDDP_EXAMPLES_INTERNAL_DEMO_SUPPORT_H_

#include <functional>
#include <string>

#include "dist/process_group/process_group.h"
#include "tensor/tensor.h"

namespace tinyddp::examples {

/// "[3, 3, 3]": whole numbers without decimals, like Python printing a list of ints.
std::string Format(const Tensor& t);

/// Prints one line per rank, in rank order: rank r prints, then everyone meets at a barrier.
void PrintInRankOrder(dist::ProcessGroup& pg, const std::string& line);

/// The body of a demo: the joined group and the device its tensors live on (this rank's GPU for NCCL, the
/// CPU for Gloo). Returns the process's exit code.
using DemoBody = std::function<int(dist::ProcessGroup& pg, Device device)>;

/// A demo's whole main(): parses [--backend=auto|nccl|gloo], run directly starts one worker per GPU (or 2
/// CPU workers) and waits for them, and as a worker joins the group (InitProcessGroup) and runs `body`.
/// Errors are printed prefixed with `name`.
int DemoMain(const char* name, int argc, char** argv, const DemoBody& body);

}  // namespace tinyddp::examples

#endif  // TINYDDP_EXAMPLES_INTERNAL_DEMO_SUPPORT_H_
