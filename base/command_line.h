// A program's command line read into its Abseil flags, with errors a user can act on. Used by the
// examples (ddp_mlp, the demos), the benchmarks and the launcher (dist/launch).
//
// The flags are plain Abseil flags: ABSL_FLAG(int64_t, epochs, 4, "passes over the training set")
// defines one, absl::GetFlag(FLAGS_epochs) reads it, and Abseil parses every value and keeps the
// defaults and the help text. Only the walk over argv is here, because absl::ParseCommandLine does
// three things our programs must not: on a mistake it prints its own message and exits with status 1
// (ours return an InvalidArgument naming the flag and why; main prints it and exits 2); its --help
// lists every linked library's flags, sorted by file (ours show the program's flags in groups,
// FlagsHelp); and it refuses --nproc-per-node for --nproc_per_node, which torchrun's users type.
//
// Spellings, as Abseil and gflags accept them: --name=value, --name value, -name=value; booleans also
// --name, --noname and --name=true|false (or yes|no, 1|0). Dashes in a name read as underscores.
// `--` ends the flags.
#ifndef TINYDDP_BASE_COMMAND_LINE_H_
#define TINYDDP_BASE_COMMAND_LINE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tinyddp {

/// Some of a program's flags under a title, as --help shows them ("model and optimisation").
struct FlagGroup {
  std::string title;
  std::vector<std::string> names;  // of flags defined with ABSL_FLAG, in the order --help lists them
};

struct CommandLine {
  bool help = false;  // --help, -help or -h was given; parsing stopped there
  /// The first argument that is not a flag (or the first after `--`) and everything after it, untouched:
  /// a launcher's PROGRAM and its arguments. Empty for most programs, which take none.
  std::vector<std::string> rest;
};

/// Sets the flags that `args` (argv without argv[0]) name; every one must be among `flags`' names (a
/// flag that another linked library defines is unknown here). Every flag of `flags` starts from its
/// default, so the result depends on `args` alone. Stops at --help, at `--`, or at the first argument
/// that is not a flag. InvalidArgument, naming the flag and why, for an unknown flag, a missing
/// value or a value Abseil cannot parse ("--epochs=abc: expected an integer"); flags set before the
/// error keep their new values. Precondition: every name in `flags` is a defined Abseil flag.
absl::StatusOr<CommandLine> ParseCommandLineFlags(const std::vector<std::string>& args,
                                                  absl::Span<const FlagGroup> flags);

/// The --help listing of `flags`: each group's title, then one entry per flag with its help text and
/// default, wrapped at 110 columns ("  --epochs               passes over the training set [default: 4]").
std::string FlagsHelp(absl::Span<const FlagGroup> flags);

}  // namespace tinyddp

#endif  // TINYDDP_BASE_COMMAND_LINE_H_
