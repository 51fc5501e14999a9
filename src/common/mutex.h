// The library's mutex, scoped lock and condition variable: std::mutex and
// std::condition_variable with clang's thread-safety annotations
// (common/thread_annotations.h). libstdc++'s std::mutex carries none, so
// without this wrapper `clang++ -Wthread-safety` could not tell which lock a
// function holds. Same cost as the std types: every member is inline.
//
//   Mutex mutex_;
//   int count_ GUARDED_BY(mutex_) = 0;
//   ...
//   MutexLock lock(mutex_);
//   while (count_ == 0) changed_.wait(mutex_);  // a predicate the analysis checks
//
// Waits take the mutex and have no predicate argument: a predicate lambda is
// a separate function to the analysis, which would not know that the lock is
// held inside it. The caller writes the loop instead.
//
// LibTorch-free (the command line may link code that uses it).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "common/thread_annotations.h"

namespace accelerate {
namespace detail {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ACQUIRE() { mutex_.lock(); }
  void unlock() RELEASE() { mutex_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mutex_;
};

// Holds `mutex` from its construction to the end of its scope.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mutex) ACQUIRE(mutex) : mutex_(mutex) { mutex_.lock(); }
  ~MutexLock() RELEASE() { mutex_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mutex_;
};

// A condition variable waited on with a held Mutex, which is held again
// when the wait returns (also when it throws).
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // Until notified (or a spurious wake-up: wait in a loop).
  void wait(Mutex& mutex) REQUIRES(mutex) {
    std::unique_lock<std::mutex> lock(mutex.mutex_, std::adopt_lock);
    KeepLocked keep{lock};
    condition_.wait(lock);
  }
  // Until notified or `deadline`: std::cv_status::timeout when it passed.
  std::cv_status wait_until(Mutex& mutex, std::chrono::steady_clock::time_point deadline)
      REQUIRES(mutex) {
    std::unique_lock<std::mutex> lock(mutex.mutex_, std::adopt_lock);
    KeepLocked keep{lock};
    return condition_.wait_until(lock, deadline);
  }

  void notify_one() noexcept { condition_.notify_one(); }
  void notify_all() noexcept { condition_.notify_all(); }

 private:
  // std::condition_variable waits through a unique_lock, which would unlock
  // the caller's mutex when it goes out of scope; the caller's MutexLock
  // does that. Declared after the unique_lock, so it runs first, on every
  // way out.
  struct KeepLocked {
    std::unique_lock<std::mutex>& lock;
    ~KeepLocked() { lock.release(); }
  };

  std::condition_variable condition_;
};

}  // namespace detail
}  // namespace accelerate
