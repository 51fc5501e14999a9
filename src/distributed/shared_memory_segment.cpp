#include "distributed/shared_memory_segment.h"

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace accelerate {
namespace detail {
namespace {

std::string system_error(const std::string& what, int error_number) {
  return what + ": " + std::strerror(error_number);
}

// Maps and closes `fd`; null with *error set on failure.
char* map_descriptor(int fd, std::size_t bytes, const std::string& name, std::string* error) {
  void* address = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int mmap_errno = errno;
  ::close(fd);
  if (address == MAP_FAILED) {
    *error = system_error("mmap " + name, mmap_errno);
    return nullptr;
  }
  return static_cast<char*>(address);
}

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string namespace_of(const char* kind) {
  char target[256];
  const std::string link = std::string("/proc/self/ns/") + kind;
  const ssize_t length = ::readlink(link.c_str(), target, sizeof(target) - 1);
  return length > 0 ? std::string(target, static_cast<std::size_t>(length)) : std::string();
}

}  // namespace

std::unique_ptr<SharedMemorySegment> SharedMemorySegment::create(const std::string& name,
                                                                 std::size_t bytes,
                                                                 std::string* error) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, S_IRUSR | S_IWUSR);
  if (fd < 0) {
    *error = system_error("shm_open " + name, errno);
    return nullptr;
  }
  // posix_fallocate reports ENOSPC now for a /dev/shm too small (a
  // container's 64 MB default); ftruncate alone would succeed and the first
  // touch of a missing page would kill the process with SIGBUS.
  const int reserved = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (reserved != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    *error =
        system_error("reserving " + std::to_string(bytes >> 20) + " MiB in /dev/shm", reserved);
    return nullptr;
  }
  char* data = map_descriptor(fd, bytes, name, error);
  if (!data) {
    ::shm_unlink(name.c_str());
    return nullptr;
  }
  return std::unique_ptr<SharedMemorySegment>(new SharedMemorySegment(data, bytes));
}

std::unique_ptr<SharedMemorySegment> SharedMemorySegment::open(const std::string& name,
                                                               std::size_t bytes,
                                                               std::string* error) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    *error = system_error("shm_open " + name, errno);
    return nullptr;
  }
  struct stat status {};
  if (::fstat(fd, &status) != 0 || static_cast<std::size_t>(status.st_size) < bytes) {
    ::close(fd);
    *error = "shared memory segment " + name + " is smaller than expected";
    return nullptr;
  }
  char* data = map_descriptor(fd, bytes, name, error);
  if (!data) return nullptr;
  return std::unique_ptr<SharedMemorySegment>(new SharedMemorySegment(data, bytes));
}

void SharedMemorySegment::remove_name(const std::string& name) { ::shm_unlink(name.c_str()); }

SharedMemorySegment::~SharedMemorySegment() { ::munmap(data_, size_); }

std::string shared_memory_identity() {
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "";
  const std::string boot = read_first_line("/proc/sys/kernel/random/boot_id");
  const std::string ipc = namespace_of("ipc");
  const std::string mnt = namespace_of("mnt");
  const std::string pid = namespace_of("pid");
  if (boot.empty() || ipc.empty() || mnt.empty() || pid.empty()) return "";
  return std::string(host) + " " + boot + " " + ipc + " " + mnt + " " + pid;
}

bool process_exists(int pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  // A rank that exited stays a zombie until its parent (a launcher, a test)
  // reaps it, which may be never while the parent waits on another rank.
  const std::string stat = read_first_line(("/proc/" + std::to_string(pid) + "/stat").c_str());
  const std::size_t end_of_name = stat.rfind(')');
  if (end_of_name == std::string::npos || end_of_name + 2 >= stat.size()) return true;
  const char state = stat[end_of_name + 2];
  return state != 'Z' && state != 'X';
}

void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t seen,
                std::chrono::milliseconds at_most) {
  struct timespec timeout {};
  timeout.tv_sec = static_cast<time_t>(at_most.count() / 1000);
  timeout.tv_nsec = static_cast<long>((at_most.count() % 1000) * 1000000);
  // Not FUTEX_PRIVATE_FLAG: the waker may be another process. Spurious
  // returns (EINTR, EAGAIN, ETIMEDOUT) are fine: callers re-check the word.
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, seen, &timeout, nullptr,
            0);
}

void futex_wake_all(std::atomic<std::uint32_t>& word) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr,
            nullptr, 0);
}

}  // namespace detail
}  // namespace accelerate
