// Runs a function as every rank of a job whose ranks are threads of this test
// process, meeting through a fresh c10d FileStore: real Gloo collectives over
// 127.0.0.1, no mocks.
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "accelerate/distributed/communicator.h"

namespace accelerate {
namespace testing {

inline JobState thread_rank_job(int rank, int world_size,
                                std::chrono::milliseconds timeout = std::chrono::seconds(30),
                                bool debug = false, bool shared_memory_all_reduce = true) {
  JobState job;
  job.rank = rank;
  job.world_size = world_size;
  job.local_rank = rank;
  job.local_world_size = world_size;
  job.backend = world_size > 1 ? accelerate::Backend::kGloo : accelerate::Backend::kNone;
  job.timeout = timeout;
  job.debug = debug;
  job.shared_memory_all_reduce = shared_memory_all_reduce;
  return job;
}

inline std::string fresh_store_path() {
  static std::atomic<int> counter{0};
  std::string path =
      "/tmp/accelerate-test-store-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
  ::unlink(path.c_str());
  return path;
}

struct RankOptions {
  std::chrono::milliseconds timeout = std::chrono::seconds(30);
  bool debug = false;
  // false: CPU sums go through Gloo (JobOptions::shared_memory_all_reduce).
  bool shared_memory_all_reduce = true;
};

// Calls body(rank, comm) on `world_size` threads, rank r's communicator
// connected with job_of(r); a failed EXPECT in any thread fails the test, and
// an exception escaping a rank is reported with its rank.
inline void run_ranks_of_jobs(int world_size, const std::function<JobState(int)>& job_of,
                              const std::function<void(int, std::shared_ptr<Communicator>)>& body) {
  const std::string path = fresh_store_path();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(world_size);
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        body(rank, Communicator::connect_through_file(path, job_of(rank)));
      } catch (const std::exception& error) {
        errors[rank] = error.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  ::unlink(path.c_str());
  for (int rank = 0; rank < world_size; ++rank) {
    EXPECT_EQ(errors[rank], "") << "rank " << rank << " threw";
  }
}

// Calls body(comm) on `world_size` Gloo (or shared-memory) thread ranks.
inline void run_rank_communicators(int world_size,
                                   const std::function<void(std::shared_ptr<Communicator>)>& body,
                                   RankOptions options = {}) {
  run_ranks_of_jobs(
      world_size,
      [&](int rank) {
        return thread_rank_job(rank, world_size, options.timeout, options.debug,
                               options.shared_memory_all_reduce);
      },
      [&](int, std::shared_ptr<Communicator> comm) { body(std::move(comm)); });
}

// A non-owning shared_ptr to a rank's communicator, for APIs that take one
// (the communicator outlives the body that uses it).
inline std::shared_ptr<Communicator> borrow(Communicator& comm) {
  return std::shared_ptr<Communicator>(std::shared_ptr<Communicator>(), &comm);
}

inline void run_ranks(int world_size, const std::function<void(Communicator&)>& body,
                      RankOptions options = {}) {
  run_rank_communicators(
      world_size, [&](std::shared_ptr<Communicator> comm) { body(*comm); }, options);
}

}  // namespace testing
}  // namespace accelerate
