// How the questionnaire talks to the user. In a terminal, menus are answered
// with the arrow keys (or a number) and Enter; anywhere else (a pipe, a file,
// a script) every answer is one typed line, so `accelerate config` can be
// driven by `printf '...' | accelerate config`.
#pragma once

#include <istream>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace accelerate::config {

class Prompter {
 public:
  virtual ~Prompter() = default;
  // Shows `question` and its options; returns the index chosen.
  virtual int choose(const std::string& question, const std::vector<std::string>& options,
                     int default_index) = 0;
  // Shows `prompt`; returns the line typed, without its newline ("" for Enter).
  virtual std::string ask(const std::string& prompt) = 0;
  // A line of information (a rejected answer, a summary).
  virtual void say(const std::string& line) = 0;
};

// Plain lines: a menu is listed as "[i] option" and answered with its number
// or its text. Throws ConfigError when `in` ends before an answer.
std::unique_ptr<Prompter> make_line_prompter(std::istream& in, std::ostream& out);

// Arrow-key menus on the terminal open as file descriptors `in_fd`/`out_fd`.
// The terminal is put in raw mode only while a menu is shown, and restored
// on return, on exceptions, and on SIGINT/SIGTERM (then the signal is
// re-raised, so Ctrl-C ends `accelerate config` as usual).
std::unique_ptr<Prompter> make_terminal_prompter(int in_fd, int out_fd);

}  // namespace accelerate::config
