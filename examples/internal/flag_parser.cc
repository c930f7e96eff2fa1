// FlagParser: see flag_parser.h.
#include "examples/internal/flag_parser.h"

#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "tensor/internal/check.h"

namespace tinyddp::examples {
namespace {

// --batch-size and --batch_size are the same flag.
std::string Canonical(std::string name) { return absl::StrReplaceAll(name, {{"-", "_"}}); }

std::string Quoted(const std::string& s) { return absl::StrCat("\"", s, "\""); }

absl::Status Bad(const std::string& name, const std::string& value, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, ": ", why));
}

std::string FormatIntList(const std::vector<int64_t>& values) { return absl::StrJoin(values, ","); }

}  // namespace

void FlagParser::Add(Flag flag) {
  TINYDDP_CHECK_OP(!flag.name.empty() && Find(flag.name) == nullptr, "FlagParser::Add", "flag --", flag.name,
                   " is empty or registered twice");
  flags_.push_back(std::move(flag));
}

FlagParser::Flag* FlagParser::Find(const std::string& name) {
  for (Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

bool FlagParser::WasSet(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return f.was_set;
  }
  return false;
}

void FlagParser::AddInt(const std::string& name, int64_t* value, std::string help) {
  Add({name, std::move(help), absl::StrCat(*value), false, nullptr, [name, value](const std::string& text) {
         if (!absl::SimpleAtoi(text, value)) return Bad(name, text, "expected an integer");
         return absl::OkStatus();
       }});
}

void FlagParser::AddDouble(const std::string& name, double* value, std::string help) {
  Add({name, std::move(help), absl::StrCat(*value), false, nullptr, [name, value](const std::string& text) {
         if (!absl::SimpleAtod(text, value) || !std::isfinite(*value)) {
           return Bad(name, text, "expected a finite number");
         }
         return absl::OkStatus();
       }});
}

void FlagParser::AddString(const std::string& name, std::string* value, std::string help) {
  Add({name, std::move(help), Quoted(*value), false, nullptr, [value](const std::string& text) {
         *value = text;
         return absl::OkStatus();
       }});
}

void FlagParser::AddBool(const std::string& name, bool* value, std::string help) {
  Add({name, std::move(help), *value ? "true" : "false", true, value, [name, value](const std::string& text) {
         const std::string t = absl::AsciiStrToLower(text);
         if (t == "true" || t == "1" || t == "yes") {
           *value = true;
         } else if (t == "false" || t == "0" || t == "no") {
           *value = false;
         } else {
           return Bad(name, text, "expected true or false");
         }
         return absl::OkStatus();
       }});
}

void FlagParser::AddChoice(const std::string& name, std::string* value, std::vector<std::string> choices,
                           std::string help) {
  help = absl::StrCat(help, " (", absl::StrJoin(choices, "|"), ")");
  Add({name, std::move(help), *value, false, nullptr, [name, value, choices](const std::string& text) {
         for (const std::string& c : choices) {
           if (text == c) {
             *value = text;
             return absl::OkStatus();
           }
         }
         return Bad(name, text, absl::StrCat("expected one of ", absl::StrJoin(choices, ", ")));
       }});
}

void FlagParser::AddIntList(const std::string& name, std::vector<int64_t>* value, std::string help) {
  Add({name, std::move(help), Quoted(FormatIntList(*value)), false, nullptr, [name, value](const std::string& text) {
         std::vector<int64_t> parsed;
         if (!text.empty()) {
           for (absl::string_view piece : absl::StrSplit(text, ',')) {
             int64_t v = 0;
             if (!absl::SimpleAtoi(piece, &v) || v <= 0) {
               return Bad(name, text,
                          absl::StrCat("expected comma-separated positive integers such as 512,512; \"", piece,
                                       "\" is not one"));
             }
             parsed.push_back(v);
           }
         }
         *value = std::move(parsed);
         return absl::OkStatus();
       }});
}

absl::Status FlagParser::Parse(const std::vector<std::string>& args, bool* help_requested) {
  *help_requested = false;
  for (Flag& f : flags_) f.was_set = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      if (i + 1 < args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("unexpected argument \"", args[i + 1], "\": this program takes flags only"));
      }
      break;
    }
    if (arg == "--help" || arg == "-help" || arg == "-h") {
      *help_requested = true;
      return absl::OkStatus();
    }
    if (arg.size() < 2 || arg[0] != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument \"", arg, "\": this program takes flags only (--name=value)"));
    }
    const std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
    const size_t eq = body.find('=');
    const std::string name = Canonical(body.substr(0, eq));
    Flag* flag = Find(name);
    // --noshuffle: the negative form of a boolean.
    if (flag == nullptr && eq == std::string::npos && absl::StartsWith(name, "no")) {
      Flag* positive = Find(name.substr(2));
      if (positive != nullptr && positive->is_bool) {
        *positive->bool_value = false;
        positive->was_set = true;
        continue;
      }
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (--help lists the flags)"));
    }
    std::string value;
    if (eq != std::string::npos) {
      value = body.substr(eq + 1);
    } else if (flag->is_bool) {
      value = "true";
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value (--", name, "=VALUE)"));
    }
    RETURN_IF_ERROR(flag->set(value));
    flag->was_set = true;
  }
  return absl::OkStatus();
}

std::string FlagParser::Usage() const {
  std::string out = absl::StrCat("usage: ", program_, " [flags]\n\nflags:\n");
  for (const Flag& f : flags_) {
    std::string left = absl::StrCat("  --", f.name);
    if (left.size() < 26) left.resize(26, ' ');
    absl::StrAppend(&out, left, " ", f.help, " [default: ", f.default_text, "]\n");
  }
  return out;
}

}  // namespace tinyddp::examples
