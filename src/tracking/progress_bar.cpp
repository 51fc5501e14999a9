#include "accelerate/tracking/progress_bar.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <string>

#include "accelerate/common/environment.h"
#include "accelerate/common/job_state.h"
#include "common/environment_text.h"
#include "common/settings.h"
#include "tracking/progress_format.h"

namespace accelerate {
namespace tracking {
namespace {

std::string printf_string(const char* format, double value, const std::string& unit) {
  char text[64];
  std::snprintf(text, sizeof(text), format, value, unit.c_str());
  return text;
}

}  // namespace

std::string format_duration(double secs) {
  const long long total = secs > 0 ? static_cast<long long>(secs) : 0;
  char text[32];
  if (total >= 3600) {
    std::snprintf(text, sizeof(text), "%lld:%02lld:%02lld", total / 3600, (total % 3600) / 60,
                  total % 60);
  } else {
    std::snprintf(text, sizeof(text), "%02lld:%02lld", total / 60, total % 60);
  }
  return text;
}

std::string format_postfix_value(const TrackerValue& value) {
  if (!value.is_double()) return value.to_string();
  char text[32];
  std::snprintf(text, sizeof(text), "%.4g", value.to_double());
  return text;
}

std::string format_progress(const ProgressSnapshot& s) {
  const bool have_rate = s.elapsed_secs > 0 && s.n > 0;
  const double rate = have_rate ? static_cast<double>(s.n) / s.elapsed_secs : 0;
  std::string rate_text = !have_rate  ? "?" + s.unit + "/s"
                          : rate >= 1 ? printf_string("%.2f%s/s", rate, s.unit)
                                      : printf_string("%.2fs/%s", 1 / rate, s.unit);
  for (const auto& [name, value] : s.postfix)
    rate_text += ", " + name + "=" + format_postfix_value(value);
  std::string left = s.desc.empty() ? "" : s.desc + ": ";
  const std::string elapsed = format_duration(s.elapsed_secs);
  if (!s.total || *s.total <= 0) {
    return left + std::to_string(s.n) + s.unit + " [" + elapsed + ", " + rate_text + "]";
  }
  const double fraction =
      std::min(1.0, std::max(0.0, static_cast<double>(s.n) / static_cast<double>(*s.total)));
  char percent[8];
  std::snprintf(percent, sizeof(percent), "%3d%%", static_cast<int>(fraction * 100));
  const std::string remaining =
      have_rate ? format_duration(std::max<double>(0, *s.total - s.n) / rate) : "?";
  left += std::string(percent) + "|";
  const std::string right = "| " + std::to_string(s.n) + "/" + std::to_string(*s.total) + " [" +
                            elapsed + "<" + remaining + ", " + rate_text + "]";
  const int bar_width = s.width - static_cast<int>(left.size() + right.size());
  std::string bar;
  if (bar_width > 0) {
    const int filled = static_cast<int>(fraction * bar_width);
    bar = std::string(filled, '#') + std::string(bar_width - filled, ' ');
  }
  return left + bar + right;
}

}  // namespace tracking

namespace {

// `tty_fd` >= 0: the terminal the bar is drawn on.
int terminal_width(const Environment& env, int tty_fd) {
  if (const auto columns = lookup(env, "COLUMNS")) {
    if (auto value = detail::parse_integer_in(*columns, 1, 100000)) return static_cast<int>(*value);
  }
  struct winsize size {};
  if (tty_fd >= 0 && ::ioctl(tty_fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) {
    return size.ws_col;
  }
  return 80;
}

// The launcher's terminal (ACCELERATE_PROGRESS_TTY) opened for writing, when
// it names one; -1 otherwise.
int open_progress_terminal(const Environment& env) {
  std::optional<std::string> path;
  try {
    path = settings::kProgressTty.read(env);
  } catch (const std::exception&) {
    return -1;  // a bar is never worth stopping the training for
  }
  if (!path) return -1;
  const int fd = ::open(path->c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
  if (fd >= 0 && ::isatty(fd) != 1) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

ProgressBar::ProgressBar(ProgressBarOptions options) : options_(std::move(options)) {
  const bool to_stderr = options_.stream() == nullptr;
  const Environment env = options_.environment() ? *options_.environment() : current_environment();
  const bool local_main = options_.local_main_process()
                              ? *options_.local_main_process()
                              : JobState::from_environment(env).is_local_main_process();
  const bool stderr_terminal = to_stderr && ::isatty(STDERR_FILENO) == 1;
  // Under accelerate launch stderr is a pipe: draw on the launcher's
  // terminal instead, when it has one (and only then: logs stay clean).
  if (to_stderr && !options_.terminal() && !stderr_terminal && local_main && !options_.disable())
    terminal_fd_ = open_progress_terminal(env);
  const bool terminal =
      options_.terminal() ? *options_.terminal() : (stderr_terminal || terminal_fd_ >= 0);
  shown_ = !options_.disable() && terminal && local_main;
  const int tty_fd = terminal_fd_ >= 0 ? terminal_fd_ : (stderr_terminal ? STDERR_FILENO : -1);
  width_ = options_.ncols() > 0 ? options_.ncols() : terminal_width(env, tty_fd);
  start_ = last_draw_ = std::chrono::steady_clock::now();
  if (shown_) draw();
}

ProgressBar::~ProgressBar() {
  close();
  if (terminal_fd_ >= 0) ::close(terminal_fd_);
}

void ProgressBar::update(std::int64_t n) {
  n_ += n;
  if (!shown_ || closed_) return;
  const auto now = std::chrono::steady_clock::now();
  const bool done = options_.total() && n_ >= *options_.total();
  if (done ||
      std::chrono::duration<double>(now - last_draw_).count() >= options_.min_interval_secs()) {
    draw();
  }
}

void ProgressBar::set_postfix(ProgressPostfix postfix) { postfix_ = std::move(postfix); }

void ProgressBar::set_description(std::string desc) { options_.desc(std::move(desc)); }

void ProgressBar::refresh() {
  if (shown_ && !closed_) draw();
}

void ProgressBar::clear() {
  if (shown_ && !closed_) emit("\r\033[K");
}

void ProgressBar::close() {
  if (closed_) return;
  closed_ = true;
  if (!shown_) return;
  draw();
  emit(options_.leave() ? std::string("\n") : "\r" + std::string(last_length_, ' ') + "\r");
}

void ProgressBar::draw() {
  last_draw_ = std::chrono::steady_clock::now();
  tracking::ProgressSnapshot snapshot;
  snapshot.desc = options_.desc();
  snapshot.unit = options_.unit();
  snapshot.n = n_;
  snapshot.total = options_.total();
  snapshot.elapsed_secs = std::chrono::duration<double>(last_draw_ - start_).count();
  snapshot.postfix = postfix_;
  // One column short of the width: writing the last column makes some
  // terminals wrap, which breaks the "\r" redraw.
  snapshot.width = std::max(1, width_ - 1);
  std::string line = tracking::format_progress(snapshot);
  if (static_cast<int>(line.size()) > snapshot.width) line.resize(snapshot.width);
  std::string text = "\r" + line;
  if (last_length_ > line.size()) text += std::string(last_length_ - line.size(), ' ');
  last_length_ = line.size();
  emit(text);
}

void ProgressBar::emit(const std::string& text) {
  if (options_.stream()) {
    options_.stream()->write(text.data(), static_cast<std::streamsize>(text.size()));
    options_.stream()->flush();
  } else if (terminal_fd_ >= 0) {
    for (std::size_t written = 0; written < text.size();) {
      const ssize_t n = ::write(terminal_fd_, text.data() + written, text.size() - written);
      if (n <= 0 && errno != EINTR) return;  // the terminal is gone: drop the bar
      if (n > 0) written += static_cast<std::size_t>(n);
    }
  } else {
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
  }
}

}  // namespace accelerate
