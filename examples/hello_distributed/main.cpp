// Hello, distributed: every process integrates its share of 4/(1+x^2) over
// [0, 1], the shares are summed across processes, and the main process prints
// pi. Run it plainly (one process) or with the launcher:
//   accelerate launch --cpu --num_processes 2 ./hello_distributed
// Every process says what it integrated; the result is printed once.
#include <cmath>
#include <cstdio>
#include <iostream>

#include <ATen/ATen.h>

#include <accelerate/accelerate.h>

#include "../common/example_flags.h"

int main(int argc, char** argv) {
  int64_t intervals = 1'000'000;
  examples::Flags flags(
      "Every process integrates its share of 4/(1+x^2) over [0, 1]; the main process prints pi.");
  flags.add("intervals", &intervals, "midpoints to sum, split between the processes");
  flags.parse(argc, argv);
  if (intervals < 1) flags.fail("--intervals must be at least 1, got " + std::to_string(intervals));
  try {
    auto job = accelerate::current_job_state();
    auto comm = accelerate::Communicator::connect(job);

    // Each process takes its slice of the midpoints of the intervals.
    auto midpoints = (at::arange(intervals, at::kDouble) + 0.5) / intervals;
    auto mine = accelerate::split_between_processes(*comm, midpoints);
    auto partial = (4.0 / (1.0 + mine * mine)).sum() / intervals;

    auto pi = accelerate::reduce(*comm, partial, accelerate::ReduceOp::kSum);
    auto shares = accelerate::gather(*comm, at::full({1}, mine.size(0), at::kLong));

    std::cout << "process " << job.rank << " of " << job.world_size << " integrated "
              << mine.size(0) << " intervals" << std::endl;
    accelerate::wait_for_everyone(*comm);
    char line[128];
    std::snprintf(line, sizeof(line), "pi ~= %.12f (error %.1e) from %lld processes",
                  pi.item<double>(), std::abs(pi.item<double>() - M_PI),
                  static_cast<long long>(shares.size(0)));
    accelerate::print(job, line);
  } catch (const std::exception& error) {
    std::cerr << "hello_distributed: error: " << error.what() << std::endl;
    return 1;
  }
  return 0;
}
