// Option tables, argv parsing and --help text for the subcommands.
#include "cli_args.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace flashattn::cli {
namespace {

constexpr size_t kHelpColumn = 28;  // options' help text starts in this column

std::string format_real(double value) {
  std::ostringstream s;
  s << value;
  return s.str();
}

}  // namespace

bool parse_int64(const std::string& text, int64_t* value, std::string* error) {
  if (text.empty()) {
    *error = "expects an integer, got an empty value";
    return false;
  }
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (*end != '\0') {
    *error = "expects an integer, got '" + text + "'";
    return false;
  }
  if (errno == ERANGE) {
    *error = "value '" + text + "' is out of range";
    return false;
  }
  *value = int64_t(v);
  return true;
}

bool parse_real(const std::string& text, double* value, std::string* error) {
  errno = 0;
  char* end = nullptr;
  double v = text.empty() ? 0.0 : std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v) || errno == ERANGE) {
    *error = "expects a finite number, got '" + text + "'";
    return false;
  }
  *value = v;
  return true;
}

bool parse_dtype(const std::string& text, DType* dtype, std::string* error) {
  if (text == "bf16" || text == "bfloat16") {
    *dtype = DType::kBFloat16;
  } else if (text == "fp16" || text == "float16") {
    *dtype = DType::kFloat16;
  } else if (text == "fp32" || text == "float32") {
    *dtype = DType::kFloat32;
  } else {
    *error = "expects bf16, fp16 or fp32, got '" + text + "'";
    return false;
  }
  return true;
}

bool parse_window(const std::string& text, int64_t* left, int64_t* right, std::string* error) {
  const size_t comma = text.find(',');
  if (comma == std::string::npos) {
    *error = "expects L,R (e.g. 128,0; -1 = unbounded), got '" + text + "'";
    return false;
  }
  std::string side_error;
  if (!parse_int64(text.substr(0, comma), left, &side_error) ||
      !parse_int64(text.substr(comma + 1), right, &side_error)) {
    *error = "expects L,R with integers (e.g. 128,0), got '" + text + "'";
    return false;
  }
  if (*left < -1 || *right < -1) {
    *error = "window sides must be >= -1 (-1 = unbounded), got '" + text + "'";
    return false;
  }
  return true;
}

bool parse_seed(const std::string& text, uint64_t* seed, std::string* error) {
  int64_t v = 0;
  if (!parse_int64(text, &v, error)) return false;
  if (v < 0) {
    *error = "must be >= 0, got " + text;
    return false;
  }
  *seed = uint64_t(v);
  return true;
}

bool parse_algorithm_list(const std::string& text, std::vector<Algorithm>* algorithms, std::string* error) {
  algorithms->clear();
  std::stringstream s(text);
  std::string name;
  while (std::getline(s, name, ',')) {
    Algorithm a;
    if (!parse_algorithm(name, &a) || a == Algorithm::kAuto) {
      *error = "expects a comma-separated list of standard, fa1, fa2, fa3; got '" + name + "'";
      return false;
    }
    algorithms->push_back(a);
  }
  if (algorithms->empty()) {
    *error = "expects at least one algorithm";
    return false;
  }
  return true;
}

ArgParser::ArgParser(std::string command, std::string usage, std::string description)
    : command_(std::move(command)), usage_(std::move(usage)), description_(std::move(description)) {}

void ArgParser::add_flag(const std::string& name, bool* target, const std::string& help) {
  Option o;
  o.name = name;
  o.help = help;
  o.takes_value = false;
  o.apply = [target](const std::string&, std::string*) {
    *target = true;
    return true;
  };
  options_.push_back(std::move(o));
}

namespace {

// An integer option bounded to [min_value, max_value], stored in *target (int or int64_t).
template <typename Int>
ArgParser::Apply bounded_int(Int* target, int64_t min_value, int64_t max_value) {
  return [target, min_value, max_value](const std::string& text, std::string* error) {
    int64_t v = 0;
    if (!parse_int64(text, &v, error)) return false;
    if (v < min_value || v > max_value) {
      *error = "must be in [" + std::to_string(min_value) + ", " + std::to_string(max_value) + "], got " + text;
      return false;
    }
    *target = Int(v);
    return true;
  };
}

}  // namespace

