// The walk over argv that sets Abseil flags (base/command_line.h).
#include "base/command_line.h"

#include <algorithm>
#include <cstdint>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"

namespace tinyddp {
namespace {

// The flag called `name` if `flags` lists it; null otherwise.
absl::CommandLineFlag* Find(absl::Span<const FlagGroup> flags, const std::string& name) {
  for (const FlagGroup& group : flags) {
    for (const std::string& listed : group.names) {
      if (listed == name) return absl::FindCommandLineFlag(name);
    }
  }
  return nullptr;
}

// What a value of this flag's type looks like, for the error message. Abseil's own message says only
// "Illegal value"; a custom flag type adds its reason after a "; ".
std::string Why(const absl::CommandLineFlag& flag, const std::string& abseil_error) {
  if (flag.IsOfType<bool>()) return "expected true or false";
  if (flag.IsOfType<int32_t>() || flag.IsOfType<int64_t>()) return "expected an integer";
  if (flag.IsOfType<double>() || flag.IsOfType<float>()) return "expected a number";
  const size_t reason = abseil_error.find("; ");
  return reason == std::string::npos ? abseil_error : abseil_error.substr(reason + 2);
}

absl::Status SetFlag(absl::CommandLineFlag& flag, const std::string& value) {
  std::string error;
  if (flag.ParseFrom(value, &error)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--", flag.Name(), "=", value, ": ", Why(flag, error)));
}

}  // namespace

absl::StatusOr<CommandLine> ParseCommandLineFlags(const std::vector<std::string>& args,
                                                  absl::Span<const FlagGroup> flags) {
  for (const FlagGroup& group : flags) {
    for (const std::string& name : group.names) {
      absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
      if (flag != nullptr) RETURN_IF_ERROR(SetFlag(*flag, flag->DefaultValue()));
    }
  }
  CommandLine result;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // not a flag: the rest belongs to the program
    if (arg == "--help" || arg == "-help" || arg == "-h") {
      result.help = true;
      return result;
    }
    // "--batch-size=64" -> name "batch_size", value "64".
    const std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
    const size_t eq = body.find('=');
    const std::string name = absl::StrReplaceAll(body.substr(0, eq), {{"-", "_"}});
    absl::CommandLineFlag* flag = Find(flags, name);
    if (flag == nullptr && eq == std::string::npos && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* positive = Find(flags, name.substr(2));  // --noshuffle
      if (positive != nullptr && positive->IsOfType<bool>()) {
        RETURN_IF_ERROR(SetFlag(*positive, "false"));
        continue;
      }
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    std::string value;
    if (eq != std::string::npos) {
      value = body.substr(eq + 1);
    } else if (flag->IsOfType<bool>()) {
      value = "true";
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value (--", name, "=VALUE)"));
    }
    RETURN_IF_ERROR(SetFlag(*flag, value));
  }
  result.rest.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return result;
}

std::string FlagsHelp(absl::Span<const FlagGroup> flags) {
  constexpr size_t kNameWidth = 26, kWidth = 110;  // text wraps to stay within kWidth columns
  std::string out;
  for (const FlagGroup& group : flags) {
    absl::StrAppend(&out, out.empty() ? "" : "\n", group.title, ":\n");
    for (const std::string& name : group.names) {
      const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
      std::string default_value = flag == nullptr ? "?" : flag->DefaultValue();
      if (flag != nullptr && flag->IsOfType<std::string>()) default_value = absl::StrCat("\"", default_value, "\"");
      const std::string text = absl::StrCat(flag == nullptr ? "(not defined)" : flag->Help(), " [default: ",
                                            default_value, "]");
      std::string line = absl::StrCat("  --", name);
      line.resize(std::max(line.size() + 1, kNameWidth + 1), ' ');
      for (absl::string_view word : absl::StrSplit(text, ' ')) {
        if (line.size() + word.size() > kWidth && line.size() > kNameWidth + 1) {
          absl::StrAppend(&out, line.substr(0, line.size() - 1), "\n");
          line = std::string(kNameWidth + 1, ' ');
        }
        absl::StrAppend(&line, word, " ");
      }
      absl::StrAppend(&out, line.substr(0, line.size() - 1), "\n");
    }
  }
  return out;
}

}  // namespace tinyddp
