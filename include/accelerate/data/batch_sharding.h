// Batch sharding: which samples each process takes in each step of an epoch,
// with Hugging Face Accelerate's semantics (BatchSamplerShard and
// IterableDatasetShard). Pure functions of the epoch's sample order: no
// LibTorch, no process group, so every rule is unit-testable on its own.
//
// The model: an epoch is a sequence of *global steps*. A global step holds
// global_batch_size() consecutive samples of the epoch's order; process r
// takes the block [r*p, (r+1)*p) of it, where p = process_batch_size().
//   - without split_batches, batch_size is per process: p = batch_size and a
//     global step holds batch_size * num_processes samples;
//   - with split_batches, batch_size is the global batch: p = batch_size /
//     num_processes (a batch size that does not divide is a ConfigError).
// Only the last global step can be partial. What happens to it:
//   - drop_last: it is dropped (only complete steps are kept);
//   - even_batches (and more than one process): it is filled up to a full
//     step by cycling through the first samples of the epoch, so every
//     process gets the same number of full batches;
//   - otherwise: each process takes what falls into its block, possibly a
//     short batch or nothing.
// Both of Accelerate's samplers reduce to this model: sharding a map-style
// dataset batch by batch and slicing each global batch of a stream give the
// same batches, so one implementation serves both.
#pragma once

#include <cstddef>
#include <vector>

#include "accelerate/common/arg.h"

namespace accelerate {

struct BatchSharding {
  // Samples per process per step, or per global step with split_batches.
  ACCELERATE_ARG(size_t, batch_size) = 1;
  ACCELERATE_ARG(size_t, num_processes) = 1;
  ACCELERATE_ARG(size_t, process_index) = 0;
  ACCELERATE_ARG(bool, split_batches) = false;
  ACCELERATE_ARG(bool, even_batches) = true;
  ACCELERATE_ARG(bool, drop_last) = false;

 public:
  // Throws ConfigError (one line) for a zero batch size or process count, a
  // process index out of range, or split_batches with a batch size that the
  // process count does not divide.
  void validate() const;
  size_t process_batch_size() const;
  size_t global_batch_size() const;
  // Whether a partial last step is filled up with samples from the start.
  // One process never pads: there is nobody to keep even with.
  bool pads_last_step() const { return even_batches() && !drop_last() && num_processes() > 1; }
  // The same settings seen from another process.
  BatchSharding for_process(size_t index) const;
};

// Global steps in an epoch of `length` samples (a partial one counts unless
// drop_last).
size_t global_step_count(size_t length, const BatchSharding& sharding);

// Positions in the epoch's order of the samples this process takes in global
// step `step`, which holds `filled` real samples (1..global_batch_size()).
// `start_count` is min(epoch length, global_batch_size()): the samples at the
// start of the epoch that padding cycles through. Empty when this process
// gets nothing from the step (it is dropped, or short and not padded).
std::vector<size_t> positions_in_step(size_t step, size_t filled, size_t start_count,
                                      const BatchSharding& sharding);

// This process's batches for one epoch, as values of `order` (the epoch's
// sample order: dataset indices, shuffled or not).
std::vector<std::vector<size_t>> shard_batches(const std::vector<size_t>& order,
                                               const BatchSharding& sharding);

// shard_batches(order, sharding).size() for an order of `length` samples,
// without building it.
size_t sharded_batch_count(size_t length, const BatchSharding& sharding);

// Real samples in the last global step when padding filled it up (that many
// leading rows of its gathered outputs are real); 0 when the last step holds
// no padding, so there is nothing to drop — always the case with drop_last.
size_t padded_last_step_samples(size_t length, const BatchSharding& sharding);

}  // namespace accelerate
