// Command-line parsing for the `flashattn` subcommands.
//
// Each subcommand registers its options in one table (name, value kind, default, help); the same table
// parses argv and prints --help, so the help text cannot drift from what the code accepts. A bad option
// is reported as one line on stderr and the caller exits with kExitUsage.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "flashattn/attention.h"

namespace flashattn::cli {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;  // a check failed or a call returned an error
constexpr int kExitUsage = 2;    // bad command line

constexpr int kMaxThreads = 1 << 16;  // upper bound of every --threads option

class ArgParser {
 public:
  enum class Outcome {
    kRun,         // options parsed; run the command
    kHelpShown,   // --help was given and printed on stdout
    kUsageError,  // a one-line message was printed on stderr
  };
  // Applies the text of an option to its target; returns false and sets *error (e.g. "expects an
  // integer, got 'x'") when the text is not acceptable.
  using Apply = std::function<bool(const std::string& text, std::string* error)>;

  // `command` is e.g. "run" (messages read "flashattn run: ..."); `usage` is the synopsis line and
  // `description` the paragraph under it.
  ArgParser(std::string command, std::string usage, std::string description);

  // A switch without a value.
  void add_flag(const std::string& name, bool* target, const std::string& help);
  // An integer in [min_value, max_value]; the default shown is the target's value at registration.
  void add_int(const std::string& name, int64_t* target, const std::string& metavar, const std::string& help,
               int64_t min_value, int64_t max_value);
  void add_int(const std::string& name, int* target, const std::string& metavar, const std::string& help, int min_value,
               int max_value);
  // A finite real number >= min_value.
  void add_real(const std::string& name, double* target, const std::string& metavar, const std::string& help,
                double min_value);
  // Any text (a file name, a filter).
  void add_text(const std::string& name, std::string* target, const std::string& metavar, const std::string& help);
  // An option with its own parser and the default to show in --help.
  void add_custom(const std::string& name, const std::string& metavar, const std::string& help,
                  const std::string& default_text, Apply apply);

  // Parses argv[first..argc). Unknown options, missing values and bad values are usage errors.
  Outcome parse(int argc, char** argv, int first);
  // True when the option was given on the command line (as opposed to left at its default).
  bool given(const std::string& name) const { return given_.count(name) > 0; }
  std::string help_text() const;
  // Prints "flashattn <command>: <message> (see 'flashattn <command> --help')" on stderr.
  void usage_error(const std::string& message) const;

 private:
  struct Option {
    std::string name;  // without the leading "--"
    std::string metavar;
    std::string help;
    std::string default_text;
    bool takes_value = true;
    Apply apply;
  };
  const Option* find(const std::string& name) const;

  std::string command_, usage_, description_;
  std::vector<Option> options_;
  std::set<std::string> given_;
};

// Value parsers shared by the subcommands. Each returns false and sets *error on bad text.
bool parse_int64(const std::string& text, int64_t* value, std::string* error);
bool parse_real(const std::string& text, double* value, std::string* error);
// "bf16", "fp16", "fp32" (also "bfloat16", "float16", "float32").
bool parse_dtype(const std::string& text, DType* dtype, std::string* error);
// "L,R" with each side an integer >= -1 (-1: unbounded on that side).
bool parse_window(const std::string& text, int64_t* left, int64_t* right, std::string* error);
// A seed: an integer >= 0.
bool parse_seed(const std::string& text, uint64_t* seed, std::string* error);
// "fa2,fa1,standard": a comma-separated list of algorithm names (no "auto").
bool parse_algorithm_list(const std::string& text, std::vector<Algorithm>* algorithms, std::string* error);

}  // namespace flashattn::cli
