#include "data/ordered_prefetcher.h"

#include <algorithm>
#include <exception>
#include <iostream>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "accelerate/common/errors.h"
#include "common/mutex.h"

namespace accelerate {
namespace detail {

namespace {
constexpr size_t kNoEnd = std::numeric_limits<size_t>::max();

struct Outcome {
  OrderedPrefetcher::Result result;
  std::exception_ptr error;
};
}  // namespace

struct OrderedPrefetcher::Shared {
  Claim claim;
  size_t capacity = 1;
  std::chrono::milliseconds timeout{0};

  // Serialises claims so that sequence numbers follow claim order; taken
  // before `mutex` where a thread holds both.
  Mutex claim_mutex ACQUIRED_BEFORE(mutex);
  size_t next_sequence GUARDED_BY(claim_mutex) = 0;

  Mutex mutex;              // guards what is marked so below
  CondVar worker_wakeup;    // room for another job, or stop
  CondVar consumer_wakeup;  // a result arrived, or the end is known
  bool stopping GUARDED_BY(mutex) = false;
  bool exhausted GUARDED_BY(mutex) = false;  // no more claims: the sequence ended or failed
  size_t end GUARDED_BY(mutex) = kNoEnd;     // first sequence number without a result
  size_t consumed GUARDED_BY(mutex) = 0;     // next sequence number next() hands out
  size_t reserved GUARDED_BY(mutex) = 0;     // jobs claimed (or being claimed) but not consumed
  std::map<size_t, Outcome> ready GUARDED_BY(mutex);

  // The consumer's thread only (the constructor, next(), the destructor).
  bool inline_finished = false;  // num_workers == 0 only
  std::vector<std::thread> workers;

  void work() EXCLUDES(mutex, claim_mutex);
  Result next_inline();
  Result next_from_workers() EXCLUDES(mutex);
  void stop_and_join() EXCLUDES(mutex);

 private:
  // What the waits in work() and next_from_workers() wait for.
  bool may_reserve() const REQUIRES(mutex) { return stopping || exhausted || reserved < capacity; }
  bool result_arrived() const REQUIRES(mutex) {
    return consumed >= end || ready.count(consumed) > 0;
  }
};

void OrderedPrefetcher::Shared::work() {
  for (;;) {
    {
      MutexLock lock(mutex);
      while (!may_reserve()) worker_wakeup.wait(mutex);
      if (stopping || exhausted) return;
      ++reserved;
    }
    size_t sequence = 0;
    std::optional<Job> job;
    {
      MutexLock claim_lock(claim_mutex);
      {
        MutexLock lock(mutex);
        if (stopping || exhausted) {
          --reserved;
          return;
        }
      }
      sequence = next_sequence++;
      std::exception_ptr error;
      try {
        job = claim();
      } catch (...) {
        error = std::current_exception();
      }
      if (!job) {
        {
          MutexLock lock(mutex);
          exhausted = true;
          if (error) {
            ready[sequence] = Outcome{nullptr, error};
            end = sequence + 1;
          } else {
            --reserved;
            end = sequence;
          }
        }
        consumer_wakeup.notify_all();
        worker_wakeup.notify_all();
        return;
      }
    }
    Outcome outcome;
    try {
      outcome.result = (*job)();
    } catch (...) {
      outcome.error = std::current_exception();
    }
    job.reset();  // release what the job captured before publishing
    {
      MutexLock lock(mutex);
      ready.emplace(sequence, std::move(outcome));
    }
    consumer_wakeup.notify_all();
  }
}

OrderedPrefetcher::Result OrderedPrefetcher::Shared::next_inline() {
  if (inline_finished) return nullptr;
  try {
    auto job = claim();
    if (!job) {
      inline_finished = true;
      return nullptr;
    }
    return (*job)();
  } catch (...) {
    inline_finished = true;
    throw;
  }
}

OrderedPrefetcher::Result OrderedPrefetcher::Shared::next_from_workers() {
  Outcome outcome;
  {
    MutexLock lock(mutex);
    if (timeout.count() <= 0) {
      while (!result_arrived()) consumer_wakeup.wait(mutex);
    } else {
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      while (!result_arrived()) {
        if (consumer_wakeup.wait_until(mutex, deadline) == std::cv_status::timeout &&
            !result_arrived()) {
          const std::string message =
              "DataLoader: no batch from the workers within the timeout of " +
              std::to_string(timeout.count()) + " ms (DataLoaderOptions::timeout)";
          // The exception reaches the loop only after the pass has joined its
          // workers, i.e. once the stuck dataset call returns; say it now.
          std::cerr << "accelerate: error: " << message << std::endl;
          throw Error(message);
        }
      }
    }
    if (consumed >= end) return nullptr;
    auto found = ready.find(consumed);
    outcome = std::move(found->second);
    ready.erase(found);
    ++consumed;
    --reserved;
    if (outcome.error) {
      // Nothing after a failure is delivered: the epoch is over.
      exhausted = true;
      end = consumed;
    }
  }
  if (outcome.error) {
    worker_wakeup.notify_all();
    std::rethrow_exception(outcome.error);
  }
  worker_wakeup.notify_one();
  return std::move(outcome.result);
}

void OrderedPrefetcher::Shared::stop_and_join() {
  {
    MutexLock lock(mutex);
    stopping = true;
  }
  worker_wakeup.notify_all();
  for (auto& worker : workers) {
    if (worker.joinable()) worker.join();
  }
  workers.clear();
}

OrderedPrefetcher::OrderedPrefetcher(Claim claim, size_t num_workers, size_t capacity,
                                     std::chrono::milliseconds timeout)
    : shared_(std::make_shared<Shared>()) {
  shared_->claim = std::move(claim);
  shared_->capacity = std::max<size_t>(capacity, 1);
  shared_->timeout = timeout;
  try {
    for (size_t i = 0; i < num_workers; ++i) {
      Shared* shared = shared_.get();
      shared_->workers.emplace_back([shared] { shared->work(); });
    }
  } catch (...) {
    shared_->stop_and_join();
    throw;
  }
}

OrderedPrefetcher::~OrderedPrefetcher() { shared_->stop_and_join(); }

OrderedPrefetcher::Result OrderedPrefetcher::next() {
  return shared_->workers.empty() ? shared_->next_inline() : shared_->next_from_workers();
}

}  // namespace detail
}  // namespace accelerate