void ArgParser::add_int(const std::string& name, int64_t* target, const std::string& metavar, const std::string& help,
                        int64_t min_value, int64_t max_value) {
  add_custom(name, metavar, help, std::to_string(*target), bounded_int(target, min_value, max_value));
}

void ArgParser::add_int(const std::string& name, int* target, const std::string& metavar, const std::string& help,
                        int min_value, int max_value) {
  add_custom(name, metavar, help, std::to_string(*target), bounded_int(target, min_value, max_value));
}

void ArgParser::add_real(const std::string& name, double* target, const std::string& metavar, const std::string& help,
                         double min_value) {
  add_custom(name, metavar, help, format_real(*target),
             [target, min_value](const std::string& text, std::string* error) {
               double v = 0;
               if (!parse_real(text, &v, error)) return false;
               if (v < min_value) {
                 *error = "must be >= " + format_real(min_value) + ", got " + text;
                 return false;
               }
               *target = v;
               return true;
             });
}

void ArgParser::add_text(const std::string& name, std::string* target, const std::string& metavar,
                         const std::string& help) {
  add_custom(name, metavar, help, *target, [target](const std::string& text, std::string*) {
    *target = text;
    return true;
  });
}

void ArgParser::add_custom(const std::string& name, const std::string& metavar, const std::string& help,
                           const std::string& default_text, Apply apply) {
  Option o;
  o.name = name;
  o.metavar = metavar;
  o.help = help;
  o.default_text = default_text;
  o.apply = std::move(apply);
  options_.push_back(std::move(o));
}

const ArgParser::Option* ArgParser::find(const std::string& name) const {
  for (const Option& o : options_)
    if (o.name == name) return &o;
  return nullptr;
}

void ArgParser::usage_error(const std::string& message) const {
  std::fprintf(stderr, "flashattn %s: %s (see 'flashattn %s --help')\n", command_.c_str(), message.c_str(),
               command_.c_str());
}

ArgParser::Outcome ArgParser::parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(help_text().c_str(), stdout);
      return Outcome::kHelpShown;
    }
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      usage_error("unexpected argument '" + arg + "'");
      return Outcome::kUsageError;
    }
    std::string name = arg.substr(2);
    std::string value;
    bool inline_value = false;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    const Option* o = find(name);
    if (o == nullptr) {
      usage_error("unknown option '--" + name + "'");
      return Outcome::kUsageError;
    }
    if (!o->takes_value && inline_value) {
      usage_error("--" + name + " takes no value");
      return Outcome::kUsageError;
    }
    if (o->takes_value && !inline_value) {
      // The next word is the value even when it starts with '-': "--window -1,0" must work.
      if (i + 1 >= argc) {
        usage_error("--" + name + " needs a value (" + o->metavar + ")");
        return Outcome::kUsageError;
      }
      value = argv[++i];
    }
    std::string error;
    if (!o->apply(value, &error)) {
      usage_error("--" + name + " " + error);
      return Outcome::kUsageError;
    }
    given_.insert(name);
  }
  return Outcome::kRun;
}

std::string ArgParser::help_text() const {
  std::string text = "usage: " + usage_ + "\n\n" + description_ + "\n\noptions:\n";
  std::vector<Option> all = options_;
  Option help;
  help.name = "help";
  help.help = "show this help and exit";
  help.takes_value = false;
  all.push_back(help);
  for (const Option& o : all) {
    std::string left = "  --" + o.name + (o.takes_value ? " " + o.metavar : "");
    if (left.size() + 2 > kHelpColumn) {
      text += left + "\n" + std::string(kHelpColumn, ' ');
    } else {
      text += left + std::string(kHelpColumn - left.size(), ' ');
    }
    // Continuation lines of a multi-line help text line up under the first.
    for (char c : o.help) text += c == '\n' ? "\n" + std::string(kHelpColumn, ' ') : std::string(1, c);
    if (o.takes_value && !o.default_text.empty()) text += " [default: " + o.default_text + "]";
    text += "\n";
  }
  return text;
}

}  // namespace flashattn::cli
