// FlagParser: a small, strict command-line parser for the examples. Each flag is bound to a variable
// that already holds its default; Parse() overwrites the ones given and reports the first problem as an
// InvalidArgument that names the flag and says why ("--epochs=abc: expected an integer").
//
// Accepted forms, as gflags/absl flags accept them:  --name=value   --name value   -name=value
// Booleans also take --name (true) and --noname (false), or --name=true|false|1|0|yes|no.
// Dashes and underscores in names are the same (--batch-size is --batch_size). `--` ends the flags;
// positional arguments are refused (the examples take none). Sits under examples/internal/train_options.h.
#ifndef TINYDDP_EXAMPLES_INTERNAL_FLAG_PARSER_H_
#define TINYDDP_EXAMPLES_INTERNAL_FLAG_PARSER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tinyddp::examples {

class FlagParser {
 public:
  /// `program` names the binary in the usage text.
  explicit FlagParser(std::string program) : program_(std::move(program)) {}

  /// Binds --name to *value. Preconditions: `name` is new, uses [a-z0-9_] only, and `value` outlives
  /// the parser. The current *value is the default shown in Usage().
  void AddInt(const std::string& name, int64_t* value, std::string help);
  void AddDouble(const std::string& name, double* value, std::string help);
  void AddString(const std::string& name, std::string* value, std::string help);
  void AddBool(const std::string& name, bool* value, std::string help);
  /// A string restricted to `choices` (--optimizer=sgd|adamw).
  void AddChoice(const std::string& name, std::string* value, std::vector<std::string> choices, std::string help);
  /// A comma-separated list of positive integers ("512,512"); "" is the empty list.
  void AddIntList(const std::string& name, std::vector<int64_t>* value, std::string help);

  /// Parses args (argv without argv[0]). Sets *help_requested on --help/-h and stops there.
  /// InvalidArgument, naming the flag and the reason, for an unknown flag, a missing or malformed
  /// value, or a positional argument; variables parsed before the error keep their new values.
  absl::Status Parse(const std::vector<std::string>& args, bool* help_requested);

  /// "usage: <program> [flags]" and one line per flag, with its default, in registration order.
  std::string Usage() const;

  /// Whether --name appeared in the last Parse() (to tell an explicit value from the default).
  bool WasSet(const std::string& name) const;

 private:
  struct Flag {
    std::string name;
    std::string help;
    std::string default_text;
    bool is_bool = false;
    bool* bool_value = nullptr;                           // set for booleans (for --noname)
    std::function<absl::Status(const std::string&)> set;  // parses and stores; error says why
    bool was_set = false;
  };
  void Add(Flag flag);
  Flag* Find(const std::string& name);

  std::string program_;
  std::vector<Flag> flags_;
};

}  // namespace tinyddp::examples

#endif  // TINYDDP_EXAMPLES_INTERNAL_FLAG_PARSER_H_
