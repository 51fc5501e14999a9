// Settings of data loading: DataLoaderOptions are what a plain PyTorch
// DataLoader takes (per loader, chosen by the user); DataLoaderConfiguration is
// Accelerate's dataloader_config (per Accelerator, applied by prepare() to
// every loader it prepares). LibTorch-free, so option structs elsewhere can
// hold them cheaply.
//
//   accelerate::DataLoaderOptions(64).shuffle(true).num_workers(2)
//   accelerate::DataLoaderConfiguration().split_batches(true).data_seed(7)
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "accelerate/common/arg.h"

namespace accelerate {

struct DataLoaderOptions {
 public:
  // The batch size of one process (of all processes together when the loader
  // is prepared with split_batches).
  explicit DataLoaderOptions(size_t batch_size = 1) : batch_size_(batch_size) {}

  ACCELERATE_ARG(size_t, batch_size);
  // A new permutation every epoch, drawn from a generator seeded with
  // seed + epoch: the same on every process, reproducible.
  ACCELERATE_ARG(bool, shuffle) = false;
  // Drop the last, incomplete global batch instead of yielding it.
  ACCELERATE_ARG(bool, drop_last) = false;
  // Background threads that load and collate batches (0: in the iterating
  // thread). Batches arrive in the same order whatever the count.
  ACCELERATE_ARG(size_t, num_workers) = 0;
  // Batches each worker may load ahead (bounded prefetch queue of
  // num_workers * prefetch_factor batches).
  ACCELERATE_ARG(size_t, prefetch_factor) = 2;
  // Collated batches are placed in page-locked memory on machines with CUDA,
  // so the copy to the GPU can overlap compute; a no-op without CUDA.
  ACCELERATE_ARG(bool, pin_memory) = false;
  // How long the loop may wait for a batch from the workers before the
  // loader throws accelerate::Error naming the timeout; 0 waits for ever.
  // Applies with num_workers > 0, as in PyTorch and LibTorch. The message is
  // printed on stderr at the timeout; the exception reaches the loop once the
  // workers have stopped, i.e. after a stuck dataset call returns.
  ACCELERATE_ARG(std::chrono::milliseconds, timeout) = std::chrono::milliseconds(0);
  // Shuffle seed. Unset: one value drawn from LibTorch's default CPU generator
  // when the loader is built (so torch::manual_seed makes it reproducible),
  // then made identical on every process when the loader is prepared.
  ACCELERATE_ARG(std::optional<uint64_t>, seed);
};

// Accelerate's DataLoaderConfiguration.
struct DataLoaderConfiguration {
  // batch_size is the global batch, split between the processes (it must be
  // divisible by their number). Off: batch_size is per process.
  ACCELERATE_ARG(bool, split_batches) = false;
  // Process 0 reads every global batch and sends each process its part; the
  // others never touch the dataset. Unset: on for iterable datasets, off for
  // map-style ones (Accelerate's default).
  ACCELERATE_ARG(std::optional<bool>, dispatch_batches);
  // Fill the last global batch up with samples from the start of the epoch
  // so every process gets the same number of full batches.
  ACCELERATE_ARG(bool, even_batches) = true;
  // Accepted for compatibility. Shuffled orders are always a function of
  // (seed, epoch), which is what Accelerate's seedable sampler gives and what
  // resuming from a checkpoint needs; `false` does not bring back the
  // generator-state synchronisation it replaces.
  ACCELERATE_ARG(bool, use_seedable_sampler) = true;
  // Shuffle seed for every prepared loader (overrides their own).
  ACCELERATE_ARG(std::optional<uint64_t>, data_seed);
};

}  // namespace accelerate
