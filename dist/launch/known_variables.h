// Every TINYDDP_* environment variable, in one list, and a warning for a name not on it: a misspelled
// variable (TINYDDP_TIMOUT=20s) would otherwise be ignored without a word. `launch` and spawn.h warn once,
// as a job starts. docs/troubleshooting.md ("Every TINYDDP_* variable") says what each one does; a new
// variable joins the list in known_variables.cc.
#ifndef TINYDDP_DIST_LAUNCH_KNOWN_VARIABLES_H_
#define TINYDDP_DIST_LAUNCH_KNOWN_VARIABLES_H_

#include <string>

#include "absl/strings/string_view.h"

namespace tinyddp::dist {

/// "" for a known variable or a name without the TINYDDP_ prefix; else e.g. "TINYDDP_TIMOUT is not a
/// tinyddp variable; did you mean TINYDDP_TIMEOUT?" (the closest known name, when one is close).
std::string UnknownVariableWarning(absl::string_view name);

/// Prints UnknownVariableWarning on stderr for each variable of this process's environment, each line
/// starting with `prefix` ("launch: ").
void WarnAboutUnknownVariables(const char* prefix);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_LAUNCH_KNOWN_VARIABLES_H_
