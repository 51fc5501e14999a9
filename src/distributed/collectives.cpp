#include "accelerate/distributed/collectives.h"

#include <ATen/ATen.h>

#include "distributed/shape_exchange.h"

namespace accelerate {

using detail::CollectiveKind;
using detail::ShapeRule;

std::vector<at::Tensor> gather_list(Communicator& comm, const at::Tensor& tensor) {
  // Scalars are gathered as one element each, as Accelerate does.
  at::Tensor input = tensor.dim() == 0 ? tensor.reshape({1}) : tensor;
  if (comm.world_size() == 1) return {input};
  auto reports = detail::exchange_shapes(comm, CollectiveKind::kGather, input,
                                         ShapeRule::kAllButDim, /*dim=*/0);
  int64_t longest = 0;
  for (const auto& report : reports) longest = std::max(longest, report.sizes[0]);
  // Gloo (and NCCL) all-gather equal sizes only: pad to the longest, send,
  // then cut each rank's padding off again.
  at::Tensor padded = input;
  if (input.size(0) < longest) {
    auto sizes = input.sizes().vec();
    sizes[0] = longest - input.size(0);
    padded = at::cat({input, at::zeros(sizes, input.options())}, 0);
  }
  auto pieces = comm.all_gather_same_shape(padded);
  for (size_t r = 0; r < pieces.size(); ++r)
    pieces[r] = pieces[r].narrow(0, 0, reports[r].sizes[0]);
  return pieces;
}

at::Tensor gather(Communicator& comm, const at::Tensor& tensor) {
  auto pieces = gather_list(comm, tensor);
  return pieces.size() == 1 ? pieces[0] : at::cat(pieces, 0);
}

at::Tensor broadcast(Communicator& comm, const at::Tensor& tensor, int from_process) {
  if (comm.debug()) {
    detail::exchange_shapes(comm, CollectiveKind::kBroadcast, tensor, ShapeRule::kIdentical);
  }
  at::Tensor result = tensor.clone();
  comm.broadcast(result, from_process);
  return result;
}

at::Tensor reduce(Communicator& comm, const at::Tensor& tensor, ReduceOp op, double scale) {
  if (comm.debug()) {
    detail::exchange_shapes(comm, CollectiveKind::kReduce, tensor, ShapeRule::kIdentical);
  }
  at::Tensor result = tensor.clone();
  comm.all_reduce(result, op);
  if (scale != 1.0) result.mul_(scale);
  return result;
}

at::Tensor pad_across_processes(Communicator& comm, const at::Tensor& tensor, int64_t dim,
                                int64_t pad_index, bool pad_first) {
  if (tensor.dim() == 0) return tensor;  // nothing to pad, as in Accelerate
  const int64_t d = dim < 0 ? dim + tensor.dim() : dim;
  if (d < 0 || d >= tensor.dim()) {
    throw Error("pad_across_processes: dim " + std::to_string(dim) + " is out of range for a " +
                std::to_string(tensor.dim()) + "-d tensor");
  }
  if (comm.world_size() == 1) return tensor;
  auto reports =
      detail::exchange_shapes(comm, CollectiveKind::kPad, tensor, ShapeRule::kAllButDim, d);
  int64_t longest = 0;
  for (const auto& report : reports) longest = std::max(longest, report.sizes[d]);
  if (tensor.size(d) == longest) return tensor;
  auto sizes = tensor.sizes().vec();
  sizes[d] = longest - tensor.size(d);
  // new_full keeps the dtype (Accelerate once turned ints into floats: #3218).
  at::Tensor padding = tensor.new_full(sizes, pad_index);
  return pad_first ? at::cat({padding, tensor}, d) : at::cat({tensor, padding}, d);
}

void wait_for_everyone(Communicator& comm) { comm.barrier(); }

ProcessSlice slice_for_process(size_t length, int rank, int world_size, bool apply_padding) {
  const size_t n = static_cast<size_t>(world_size);
  const size_t r = static_cast<size_t>(rank);
  if (apply_padding) {
    const size_t block = (length + n - 1) / n;
    return {r * block, (r + 1) * block};  // block is 0 for an empty input
  }
  const size_t base = length / n;
  const size_t extras = length % n;
  const size_t begin = r * base + std::min(r, extras);
  return {begin, begin + base + (r < extras ? 1 : 0)};
}

at::Tensor split_between_processes(const Communicator& comm, const at::Tensor& items,
                                   bool apply_padding) {
  if (items.dim() == 0) throw Error("split_between_processes needs a tensor with at least one dim");
  const size_t length = static_cast<size_t>(items.size(0));
  auto slice = slice_for_process(length, comm.rank(), comm.world_size(), apply_padding);
  if (slice.begin >= slice.end) return items.narrow(0, 0, 0);
  auto index = at::arange(static_cast<int64_t>(slice.begin), static_cast<int64_t>(slice.end),
                          at::TensorOptions().dtype(at::kLong).device(items.device()));
  return items.index_select(0, index.clamp_max(static_cast<int64_t>(length) - 1));
}

}  // namespace accelerate
