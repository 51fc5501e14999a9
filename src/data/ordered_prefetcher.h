// OrderedPrefetcher: runs a sequence of jobs on background threads and hands
// their results back in sequence order, keeping at most `capacity` results
// claimed but not yet consumed. It is what lets DataLoader workers load
// batches in parallel while the training loop sees them in a deterministic
// order. LibTorch-free.
//
// Jobs come from `claim`, which is called by one thread at a time, in order:
// that is where sequential work happens (reading the next examples of a
// stream); the returned job then runs in parallel (loading, collating).
// An exception thrown by a claim or a job is rethrown by next() at that
// job's place in the sequence, after every earlier result was delivered.
// The destructor stops claiming new jobs and joins the workers; it waits for
// jobs already running, never for the consumer.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>

namespace accelerate {
namespace detail {

class OrderedPrefetcher {
 public:
  using Result = std::shared_ptr<void>;
  using Job = std::function<Result()>;
  // The next job, or nullopt when there are no more.
  using Claim = std::function<std::optional<Job>()>;

  // num_workers == 0 runs every claim and job inside next(), on the caller's
  // thread. capacity is raised to at least 1. With workers, next() throws
  // accelerate::Error when no result arrives within `timeout` (0: no limit).
  OrderedPrefetcher(Claim claim, size_t num_workers, size_t capacity,
                    std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  ~OrderedPrefetcher();
  OrderedPrefetcher(const OrderedPrefetcher&) = delete;
  OrderedPrefetcher& operator=(const OrderedPrefetcher&) = delete;

  // The next result in sequence order, or nullptr after the last one.
  // Rethrows a failed claim's or job's exception; the prefetcher is finished
  // after that.
  Result next();

  struct Shared;

 private:
  std::shared_ptr<Shared> shared_;
};

}  // namespace detail
}  // namespace accelerate
