// The files of a checkpoint that are torch::serialize archives (optimizer,
// scheduler, scaler, random states, registered objects): writing and reading
// them with one-line errors that name the file, and the random-state items.
// Internal to the library.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "checkpoint/checkpoint_files.h"

namespace torch::serialize {
class InputArchive;
class OutputArchive;
}  // namespace torch::serialize
namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace accelerate {
class Communicator;
}  // namespace accelerate

namespace accelerate::checkpoint {

// Fills a fresh archive with `fill` and writes it to `path`.
void save_archive(const std::string& path,
                  const std::function<void(torch::serialize::OutputArchive&)>& fill);
// Reads `path` and hands it to `use`. A missing file, an unreadable one or
// an error inside `use` throws accelerate::Error naming `path`.
void load_archive(const std::string& path,
                  const std::function<void(torch::serialize::InputArchive&)>& use);

// Optimizer::load, plus the param groups' options (learning rates...):
// LibTorch's load restores only the per-parameter state, though save writes
// both.
void load_optimizer(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive);

// Asks the kernel to start writing `path` to disk now (no waiting), so the
// fsync before the checkpoint is renamed into place finds less left to do
// while later files are still being serialised. Best effort.
void start_writeback(const std::string& path);

// Every process's `local_error` (empty: none) to all: throws the same Error
// on every process when any failed ("<what> failed on rank r: ...").
void agree(Communicator& comm, const std::string& local_error, const std::string& what);

void write_int(torch::serialize::OutputArchive& archive, const std::string& key, int64_t value);
// Throws Error naming `key` when it is missing or not an integer.
int64_t read_int(torch::serialize::InputArchive& archive, const std::string& key);
// The same for a string entry.
std::string read_string(torch::serialize::InputArchive& archive, const std::string& key);
// The same for a floating-point entry.
double read_double(torch::serialize::InputArchive& archive, const std::string& key);

// The CPU generator's state and, when CUDA is available, every CUDA
// generator's ("cpu_rng", "cuda_rng_{i}", "cuda_device_count").
void save_rng_states(torch::serialize::OutputArchive& archive);
// Restores them; a checkpoint saved with a different number of CUDA devices
// restores the CPU generator and the devices both have.
void load_rng_states(torch::serialize::InputArchive& archive);

}  // namespace accelerate::checkpoint
