// The questionnaire over plain lines (stdin is not a terminal).
#include <algorithm>
#include <cctype>

#include "accelerate/common/errors.h"
#include "common/environment_text.h"
#include "config/prompter.h"

namespace accelerate::config {
namespace {

std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t\r") - first + 1);
}

bool same_text(const std::string& a, const std::string& b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](unsigned char x, unsigned char y) {
           return std::tolower(x) == std::tolower(y);
         });
}

class LinePrompter : public Prompter {
 public:
  LinePrompter(std::istream& in, std::ostream& out) : in_(in), out_(out) {}

  int choose(const std::string& question, const std::vector<std::string>& options,
             int default_index) override {
    out_ << question << "\n";
    for (std::size_t i = 0; i < options.size(); ++i)
      out_ << "  [" << i << "] " << options[i] << "\n";
    const std::string prompt = "Choose a number [" + std::to_string(default_index) + "]: ";
    for (;;) {
      const std::string answer = trim(read_line(prompt, question));
      if (answer.empty()) return default_index;
      // A number, or the option's own text (handy in scripts: "multi-GPU").
      if (auto index =
              detail::parse_integer_in(answer, 0, static_cast<long long>(options.size()) - 1)) {
        return static_cast<int>(*index);
      }
      for (std::size_t i = 0; i < options.size(); ++i) {
        if (same_text(answer, options[i])) return static_cast<int>(i);
      }
      say("Please enter a number from 0 to " + std::to_string(options.size() - 1) + ".");
    }
  }

  std::string ask(const std::string& prompt) override { return trim(read_line(prompt, prompt)); }

  void say(const std::string& line) override { out_ << line << "\n" << std::flush; }

 private:
  std::string read_line(const std::string& prompt, const std::string& question) {
    out_ << prompt << std::flush;
    std::string line;
    if (!std::getline(in_, line)) {
      out_ << "\n" << std::flush;
      throw ConfigError("stdin ended before this question was answered: " + trim(question));
    }
    // Echo what a script typed, so the transcript reads like a session.
    out_ << line << "\n";
    return line;
  }

  std::istream& in_;
  std::ostream& out_;
};

}  // namespace

std::unique_ptr<Prompter> make_line_prompter(std::istream& in, std::ostream& out) {
  return std::make_unique<LinePrompter>(in, out);
}

}  // namespace accelerate::config
