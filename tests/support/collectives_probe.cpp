// A real multi-process program for end-to-end tests: started by our launcher
// (or with RANK/WORLD_SIZE/MASTER_* set by the test), it joins the job over a
// TCPStore and checks Accelerate's tested collective values for its world size.
//   collectives_probe check     run the checks, print "rank R: collectives ok"
//   collectives_probe connect   only join the job and meet at a barrier
//   collectives_probe desert    like connect, but the last rank leaves
//                               right after the rendezvous
//   collectives_probe vanish    the last rank dies right after the
//                               rendezvous (_Exit: no destructors, as in a
//                               crash); the others sum a CPU tensor
//                               (through shared memory, unless turned off)
// Any failure prints one line on stderr and exits 1.
#include <cstdlib>
#include <iostream>
#include <string>

#include <ATen/ATen.h>

#include "accelerate/accelerate.h"

namespace {

void assert_true(bool condition, const std::string& what) {
  if (!condition) throw accelerate::Error("check failed: " + what);
}

void check_collectives(accelerate::Communicator& comm) {
  const int n = comm.world_size();
  const int r = comm.rank();
  auto gathered = accelerate::gather(comm, at::arange(n, at::kLong) + 1 + n * r);
  assert_true(at::equal(gathered, at::arange(1, n * n + 1, at::kLong)), "gather = 1..N^2");

  std::vector<int> expected_ranks;
  for (int q = 0; q < n; ++q) expected_ranks.push_back(q);
  assert_true(accelerate::gather_object(comm, std::vector<int>{r}) == expected_ranks,
              "gather_object([rank]) = [0..N-1]");

  auto padded = accelerate::pad_across_processes(comm, at::ones({r == 0 ? n + 1 : n}, at::kInt));
  assert_true(padded.size(0) == n + 1 && padded.scalar_type() == at::kInt,
              "pad to N+1, dtype kept");
  if (r != 0) assert_true(padded[n].item<int>() == 0, "padded ranks end in 0");

  auto mine = at::arange(2, at::kFloat) + 1 + 2 * r;  // rank 0 [1,2], rank 1 [3,4], ...
  auto sum = accelerate::reduce(comm, mine, accelerate::ReduceOp::kSum);
  auto max = accelerate::reduce(comm, mine, accelerate::ReduceOp::kMax);
  assert_true(max[1].item<float>() == 2.0f * n, "reduce max");
  assert_true(sum[0].item<float>() == static_cast<float>(n * n), "reduce sum");

  accelerate::Trigger trigger;
  if (r == n - 1) trigger.set();
  assert_true(trigger.check(comm) && !trigger.check(comm), "trigger fires once everywhere");
  accelerate::wait_for_everyone(comm);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  try {
    auto job = accelerate::current_job_state();
    auto comm = accelerate::Communicator::connect(job);
    if (mode == "check") {
      check_collectives(*comm);
      std::cout << "rank " << job.rank << ": collectives ok (" << job.describe() << ")"
                << std::endl;
    } else if (mode == "vanish" && !job.is_last_process()) {
      at::Tensor ones = at::ones({1000}, at::kFloat);
      comm->all_reduce_sum_async(ones, "the test's sum").wait();
    } else if (mode == "vanish") {
      std::_Exit(0);
    } else if (mode == "desert" && job.is_last_process()) {
      std::cout << "rank " << job.rank << ": leaving without the barrier" << std::endl;
    } else {
      comm->barrier();
      std::cout << "rank " << job.rank << ": connected" << std::endl;
    }
  } catch (const std::exception& error) {
    std::cerr << "collectives_probe: error: " << error.what() << std::endl;
    return 1;
  }
  return 0;
}
