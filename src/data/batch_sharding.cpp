#include "accelerate/data/batch_sharding.h"

#include <algorithm>
#include <string>

#include "accelerate/common/errors.h"

namespace accelerate {

void BatchSharding::validate() const {
  if (batch_size() == 0) throw ConfigError("batch_size must be at least 1");
  if (num_processes() == 0) throw ConfigError("num_processes must be at least 1");
  if (process_index() >= num_processes()) {
    throw ConfigError("process_index " + std::to_string(process_index()) + " is out of range for " +
                      std::to_string(num_processes()) + " processes");
  }
  if (split_batches() && batch_size() % num_processes() != 0) {
    throw ConfigError("split_batches: batch_size " + std::to_string(batch_size()) +
                      " cannot be split evenly over " + std::to_string(num_processes()) +
                      " processes; use a multiple of " + std::to_string(num_processes()));
  }
}

size_t BatchSharding::process_batch_size() const {
  return split_batches() ? batch_size() / num_processes() : batch_size();
}

size_t BatchSharding::global_batch_size() const {
  return split_batches() ? batch_size() : batch_size() * num_processes();
}

BatchSharding BatchSharding::for_process(size_t index) const {
  BatchSharding other = *this;
  other.process_index(index);
  return other;
}

size_t global_step_count(size_t length, const BatchSharding& sharding) {
  sharding.validate();
  const size_t global = sharding.global_batch_size();
  return sharding.drop_last() ? length / global : (length + global - 1) / global;
}

std::vector<size_t> positions_in_step(size_t step, size_t filled, size_t start_count,
                                      const BatchSharding& sharding) {
  sharding.validate();
  const size_t global = sharding.global_batch_size();
  if (filled == 0 || filled > global) return {};
  const size_t begin = sharding.process_index() * sharding.process_batch_size();
  size_t end = begin + sharding.process_batch_size();
  const bool partial = filled < global;
  if (partial && sharding.drop_last()) return {};
  const bool pad = partial && sharding.pads_last_step();
  if (partial && !pad) end = std::min(end, filled);
  if (begin >= end) return {};
  if (pad && start_count == 0) throw Error("positions_in_step: padding needs start_count > 0");
  std::vector<size_t> positions;
  positions.reserve(end - begin);
  for (size_t slot = begin; slot < end; ++slot) {
    // Padding slot k of the step takes the k-th sample of the epoch, cycling
    // when the epoch is shorter than one step (Accelerate's degenerate case).
    positions.push_back(slot < filled ? step * global + slot : (slot - filled) % start_count);
  }
  return positions;
}

namespace {

size_t filled_in_step(size_t step, size_t length, size_t global) {
  return std::min(global, length - step * global);
}

}  // namespace

std::vector<std::vector<size_t>> shard_batches(const std::vector<size_t>& order,
                                               const BatchSharding& sharding) {
  const size_t length = order.size();
  const size_t global = sharding.global_batch_size();
  const size_t start_count = std::min(length, global);
  const size_t steps = global_step_count(length, sharding);
  std::vector<std::vector<size_t>> batches;
  batches.reserve(steps);
  for (size_t step = 0; step < steps; ++step) {
    auto positions =
        positions_in_step(step, filled_in_step(step, length, global), start_count, sharding);
    if (positions.empty()) continue;  // only ever the last step
    std::vector<size_t> batch;
    batch.reserve(positions.size());
    for (size_t position : positions) batch.push_back(order[position]);
    batches.push_back(std::move(batch));
  }
  return batches;
}

size_t sharded_batch_count(size_t length, const BatchSharding& sharding) {
  const size_t steps = global_step_count(length, sharding);
  if (steps == 0) return 0;
  const size_t global = sharding.global_batch_size();
  const size_t last = steps - 1;
  const bool takes_part_of_last = !positions_in_step(last, filled_in_step(last, length, global),
                                                     std::min(length, global), sharding)
                                       .empty();
  return last + (takes_part_of_last ? 1 : 0);
}

size_t padded_last_step_samples(size_t length, const BatchSharding& sharding) {
  sharding.validate();
  const size_t partial = length % sharding.global_batch_size();
  return sharding.pads_last_step() ? partial : 0;
}

}  // namespace accelerate
