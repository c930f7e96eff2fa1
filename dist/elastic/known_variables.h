// Every TINYDDP_* environment variable in one list, and a warning for a name not on it: a misspelled one
// (TINYDDP_TIMOUT=20s) would otherwise be ignored without a word. `launch` and spawn.h warn as a job starts;
// docs/troubleshooting.md says what each variable does.
#ifndef TINYDDP_DIST_ELASTIC_KNOWN_VARIABLES_H_
#define TINYDDP_DIST_ELASTIC_KNOWN_VARIABLES_H_

#include <string>

#include "absl/strings/string_view.h"

namespace tinyddp::dist {

/// "" for a known name or one without the TINYDDP_ prefix; else e.g. "TINYDDP_TIMOUT is not a tinyddp
/// variable; did you mean TINYDDP_TIMEOUT?" (the closest known name, when one is close).
std::string UnknownVariableWarning(absl::string_view name);

/// One line on stderr, starting with `prefix`, for each unknown TINYDDP_ variable of this process.
void WarnAboutUnknownVariables(const char* prefix);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_ELASTIC_KNOWN_VARIABLES_H_
