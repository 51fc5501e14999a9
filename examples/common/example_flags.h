// The examples' command line, one parser for all: a program declares each
// flag once (its name, the variable it sets, whose value is the default, and
// a help text) and gets `--name value` and `--name=value`, switches, --help
// built from the declarations, and one-line errors.
//
//   mnist::Args args;                     // its members hold the defaults
//   examples::Flags flags("Trains BasicNet on MNIST.");
//   flags.add("epochs", &args.epochs, "epochs to train");
//   flags.add("with_tracking", &args.with_tracking, "log metrics");  // bool: a switch
//   flags.parse(argc, argv);
//
// A value follows its flag as the next word (one starting with "--" is not a
// value) or after "=". A switch is `--name`, `--name=true|false` or
// `--name true|false`. A flag given twice keeps the last value: scripts put
// their overrides last. `--help` or `-h` prints the usage to stdout and exits
// 0; an unknown flag, a missing or malformed value or a stray word prints one
// line, "PROGRAM: error: ...; 'PROGRAM --help' lists the flags", to stderr
// and exits 2. Header-only and std-only: the plain LibTorch example links no
// accelerate.
#pragma once

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace examples {

// A word of the command line the flags do not accept; what() is the message
// without the program's name.
class FlagError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input beyond the flags' spelling: a file or folder a flag names that
// is missing or cannot be used as it says. The examples report it as a bad
// flag is reported: one line, exit code 2 (other failures exit with 1).
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The program's name as its usage and errors show it: argv[0]'s last part.
inline std::string program_name(const char* argv0) {
  const std::string path = argv0 != nullptr ? argv0 : "";
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

class Flags {
 public:
  // `about`: what the program does, printed under the usage line.
  explicit Flags(std::string about = "") : about_(std::move(about)) {}

  // Declares --name, which sets *target; *target's value now is the default.
  // T: bool (a switch), an integer type, double or std::string. `metavar`
  // names the value in the usage (default: INT, FLOAT or TEXT).
  template <class T>
  Flags& add(const std::string& name, T* target, const std::string& help,
             const std::string& metavar = "") {
    Flag flag;
    flag.name = name;
    flag.help = help;
    if constexpr (std::is_same_v<T, bool>) {
      flag.is_switch = true;
      flag.default_text = *target ? "true" : "";
      flag.set = [target](const std::string& value) {
        if (value != "true" && value != "false") return false;
        *target = value == "true";
        return true;
      };
      flag.expected = "true or false";
    } else if constexpr (std::is_integral_v<T>) {
      flag.metavar = metavar.empty() ? "INT" : metavar;
      flag.default_text = std::to_string(*target);
      flag.set = [target](const std::string& value) { return parse_integer(value, *target); };
      flag.expected = std::is_signed_v<T> ? "an integer" : "a non-negative integer";
    } else if constexpr (std::is_floating_point_v<T>) {
      flag.metavar = metavar.empty() ? "FLOAT" : metavar;
      std::ostringstream text;
      text << *target;
      flag.default_text = text.str();
      flag.set = [target](const std::string& value) { return parse_number(value, *target); };
      flag.expected = "a number";
    } else {
      static_assert(std::is_same_v<T, std::string>,
                    "a flag is a bool, an integer, a double or a string");
      flag.metavar = metavar.empty() ? "TEXT" : metavar;
      flag.default_text = *target;
      flag.set = [target](const std::string& value) {
        *target = value;
        return true;
      };
    }
    return declare(std::move(flag));
  }

  // Declares --name, which sets *target to one of `choices`.
  Flags& add_choice(const std::string& name, std::string* target,
                    const std::vector<std::string>& choices, const std::string& help) {
    Flag flag;
    flag.name = name;
    flag.help = help;
    flag.default_text = *target;
    for (const auto& choice : choices) {
      flag.metavar += (flag.metavar.empty() ? "" : "|") + choice;
      flag.expected += (flag.expected.empty()      ? ""
                        : choice == choices.back() ? " or "
                                                   : ", ") +
                       choice;
    }
    flag.set = [target, choices](const std::string& value) {
      if (std::find(choices.begin(), choices.end(), value) == choices.end()) return false;
      *target = value;
      return true;
    };
    return declare(std::move(flag));
  }

  // Sets the declared variables from `words` (the arguments after the
  // program's name). Returns false, having set nothing more, at --help or -h.
  // Throws FlagError at the first word it cannot take.
  bool try_parse(const std::vector<std::string>& words) {
    for (size_t i = 0; i < words.size(); ++i) {
      const std::string& word = words[i];
      if (word == "--help" || word == "-h") return false;
      if (word.rfind("--", 0) != 0 || word.size() == 2) {
        if (word.size() > 1 && word[0] == '-' && word != "--")
          throw FlagError("unknown flag " + word);
        throw FlagError("unexpected argument '" + word + "'");
      }
      const auto equals = word.find('=');
      const std::string name =
          word.substr(2, equals == std::string::npos ? std::string::npos : equals - 2);
      const Flag* flag = find(name);
      if (flag == nullptr) throw FlagError("unknown flag --" + name + suggestion(name));
      std::string value;
      if (equals != std::string::npos) {
        value = word.substr(equals + 1);
      } else if (flag->is_switch) {
        const bool explicit_value =
            i + 1 < words.size() && (words[i + 1] == "true" || words[i + 1] == "false");
        value = explicit_value ? words[++i] : "true";
      } else if (i + 1 < words.size() && words[i + 1].rfind("--", 0) != 0) {
        value = words[++i];
      } else {
        throw FlagError("--" + name + " needs a value (" + flag->metavar + ")");
      }
      if (!flag->set(value)) {
        throw FlagError("--" + name + " expects " + flag->expected + ", got '" + value + "'");
      }
    }
    return true;
  }

  // try_parse(argv[1..]), the program named by argv[0]: at --help prints the
  // usage and exits 0; at an error prints one line and exits 2.
  void parse(int argc, char** argv) {
    parse(program_name(argc > 0 ? argv[0] : nullptr),
          std::vector<std::string>(argv + std::min(argc, 1), argv + argc));
  }
  // The same for a program (or "program command") and its words.
  void parse(const std::string& program, const std::vector<std::string>& words) {
    program_ = program;
    bool go_on = false;
    try {
      go_on = try_parse(words);
    } catch (const FlagError& error) {
      fail(error.what());
    }
    if (!go_on) {
      std::cout << usage() << std::flush;
      std::exit(0);
    }
  }

  // A usage error found after parsing (a value the flag's type allows but
  // the program does not): one line on stderr, exit code 2.
  [[noreturn]] void fail(const std::string& message) const {
    std::cerr << program_ << ": error: " << message << "; '" << program_
              << " --help' lists the flags" << std::endl;
    std::exit(2);
  }

  // Data a flag points at must be there: each of `names` in the folder
  // `path`, or the file `path` itself when `names` is empty. Else fail()
  // with a line naming the flag, the path and `remedy` (how to get the
  // default data: the defaults are relative to the folder the program runs
  // in).
  void require_data(const std::string& flag, const std::string& path,
                    std::initializer_list<const char*> names, const std::string& remedy) const {
    if (names.size() == 0 && !std::ifstream(path)) {
      fail(flag + " " + path + " cannot be read (" + remedy + ")");
    }
    for (const char* name : names) {
      if (!std::ifstream(path + "/" + name)) {
        fail(flag + " " + path + " has no " + name + " (" + remedy + ")");
      }
    }
  }

  // "usage: PROGRAM [--name VALUE]... [-h]", the about text, then one line
  // per flag with its help and default.
  std::string usage() const {
    std::string out = "usage: " + program_;
    for (const auto& flag : flags_) out += " [" + flag.synopsis() + "]";
    out += " [-h]\n";
    if (!about_.empty()) out += "\n" + about_ + "\n";
    out += "\nflags:\n";
    size_t width = 10;  // "-h, --help"
    for (const auto& flag : flags_) width = std::max(width, flag.synopsis().size());
    width = std::min<size_t>(width, 34);
    const auto row = [&](const std::string& left, const std::string& right) {
      out += "  " + left;
      if (left.size() > width)
        out += "\n  " + std::string(width, ' ');
      else
        out += std::string(width - left.size(), ' ');
      out += "  " + right + "\n";
    };
    for (const auto& flag : flags_) {
      std::string help = flag.help;
      if (!flag.default_text.empty()) help += " (default: " + flag.default_text + ")";
      row(flag.synopsis(), help);
    }
    row("-h, --help", "print this help and exit");
    return out;
  }

 private:
  struct Flag {
    std::string name, help, metavar, default_text;
    std::string expected;  // "an integer", ...
    bool is_switch = false;
    std::function<bool(const std::string&)> set;  // false: not a value of this flag
    std::string synopsis() const { return "--" + name + (is_switch ? "" : " " + metavar); }
  };

  Flags& declare(Flag flag) {
    if (flag.name.empty() || flag.name == "help" || find(flag.name) != nullptr) {
      throw std::logic_error("flag --" + flag.name + " declared twice");
    }
    flags_.push_back(std::move(flag));
    return *this;
  }
  const Flag* find(const std::string& name) const {
    for (const auto& flag : flags_) {
      if (flag.name == name) return &flag;
    }
    return nullptr;
  }

  template <class T>
  static bool parse_integer(const std::string& value, T& target) {
    if (value.empty() || !(value[0] == '-' || value[0] == '+' ||
                           std::isdigit(static_cast<unsigned char>(value[0])))) {
      return false;
    }
    char* end = nullptr;
    errno = 0;
    if constexpr (std::is_signed_v<T>) {
      const long long parsed = std::strtoll(value.c_str(), &end, 10);
      if (errno != 0 || *end != '\0' ||
          parsed < static_cast<long long>(std::numeric_limits<T>::min()) ||
          parsed > static_cast<long long>(std::numeric_limits<T>::max())) {
        return false;
      }
      target = static_cast<T>(parsed);
    } else {
      if (value[0] == '-') return false;
      const unsigned long long parsed = std::strtoull(value.c_str(), &end, 10);
      if (errno != 0 || *end != '\0' ||
          parsed > static_cast<unsigned long long>(std::numeric_limits<T>::max())) {
        return false;
      }
      target = static_cast<T>(parsed);
    }
    return true;
  }

  static bool parse_number(const std::string& value, double& target) {
    if (value.empty() || std::isspace(static_cast<unsigned char>(value[0]))) return false;
    char* end = nullptr;
    errno = 0;
    const double parsed = std::strtod(value.c_str(), &end);
    if (errno != 0 || *end != '\0' || !std::isfinite(parsed)) return false;
    target = parsed;
    return true;
  }

  // " (did you mean --NAME?)" for the nearest declared flag within a third
  // of the longer name's edits, else "".
  std::string suggestion(const std::string& name) const {
    const Flag* best = nullptr;
    size_t best_distance = std::numeric_limits<size_t>::max();
    for (const auto& flag : flags_) {
      const size_t distance = edit_distance(name, flag.name);
      if (distance < best_distance) {
        best = &flag;
        best_distance = distance;
      }
    }
    if (best == nullptr || best_distance * 3 > std::max(name.size(), best->name.size())) return "";
    return " (did you mean --" + best->name + "?)";
  }
  // Edits (insert, delete, replace, swap two neighbours) from a to b.
  static size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
    for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      for (size_t j = 1; j <= b.size(); ++j) {
        d[i][j] = std::min(
            {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
        if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
          d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
      }
    }
    return d[a.size()][b.size()];
  }

  std::string about_;
  std::string program_ = "program";
  std::vector<Flag> flags_;
};

}  // namespace examples
