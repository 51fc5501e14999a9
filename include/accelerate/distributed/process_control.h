// Running code on some processes only, in an order, and agreeing on flags:
// Accelerate's main_process_first, on_main_process, print and triggers.
#pragma once

#include <iostream>
#include <sstream>
#include <utility>

#include "accelerate/common/job_state.h"
#include "accelerate/distributed/communicator.h"

namespace accelerate {

namespace detail {
// Every rank reports whether its part failed; throws on the ranks that did
// not fail when one did, so nobody waits for a peer that threw.
void agree_nobody_failed(Communicator& comm, bool this_rank_failed, const char* what);

template <class Fn>
void goes_first(Communicator& comm, bool is_first, const char* what, Fn&& fn) {
  if (!is_first) {
    agree_nobody_failed(comm, false, what);
    std::forward<Fn>(fn)();
    return;
  }
  try {
    std::forward<Fn>(fn)();
  } catch (...) {
    agree_nobody_failed(comm, true, what);
    throw;
  }
  agree_nobody_failed(comm, false, what);
}
}  // namespace detail

// Runs `fn` on the main process first, then on all the others (e.g. the main
// process downloads or preprocesses, the others then read the cache). If the
// main process throws, the others get a DistributedError instead of waiting.
template <class Fn>
void main_process_first(Communicator& comm, Fn&& fn) {
  detail::goes_first(comm, comm.job().is_main_process(), "main_process_first",
                     std::forward<Fn>(fn));
}

// The same with the main process of each machine going first.
template <class Fn>
void local_main_process_first(Communicator& comm, Fn&& fn) {
  detail::goes_first(comm, comm.job().is_local_main_process(), "local_main_process_first",
                     std::forward<Fn>(fn));
}

// Runs `fn` only on the named process(es); no synchronisation.
template <class Fn>
void on_main_process(const JobState& job, Fn&& fn) {
  if (job.is_main_process()) std::forward<Fn>(fn)();
}
template <class Fn>
void on_local_main_process(const JobState& job, Fn&& fn) {
  if (job.is_local_main_process()) std::forward<Fn>(fn)();
}
template <class Fn>
void on_last_process(const JobState& job, Fn&& fn) {
  if (job.is_last_process()) std::forward<Fn>(fn)();
}
template <class Fn>
void on_process(const JobState& job, int process_index, Fn&& fn) {
  if (job.rank == process_index) std::forward<Fn>(fn)();
}
template <class Fn>
void on_local_process(const JobState& job, int local_process_index, Fn&& fn) {
  if (job.local_rank == local_process_index) std::forward<Fn>(fn)();
}

// Prints the arguments and a newline on the local main process only (once
// per machine), like Accelerator.print. `out` defaults to std::cout.
template <class... Args>
void print_on(std::ostream& out, const JobState& job, const Args&... args) {
  if (!job.is_local_main_process()) return;
  std::ostringstream line;
  (line << ... << args);
  line << '\n';
  out << line.str() << std::flush;
}
template <class... Args>
void print(const JobState& job, const Args&... args) {
  print_on(std::cout, job, args...);
}

// Accelerate's set_trigger / check_trigger: any rank may set it (e.g. on a
// NaN loss); check() is a collective that returns true on every rank when at
// least one rank set it since the last check, and resets it.
class Trigger {
 public:
  void set() { raised_ = true; }
  bool check(Communicator& comm);

 private:
  bool raised_ = false;
};

}  // namespace accelerate
