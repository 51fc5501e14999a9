// The questionnaire in a terminal: menus answered with the arrow keys (or a
// digit) and Enter, like Accelerate's. Raw mode is held only while a menu is
// on screen and is always given back: on return, on an exception, and on
// SIGINT/SIGTERM, so Ctrl-C never leaves the user's shell without echo.
#include <signal.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "accelerate/common/errors.h"
#include "config/prompter.h"

namespace accelerate::config {
namespace {

// A signal handler cannot reach an object, so the terminal state it must
// restore lives in this one file-local slot, set only while a menu is shown.
struct RawModeSlot {
  termios saved{};
  int in_fd = -1;
  int out_fd = -1;
  volatile sig_atomic_t active = 0;
};
RawModeSlot g_raw_mode;

constexpr char kShowCursor[] = "\x1b[?25h";
constexpr char kHideCursor[] = "\x1b[?25l";

void restore_and_reraise(int signal_number) {
  if (g_raw_mode.active) {
    tcsetattr(g_raw_mode.in_fd, TCSANOW, &g_raw_mode.saved);
    (void)!write(g_raw_mode.out_fd, kShowCursor, sizeof kShowCursor - 1);
    (void)!write(g_raw_mode.out_fd, "\n", 1);
    g_raw_mode.active = 0;
  }
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  sigaction(signal_number, &action, nullptr);
  raise(signal_number);
}

void write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

// Raw mode for one menu (no line buffering, no echo; Ctrl-C still signals).
class RawMode {
 public:
  RawMode(int in_fd, int out_fd) {
    if (tcgetattr(in_fd, &g_raw_mode.saved) != 0)
      throw ConfigError("cannot read the terminal settings");
    g_raw_mode.in_fd = in_fd;
    g_raw_mode.out_fd = out_fd;
    struct sigaction action {};
    action.sa_handler = restore_and_reraise;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
    termios raw = g_raw_mode.saved;
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    g_raw_mode.active = 1;
    tcsetattr(in_fd, TCSANOW, &raw);
    write_all(out_fd, kHideCursor);
  }
  ~RawMode() {
    tcsetattr(g_raw_mode.in_fd, TCSANOW, &g_raw_mode.saved);
    g_raw_mode.active = 0;
    write_all(g_raw_mode.out_fd, kShowCursor);
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  RawMode(const RawMode&) = delete;
  RawMode& operator=(const RawMode&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

enum class Key { kUp, kDown, kEnter, kDigit, kOther };

class TerminalPrompter : public Prompter {
 public:
  TerminalPrompter(int in_fd, int out_fd) : in_(in_fd), out_(out_fd) {}

  int choose(const std::string& question, const std::vector<std::string>& options,
             int default_index) override {
    write_all(out_, question + "\n" + "(use the arrow keys or a number, then Enter)\n");
    const int count = static_cast<int>(options.size());
    int selected = default_index;
    {
      RawMode raw(in_, out_);
      draw(options, selected, false);
      for (;;) {
        int digit = -1;
        Key key = read_key(digit);
        if (key == Key::kEnter) break;
        if (key == Key::kUp) selected = (selected + count - 1) % count;
        if (key == Key::kDown) selected = (selected + 1) % count;
        if (key == Key::kDigit && digit < count) selected = digit;
        draw(options, selected, true);
      }
      // Replace the hint and the menu with the answer.
      write_all(out_, "\x1b[" + std::to_string(count + 1) + "A\r\x1b[J");
    }
    write_all(out_, "  " + options[selected] + "\n");
    return selected;
  }

  std::string ask(const std::string& prompt) override {
    write_all(out_, prompt);
    std::string line;
    char c = 0;
    for (;;) {
      ssize_t n = ::read(in_, &c, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        throw ConfigError("the terminal closed before this question was answered: " + prompt);
      if (c == '\n') break;
      line += c;
    }
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) return "";
    return line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
  }

  void say(const std::string& line) override { write_all(out_, line + "\n"); }

 private:
  void draw(const std::vector<std::string>& options, int selected, bool redraw) {
    std::string text = redraw ? "\x1b[" + std::to_string(options.size()) + "A" : "";
    for (std::size_t i = 0; i < options.size(); ++i) {
      const bool on = static_cast<int>(i) == selected;
      text += "\r\x1b[2K" + std::string(on ? " > \x1b[1m" : "   ") + options[i] +
              (on ? "\x1b[0m" : "") + "\n";
    }
    write_all(out_, text);
  }

  int read_byte() {
    unsigned char c = 0;
    for (;;) {
      ssize_t n = ::read(in_, &c, 1);
      if (n == 1) return c;
      if (n < 0 && errno == EINTR) continue;
      throw ConfigError("the terminal closed before the menu was answered");
    }
  }

  Key read_key(int& digit) {
    int c = read_byte();
    if (c == '\r' || c == '\n') return Key::kEnter;
    if (c >= '0' && c <= '9') return digit = c - '0', Key::kDigit;
    if (c == 'k') return Key::kUp;
    if (c == 'j') return Key::kDown;
    if (c != 0x1b) return Key::kOther;
    // ESC [ A / ESC O A (application cursor mode) and the same for B.
    int next = read_byte();
    if (next != '[' && next != 'O') return Key::kOther;
    int final = read_byte();
    if (final == 'A') return Key::kUp;
    if (final == 'B') return Key::kDown;
    return Key::kOther;
  }

  int in_;
  int out_;
};

}  // namespace

std::unique_ptr<Prompter> make_terminal_prompter(int in_fd, int out_fd) {
  return std::make_unique<TerminalPrompter>(in_fd, out_fd);
}

}  // namespace accelerate::config
