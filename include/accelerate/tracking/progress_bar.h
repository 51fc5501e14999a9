// ProgressBar: a tqdm-style bar for training loops, drawn on the local main
// process only and only when its output is a terminal (so log files and CI
// output stay clean). Under accelerate launch, whose pipe is the process's
// stderr, it is drawn on the launcher's terminal when the launcher has one
// (ACCELERATE_PROGRESS_TTY, docs/launching.md).
//
//   accelerate::ProgressBar bar(accelerate::ProgressBarOptions()
//                                   .total(loader.size()).desc("epoch 1"));
//   for (auto& batch : loader) {
//     ...
//     bar.update();
//     bar.set_postfix({{"loss", loss.item<double>()}});
//   }
//   bar.close();   // or let it go out of scope
//
// or, wrapping any range (the total comes from known_size() or size()):
//
//   for (auto& batch : accelerate::progress(loader, ProgressBarOptions().desc("epoch 1"))) ...
//
//   epoch 1:  45%|#########           | 450/1000 [00:12<00:15, 36.21it/s, loss=0.1234]
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "accelerate/common/arg.h"
#include "accelerate/common/environment.h"
#include "accelerate/tracking/tracker_value.h"

namespace accelerate {

// Where a bar is drawn (a named type so ACCELERATE_ARG's const T& works).
using ProgressStream = std::ostream*;

struct ProgressBarOptions {
  // Number of iterations expected; unset: a counter without bar or ETA.
  ACCELERATE_ARG(std::optional<std::int64_t>, total);
  // Text before the bar ("epoch 1").
  ACCELERATE_ARG(std::string, desc);
  // What is counted ("it", "batch", "samples").
  ACCELERATE_ARG(std::string, unit) = "it";
  // Never draw.
  ACCELERATE_ARG(bool, disable) = false;
  // Whether this is the local main process. Unset: from the environment
  // (LOCAL_RANK and the other launchers' variables, see job_state.h).
  ACCELERATE_ARG(std::optional<bool>, local_main_process);
  // Whether the output is a terminal. Unset: isatty(stderr) when writing to
  // stderr, false for any other stream.
  ACCELERATE_ARG(std::optional<bool>, terminal);
  // Where to draw; nullptr: stderr.
  ACCELERATE_ARG(ProgressStream, stream) = nullptr;
  // Line width; 0: the terminal's width (COLUMNS, else the tty), else 80.
  ACCELERATE_ARG(int, ncols) = 0;
  // Redraw at most this often, so drawing never slows a fast loop.
  ACCELERATE_ARG(double, min_interval_secs) = 0.1;
  // Keep the final bar on screen after close() (false: erase it).
  ACCELERATE_ARG(bool, leave) = true;
  // The environment read for the defaults above (LOCAL_RANK, COLUMNS);
  // unset: the process's (tests pass a map).
  ACCELERATE_ARG(std::optional<Environment>, environment);
};

// Postfix values in display order: {{"loss", 0.25}, {"lr", 1e-3}}.
using ProgressPostfix = std::vector<std::pair<std::string, TrackerValue>>;

class ProgressBar {
 public:
  explicit ProgressBar(ProgressBarOptions options = {});
  ~ProgressBar();  // close()
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Counts `n` more iterations; redraws when min_interval_secs has passed
  // or the total is reached.
  void update(std::int64_t n = 1);
  // Values shown after the rate; numbers with 4 significant digits.
  void set_postfix(ProgressPostfix postfix);
  void set_description(std::string desc);
  // Draws now.
  void refresh();
  // Erases the bar's line, so the program can print a line of its own there
  // (refresh() draws the bar again).
  void clear();
  // Final draw and newline (or erase, see leave). Idempotent.
  void close();

  // Whether this bar draws at all (local main process, terminal, enabled).
  bool shown() const { return shown_; }
  std::int64_t n() const { return n_; }

 private:
  void draw();
  void emit(const std::string& text);

  ProgressBarOptions options_;
  // ACCELERATE_PROGRESS_TTY's terminal when stderr is the launcher's pipe
  // (docs/launching.md, "Output"); -1: none. Owned.
  int terminal_fd_ = -1;
  bool shown_ = false;
  bool closed_ = false;
  int width_ = 80;
  std::int64_t n_ = 0;
  ProgressPostfix postfix_;
  std::size_t last_length_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

namespace detail {
template <typename R, typename = void>
struct HasKnownSize : std::false_type {};
template <typename R>
struct HasKnownSize<R, std::void_t<decltype(std::declval<const R&>().known_size())>>
    : std::true_type {};
template <typename R, typename = void>
struct HasSize : std::false_type {};
template <typename R>
struct HasSize<R, std::void_t<decltype(std::declval<const R&>().size())>> : std::true_type {};
}  // namespace detail

// A range that counts its iterations on a ProgressBar: each step of the loop
// (after the body) is one update. Made by progress() below.
template <typename Range>
class ProgressRange {
  using Inner = decltype(std::declval<Range&>().begin());
  using InnerEnd = decltype(std::declval<Range&>().end());

 public:
  struct Sentinel {
    InnerEnd it;
  };
  class Iterator {
   public:
    Iterator(Inner it, ProgressBar* bar) : it_(std::move(it)), bar_(bar) {}
    decltype(auto) operator*() const { return *it_; }
    Iterator& operator++() {
      ++it_;
      bar_->update();
      return *this;
    }
    bool operator!=(const Sentinel& end) const { return it_ != end.it; }

   private:
    Inner it_;  // may be move-only (DataLoader's is)
    ProgressBar* bar_;
  };

  ProgressRange(Range& range, ProgressBarOptions options)
      : range_(range), bar_(with_total(range, std::move(options))) {}
  Iterator begin() { return Iterator(range_.begin(), &bar_); }
  Sentinel end() { return Sentinel{range_.end()}; }
  ProgressBar& bar() { return bar_; }

 private:
  static ProgressBarOptions with_total(const Range& range, ProgressBarOptions options) {
    if (!options.total()) {
      if constexpr (detail::HasKnownSize<Range>::value) {
        if (auto size = range.known_size()) options.total(static_cast<std::int64_t>(*size));
      } else if constexpr (detail::HasSize<Range>::value) {
        options.total(static_cast<std::int64_t>(range.size()));
      }
    }
    return options;
  }

  Range& range_;
  ProgressBar bar_;
};

// for (auto& item : progress(items, options)) ...; the bar closes when the
// loop's range goes out of scope. Postfix values: progress(...).bar().
template <typename Range>
ProgressRange<Range> progress(Range& range, ProgressBarOptions options = {}) {
  return ProgressRange<Range>(range, std::move(options));
}

}  // namespace accelerate
