// Job settings: what every launcher of a multi-node job must agree on, and the meeting where they check it
// (step 2 of launcher.h). Used by launcher.cc only.
//
// Each node's launcher has a command line of its own, and a difference shapes the job differently on each
// node: --nnodes 2 on one and 3 on another, --max_restarts 1 vs 0 (one node restarts, the other gives up).
// Unchecked, that ends in a rendezvous timeout whose message never says what differs. So at their first
// meeting in node 0's store every launcher publishes its settings; node 0 compares each node's with its
// own as they arrive, every other node compares node 0's with its own, and the first difference found is
// the outcome for all (the store's CompareSet: the first writer wins). Every launcher then exits within a
// second or two, naming the setting and both values.
#ifndef TINYDDP_DIST_ELASTIC_JOB_SETTINGS_H_
#define TINYDDP_DIST_ELASTIC_JOB_SETTINGS_H_

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "dist/elastic/launch_options.h"
#include "dist/store/store.h"

namespace tinyddp::dist {

/// The settings that shape the job, one "name=value" line each: --nnodes, --nproc_per_node (the count it
/// resolved to: `nproc`), --max_restarts, --timeout (however it was given), and the program's file name
/// with its arguments (the folder may differ between machines).
std::string JobSettingsRecord(const LaunchOptions& options, int nproc);

/// "" when the two records agree; otherwise the first difference, e.g. "the launchers disagree on
/// --nnodes: node 0 has 2, node 1 has 3; ...".
std::string CompareJobSettings(const std::string& record_a, int node_a, const std::string& record_b, int node_b);

/// Claims this node's --node_rank in the job's store, publishes its settings and returns once every node's
/// launcher has joined with the same ones. FailedPrecondition names the first difference (every launcher
/// returns it, within a second of the mismatched one joining) or a node_rank claimed twice;
/// DeadlineExceeded names the node that did not join within `timeout`.
absl::Status MeetOtherLaunchers(Store& store, const LaunchOptions& options, int nproc,
                                std::chrono::milliseconds timeout);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_ELASTIC_JOB_SETTINGS_H_
