#include "launcher/output_relay.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace accelerate::launcher {

std::string take_complete_lines(std::string& pending, const std::string& prefix, bool at_eof) {
  std::string out;
  std::size_t start = 0;
  while (start < pending.size()) {
    std::size_t newline = pending.find('\n', start);
    std::size_t end;  // one past the last byte of this line, newline included
    if (newline != std::string::npos) {
      end = newline + 1;
    } else if (at_eof || pending.size() - start >= kMaxBufferedLine) {
      end = std::min(pending.size(), start + kMaxBufferedLine);
    } else {
      break;  // an unfinished line waits for more data
    }
    out += prefix;
    out.append(pending, start, end - start);
    if (out.back() != '\n') out += '\n';
    start = end;
  }
  pending.erase(0, start);
  return out;
}

void write_fully(int fd, const std::string& text) {
  std::size_t written = 0;
  while (written < text.size()) {
    ssize_t n = write(fd, text.data() + written, text.size() - written);
    if (n > 0) {
      written += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      // Our stdout was handed to us non-blocking: wait until it drains.
      pollfd waiting{fd, POLLOUT, 0};
      poll(&waiting, 1, 100);
    } else {
      return;  // EPIPE, EIO (terminal gone) and the like: drop the output
    }
  }
}

void LineRelay::feed(const char* data, std::size_t size) {
  if (log_fd_ >= 0) write_fully(log_fd_, std::string(data, size));
  pending_.append(data, size);
  std::string lines = take_complete_lines(pending_, prefix_, false);
  if (!lines.empty()) write_fully(destination_fd_, before_lines_ + lines);
}

void LineRelay::finish() {
  std::string lines = take_complete_lines(pending_, prefix_, true);
  if (!lines.empty()) write_fully(destination_fd_, before_lines_ + lines);
}

void relay_pipe(int& fd, LineRelay& relay) {
  char buffer[65536];
  for (;;) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      relay.feed(buffer, static_cast<std::size_t>(n));
      if (static_cast<std::size_t>(n) < sizeof(buffer)) return;  // drained for now
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      return;
    } else {
      relay.finish();  // end of file (or a broken pipe): flush the partial line
      close(fd);
      fd = -1;
      return;
    }
  }
}

}  // namespace accelerate::launcher
