// POSIX file access for safetensors (see safetensors_io.h).
#include "checkpoint/safetensors_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "accelerate/common/errors.h"

namespace accelerate::safetensors {
namespace {

[[noreturn]] void fail_errno(const std::string& what, const std::string& path, int error) {
  throw Error("cannot " + what + " '" + path + "': " + std::strerror(error));
}

// Linux transfers at most ~2 GiB per call; ask for less and loop.
constexpr uint64_t kMaxChunk = uint64_t{1} << 30;

}  // namespace

File File::open_read(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_errno("open", path, errno);
  File file(fd, path);
  struct stat info {};
  if (::fstat(fd, &info) != 0) fail_errno("stat", path, errno);
  if (!S_ISREG(info.st_mode)) throw Error("cannot read '" + path + "': not a regular file");
  return file;
}

File File::open_write(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_errno("create", path, errno);
  return File(fd, path);
}

File::File(File&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

uint64_t File::size() const {
  struct stat info {};
  if (::fstat(fd_, &info) != 0) fail_errno("stat", path_, errno);
  return static_cast<uint64_t>(info.st_size);
}

void File::read_at(void* data, uint64_t size, uint64_t offset) const {
  auto* out = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t got = ::pread(fd_, out, std::min(size, kMaxChunk), static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      fail_errno("read", path_, errno);
    }
    if (got == 0) throw Error("cannot read '" + path_ + "': file ends early (truncated?)");
    out += got;
    size -= static_cast<uint64_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

void File::write_all(const void* data, uint64_t size) {
  const auto* in = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t put = ::write(fd_, in, std::min(size, kMaxChunk));
    if (put < 0) {
      if (errno == EINTR) continue;
      fail_errno("write", path_, errno);
    }
    in += put;
    size -= static_cast<uint64_t>(put);
  }
}

void File::write_at(const void* data, uint64_t size, uint64_t offset) {
  const auto* in = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t put = ::pwrite(fd_, in, std::min(size, kMaxChunk), static_cast<off_t>(offset));
    if (put < 0) {
      if (errno == EINTR) continue;
      fail_errno("write", path_, errno);
    }
    in += put;
    size -= static_cast<uint64_t>(put);
    offset += static_cast<uint64_t>(put);
  }
}

void File::close() {
  const int fd = std::exchange(fd_, -1);
  if (fd >= 0 && ::close(fd) != 0) fail_errno("close", path_, errno);
}

}  // namespace accelerate::safetensors
