// Accelerate's collective operations as free functions over a Communicator.
// Every rank must call the same collectives in the same order. In a
// one-process job each is the identity (gather returns its input, etc.).
//
//   auto all = accelerate::gather(comm, predictions);   // dim 0, any sizes
//   auto mean = accelerate::reduce(comm, loss, accelerate::ReduceOp::kMean);
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "accelerate/distributed/communicator.h"
#include "accelerate/distributed/object_serializer.h"

namespace accelerate {

// Concatenates every rank's tensor along dim 0, in rank order. The first
// dimension may differ between ranks (the others and the dtype must match,
// else a DistributedError lists every rank's shape). Non-contiguous inputs,
// scalars (gathered as one element each) and every dtype work.
at::Tensor gather(Communicator& comm, const at::Tensor& tensor);

// Every rank's tensor, in rank order, without concatenating.
std::vector<at::Tensor> gather_list(Communicator& comm, const at::Tensor& tensor);

// Rank `from_process`'s tensor on every rank (a new tensor; shapes must
// match).
at::Tensor broadcast(Communicator& comm, const at::Tensor& tensor, int from_process = 0);

// Element-wise reduction over ranks: sum, mean, max or min; the result has
// the input's dtype and is multiplied by `scale`. Mean needs a floating dtype.
at::Tensor reduce(Communicator& comm, const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum,
                  double scale = 1.0);

// Pads `tensor` along `dim` to the largest size any rank has there, with
// `pad_index`, at the end (or at the start with pad_first). The dtype is
// kept. Other dims may differ; only the number of dims must match.
at::Tensor pad_across_processes(Communicator& comm, const at::Tensor& tensor, int64_t dim = 0,
                                int64_t pad_index = 0, bool pad_first = false);

// Blocks until every rank arrives (Accelerate's wait_for_everyone).
void wait_for_everyone(Communicator& comm);

// One value from each rank, in rank order.
template <class T>
std::vector<T> gather_object(Communicator& comm, const T& value) {
  std::vector<T> values;
  for (const auto& bytes : comm.all_gather_bytes(serialize(value))) {
    values.push_back(deserialize<T>(bytes));
  }
  return values;
}

// Lists are flattened one level, as in Accelerate: gather_object({rank}) on
// N ranks is {0, 1, ..., N-1}.
template <class T>
std::vector<T> gather_object(Communicator& comm, const std::vector<T>& values) {
  std::vector<T> flat;
  for (const auto& bytes : comm.all_gather_bytes(serialize(values))) {
    auto part = deserialize<std::vector<T>>(bytes);
    flat.insert(flat.end(), std::make_move_iterator(part.begin()),
                std::make_move_iterator(part.end()));
  }
  return flat;
}

// Process `from_process`'s value on every rank.
template <class T>
T broadcast_object(Communicator& comm, const T& value, int from_process = 0) {
  if (from_process < 0 || from_process >= comm.world_size()) {
    throw Error("broadcast_object from process " + std::to_string(from_process) +
                ", but the job has processes 0.." + std::to_string(comm.world_size() - 1));
  }
  // All ranks gather bytes so that receivers need not know the length; the
  // objects this is used for (configs, seeds, small lists) are small.
  auto everyone =
      comm.all_gather_bytes(comm.rank() == from_process ? serialize(value) : std::string());
  return deserialize<T>(everyone[from_process]);
}

// The [begin, end) range of `length` items that `rank` of `world_size` gets.
// Without padding the first length % world_size ranks get one extra. With
// apply_padding rank r gets the block [r*c, (r+1)*c) with c = ceil(length /
// world_size), so `end` may pass `length` (the caller repeats the last item)
// and concatenating every rank's share, truncated to `length`, restores the
// input.
struct ProcessSlice {
  size_t begin = 0;
  size_t end = 0;
};
ProcessSlice slice_for_process(size_t length, int rank, int world_size, bool apply_padding);

// This rank's share of `items` (Accelerate's split_between_processes). With
// apply_padding every rank gets the same count, padded with the last item,
// so that gathering the results and truncating to items.size() restores them.
template <class T>
std::vector<T> split_between_processes(const Communicator& comm, const std::vector<T>& items,
                                       bool apply_padding = false) {
  auto slice = slice_for_process(items.size(), comm.rank(), comm.world_size(), apply_padding);
  std::vector<T> mine;
  for (size_t i = slice.begin; i < slice.end; ++i) {
    mine.push_back(items[std::min(i, items.size() - 1)]);
  }
  return mine;
}

// The same for the rows (dim 0) of a tensor.
at::Tensor split_between_processes(const Communicator& comm, const at::Tensor& items,
                                   bool apply_padding = false);

}  // namespace accelerate
