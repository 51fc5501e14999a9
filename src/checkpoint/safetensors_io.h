// A file descriptor with the few operations the safetensors code needs:
// positioned reads (no seek state, so tensors can be read in any order) and
// whole-buffer writes that retry partial writes. Every failure throws
// accelerate::Error naming the file. Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace accelerate::safetensors {

class File {
 public:
  static File open_read(const std::string& path);
  // Creates or truncates.
  static File open_write(const std::string& path);

  File(File&& other) noexcept;
  File& operator=(File&&) = delete;
  File(const File&) = delete;
  ~File();

  uint64_t size() const;
  // Reads exactly `size` bytes at `offset`; a short file is an error.
  void read_at(void* data, uint64_t size, uint64_t offset) const;
  // Appends all of `data`.
  void write_all(const void* data, uint64_t size);
  // Writes all of `data` at `offset` (past the end: the file grows), leaving
  // the append position as it was.
  void write_at(const void* data, uint64_t size, uint64_t offset);
  // Closes and reports a failed close (lost write-back on some filesystems).
  void close();
  const std::string& path() const { return path_; }

 private:
  File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

}  // namespace accelerate::safetensors
