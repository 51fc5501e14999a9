#include "tracking/buffered_file.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accelerate/common/errors.h"

namespace accelerate {
namespace tracking {
namespace {

constexpr std::size_t kMaxBuffered = 1 << 20;

std::string errno_message(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

}  // namespace

BufferedFile::BufferedFile(int fd, std::string path, double flush_secs)
    : path_(std::move(path)), flush_secs_(flush_secs), fd_(fd) {
  struct stat info {};
  if (::fstat(fd_, &info) == 0) initial_size_ = static_cast<std::uint64_t>(info.st_size);
  start_flusher();
}

BufferedFile::BufferedFile(const std::string& path, Mode mode, double flush_secs)
    : path_(path), flush_secs_(flush_secs) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (mode == Mode::kAppend ? O_APPEND : O_TRUNC);
  fd_ = ::open(path.c_str(), flags, 0644);
  if (fd_ < 0) throw Error(errno_message("cannot open", path));
  struct stat info {};
  if (::fstat(fd_, &info) == 0) initial_size_ = static_cast<std::uint64_t>(info.st_size);
  start_flusher();
}

std::unique_ptr<BufferedFile> BufferedFile::create_unique(const std::string& base,
                                                          double flush_secs) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    std::string path = attempt == 0 ? base : base + "." + std::to_string(attempt);
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) return std::unique_ptr<BufferedFile>(new BufferedFile(fd, path, flush_secs));
    if (errno != EEXIST) throw Error(errno_message("cannot create", path));
  }
  throw Error("cannot create " + base + ": 1000 files with that name already exist");
}

void BufferedFile::start_flusher() {
  if (flush_secs_ > 0) flusher_ = std::thread([this] { flusher_loop(); });
}

BufferedFile::~BufferedFile() {
  try {
    close();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "accelerate: %s\n", error.what());
  }
}

void BufferedFile::append(std::string_view record) {
  detail::MutexLock lock(mutex_);
  if (fd_ < 0) throw Error("write to closed file " + path_);
  if (!background_error_.empty()) throw Error(background_error_);
  buffer_.append(record.data(), record.size());
  if (flush_secs_ <= 0 || buffer_.size() >= kMaxBuffered) write_buffer_locked();
}

void BufferedFile::flush() {
  detail::MutexLock lock(mutex_);
  if (!background_error_.empty()) throw Error(background_error_);
  if (fd_ >= 0) write_buffer_locked();
}

void BufferedFile::write_buffer_locked() {
  std::size_t done = 0;
  while (done < buffer_.size()) {
    ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::string message = errno_message("cannot write", path_);
      buffer_.erase(0, done);
      throw Error(message);
    }
    done += static_cast<std::size_t>(n);
  }
  buffer_.clear();
}

void BufferedFile::flusher_loop() {
  using Clock = std::chrono::steady_clock;
  const auto period =
      std::chrono::ceil<Clock::duration>(std::chrono::duration<double>(flush_secs_));
  detail::MutexLock lock(mutex_);
  while (!stopping_) {
    const Clock::time_point deadline = Clock::now() + period;
    // Until stopping_ or the deadline; another wake-up waits again.
    while (!stopping_ && wake_.wait_until(mutex_, deadline) == std::cv_status::no_timeout) {
    }
    if (stopping_ || buffer_.empty() || !background_error_.empty()) continue;
    try {
      write_buffer_locked();
    } catch (const std::exception& error) {
      background_error_ = error.what();  // reported by the next append/flush
    }
  }
}

void BufferedFile::close() {
  {
    detail::MutexLock lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (flusher_.joinable()) flusher_.join();
  detail::MutexLock lock(mutex_);
  if (fd_ < 0) return;
  std::string failure;
  try {
    write_buffer_locked();
  } catch (const std::exception& error) {
    failure = error.what();
  }
  if (::close(fd_) != 0 && failure.empty()) failure = errno_message("cannot close", path_);
  fd_ = -1;
  if (!failure.empty()) throw Error(failure);
}

}  // namespace tracking
}  // namespace accelerate
