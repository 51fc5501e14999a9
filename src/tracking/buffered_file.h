// BufferedFile: the file under every built-in tracker. Records are appended
// whole to an in-memory buffer and written with write(2) — never split
// across two writes by us — at least every flush_secs seconds (a background
// thread, so a stalled training loop still becomes visible), when the buffer
// passes 1 MiB, on flush() and on close. flush_secs = 0 writes each record at
// once. A process killed with SIGKILL therefore leaves only whole records
// that were flushed, plus nothing of what was not.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "common/mutex.h"

namespace accelerate {
namespace tracking {

class BufferedFile {
 public:
  enum class Mode { kAppend, kTruncate };

  // Opens (creating) `path`. Throws accelerate::Error naming the file.
  BufferedFile(const std::string& path, Mode mode, double flush_secs);
  // Creates a new file at `base`, or `base`.1, `base`.2, ... when taken
  // (O_EXCL, so two writers never share a file).
  static std::unique_ptr<BufferedFile> create_unique(const std::string& base, double flush_secs);
  ~BufferedFile();  // close(), reporting a failure on stderr
  BufferedFile(const BufferedFile&) = delete;
  BufferedFile& operator=(const BufferedFile&) = delete;

  // Queues one record. Thread-safe. Rethrows a failure of the background
  // flush.
  void append(std::string_view record) EXCLUDES(mutex_);
  // Writes the buffer to the file. Throws accelerate::Error on failure.
  void flush() EXCLUDES(mutex_);
  // Stops the background thread, flushes and closes. Idempotent.
  void close() EXCLUDES(mutex_);

  const std::string& path() const { return path_; }
  // Bytes in the file when it was opened (0 for a new file).
  std::uint64_t initial_size() const { return initial_size_; }

 private:
  BufferedFile(int fd, std::string path, double flush_secs);
  void start_flusher();
  void write_buffer_locked() REQUIRES(mutex_);
  void flusher_loop() EXCLUDES(mutex_);

  // Set by the constructor, read-only after it.
  std::string path_;
  double flush_secs_;
  std::uint64_t initial_size_ = 0;

  detail::Mutex mutex_;
  detail::CondVar wake_;  // stopping_ was set
  int fd_ GUARDED_BY(mutex_) = -1;
  std::string buffer_ GUARDED_BY(mutex_);
  std::string background_error_ GUARDED_BY(mutex_);
  bool stopping_ GUARDED_BY(mutex_) = false;
  std::thread flusher_;  // started by the constructor, joined by close()
};

}  // namespace tracking
}  // namespace accelerate
