// Runs a benchmark body as every rank of a job: under `accelerate launch` (or
// torchrun; WORLD_SIZE is set) this process is one rank of that job;
// otherwise it forks `ranks` processes, before LibTorch starts any thread,
// which meet through a FileStore in /tmp. Returns the exit status for main().
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "accelerate/distributed/communicator.h"

namespace bench {

using RankBody = std::function<void(std::shared_ptr<accelerate::Communicator>)>;

// A forked rank's job on this machine. `shared_memory` picks the CPU
// transport (false: Gloo over loopback).
inline accelerate::JobState forked_job(int rank, int world_size, bool shared_memory = true) {
  accelerate::JobState job;
  job.rank = rank;
  job.world_size = world_size;
  job.local_rank = rank;
  job.local_world_size = world_size;
  job.backend = world_size > 1 ? accelerate::Backend::kGloo : accelerate::Backend::kNone;
  job.timeout = std::chrono::seconds(120);
  job.shared_memory_all_reduce = shared_memory;
  return job;
}

inline int run_forked_ranks(const char* program, int ranks, const RankBody& body,
                            bool shared_memory = true) {
  try {
    if (std::getenv("WORLD_SIZE") != nullptr) {
      body(accelerate::Communicator::connect(accelerate::current_job_state()));
      return 0;
    }
    const std::string store = std::string("/tmp/") + program + "-" + std::to_string(getpid());
    ::unlink(store.c_str());
    std::vector<pid_t> children;
    for (int rank = 0; rank < ranks; ++rank) {
      const pid_t pid = fork();
      if (pid == 0) {
        try {
          body(accelerate::Communicator::connect_through_file(
              store, forked_job(rank, ranks, shared_memory)));
          std::fflush(stdout);  // _Exit skips the stdio flush
          std::_Exit(0);
        } catch (const std::exception& error) {
          std::cerr << "rank " << rank << ": " << error.what() << "\n";
          std::_Exit(1);
        }
      }
      children.push_back(pid);
    }
    int failures = 0;
    for (pid_t pid : children) {
      int status = 0;
      waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
    }
    ::unlink(store.c_str());
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& error) {
    std::cerr << program << ": " << error.what() << "\n";
    return 1;
  }
}

// A benchmark's jobs: under a launcher (WORLD_SIZE set) the one this
// process belongs to; otherwise one forked job per number of processes in
// `worlds` and per CPU transport in `shared_memory` (true: shared memory,
// false: Gloo), in that order. Returns the exit status for main().
inline int run_forked_jobs(const char* program, const std::vector<int>& worlds,
                           const std::vector<bool>& shared_memory, const RankBody& body) {
  if (std::getenv("WORLD_SIZE") != nullptr) return run_forked_ranks(program, 0, body);
  int status = 0;
  for (int ranks : worlds) {
    for (bool transport : shared_memory)
      status |= run_forked_ranks(program, ranks, body, transport);
  }
  return status;
}

}  // namespace bench
