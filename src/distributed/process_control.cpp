#include "accelerate/distributed/process_control.h"

#include <ATen/ATen.h>

#include "accelerate/common/errors.h"

namespace accelerate {
namespace detail {

void agree_nobody_failed(Communicator& comm, bool this_rank_failed, const char* what) {
  auto flag = at::full({1}, this_rank_failed ? 1 : 0, at::kInt);
  comm.all_reduce(flag, ReduceOp::kMax);
  if (flag.item<int>() != 0 && !this_rank_failed) {
    throw DistributedError("rank " + std::to_string(comm.rank()) + ": " + what +
                           ": the process that went first threw; see its error");
  }
}

}  // namespace detail

bool Trigger::check(Communicator& comm) {
  auto flag = at::full({1}, raised_ ? 1 : 0, at::kInt);
  comm.all_reduce(flag, ReduceOp::kMax);
  raised_ = false;
  return flag.item<int>() != 0;
}

}  // namespace accelerate
