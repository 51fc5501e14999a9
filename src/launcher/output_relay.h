// Copies one rank's stdout or stderr to the launcher's, one whole line at a
// time with a "[rank3]: " prefix, so lines of different ranks never mix.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

namespace accelerate::launcher {

// A line longer than this without a newline is passed on in pieces, each
// ended by a newline: memory stays bounded when a rank prints a progress
// bar with '\r' or binary data.
constexpr std::size_t kMaxBufferedLine = 64 * 1024;

// Removes every complete line from `pending` and returns them with `prefix`
// before each. At end of stream (`at_eof`) a final partial line is returned
// too, with a newline added so the next rank's line starts on its own line.
std::string take_complete_lines(std::string& pending, const std::string& prefix, bool at_eof);

// Writes all of `text` to `fd`, retrying short writes and EINTR. Gives up
// quietly when the reader is gone (EPIPE): the ranks keep running and their
// exit codes still count.
void write_fully(int fd, const std::string& text);

// A terminal's "back to the start of the line, erase it".
constexpr const char* kClearLine = "\r\033[K";

class LineRelay {
 public:
  // `log_fd` >= 0: every byte is also written there as it arrives, without
  // the prefix (a rank's log file reads like its own output). Not owned.
  // `before_lines`: written before each batch of lines to the destination
  // only (kClearLine, where a progress bar may sit on the terminal's line).
  LineRelay(int destination_fd, std::string prefix, int log_fd = -1, std::string before_lines = "")
      : destination_fd_(destination_fd),
        prefix_(std::move(prefix)),
        log_fd_(log_fd),
        before_lines_(std::move(before_lines)) {}

  // Buffers `data` and writes every line it completes.
  void feed(const char* data, std::size_t size);
  // End of stream: writes what is left.
  void finish();

 private:
  int destination_fd_;
  std::string prefix_;
  int log_fd_;
  std::string before_lines_;
  std::string pending_;
};

// Reads what the non-blocking pipe `fd` holds now into `relay`; at end of
// file (or a broken pipe) finishes the relay, closes `fd` and sets it to -1.
void relay_pipe(int& fd, LineRelay& relay);

}  // namespace accelerate::launcher
