#include "checkpoint/checkpoint_archives.h"

#include <ATen/Context.h>
#include <fcntl.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "accelerate/common/errors.h"
#include "accelerate/distributed/communicator.h"
#include "checkpoint/generator_state.h"
#include "distributed/failure_diagnosis.h"

namespace accelerate::checkpoint {
namespace {

std::vector<c10::Device> cuda_devices() {
  std::vector<c10::Device> devices;
  if (!at::hasCUDA()) return devices;
  const auto count = static_cast<int>(at::getNumGPUs());
  for (int i = 0; i < count; ++i)
    devices.emplace_back(c10::kCUDA, static_cast<c10::DeviceIndex>(i));
  return devices;
}

}  // namespace

void save_archive(const std::string& path,
                  const std::function<void(torch::serialize::OutputArchive&)>& fill) {
  try {
    torch::serialize::OutputArchive archive;
    fill(archive);
    archive.save_to(path);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& error) {
    throw Error("cannot write " + path + ": " + detail::first_line_of(error));
  }
}

void load_archive(const std::string& path,
                  const std::function<void(torch::serialize::InputArchive&)>& use) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw Error("checkpoint file " + path + " is missing");
  }
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    use(archive);
  } catch (const std::exception& error) {
    throw Error("cannot load " + path + ": " + detail::first_line_of(error));
  }
}

void load_optimizer(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive) {
  optimizer.load(archive);
  torch::serialize::InputArchive groups;
  archive.read("param_groups", groups);
  for (size_t i = 0; i < optimizer.param_groups().size(); ++i) {
    torch::serialize::InputArchive group;
    torch::serialize::InputArchive options;
    groups.read("param_groups/" + std::to_string(i), group);
    group.read("options", options);
    optimizer.param_groups()[i].options().serialize(options);
  }
}

void start_writeback(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
  ::close(fd);
}

void write_int(torch::serialize::OutputArchive& archive, const std::string& key, int64_t value) {
  archive.write(key, c10::IValue(value));
}

int64_t read_int(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue value;
  if (!archive.try_read(key, value) || !value.isInt()) {
    throw Error("entry '" + key + "' is missing or not an integer");
  }
  return value.toInt();
}

std::string read_string(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue value;
  if (!archive.try_read(key, value) || !value.isString()) {
    throw Error("entry '" + key + "' is missing or not a string");
  }
  return value.toStringRef();
}

double read_double(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue value;
  if (!archive.try_read(key, value) || !value.isDouble()) {
    throw Error("entry '" + key + "' is missing or not a number");
  }
  return value.toDouble();
}

void save_rng_states(torch::serialize::OutputArchive& archive) {
  archive.write("cpu_rng", detail::generator_state(at::detail::getDefaultCPUGenerator()));
  const auto devices = cuda_devices();
  write_int(archive, "cuda_device_count", static_cast<int64_t>(devices.size()));
  for (const auto& device : devices) {
    archive.write("cuda_rng_" + std::to_string(device.index()),
                  detail::generator_state(at::globalContext().defaultGenerator(device)));
  }
}

void load_rng_states(torch::serialize::InputArchive& archive) {
  at::Tensor cpu;
  if (!archive.try_read("cpu_rng", cpu)) throw Error("entry 'cpu_rng' is missing");
  detail::set_generator_state(at::detail::getDefaultCPUGenerator(), cpu);
  for (const auto& device : cuda_devices()) {
    at::Tensor state;
    if (archive.try_read("cuda_rng_" + std::to_string(device.index()), state)) {
      detail::set_generator_state(at::globalContext().defaultGenerator(device), state);
    }
  }
}

// Every process learns the main process's error (or every rank's), so no
// one is left waiting in a barrier for a process that gave up.
void agree(Communicator& comm, const std::string& local_error, const std::string& what) {
  const auto errors = comm.all_gather_bytes(local_error);
  for (size_t rank = 0; rank < errors.size(); ++rank) {
    if (errors[rank].empty()) continue;
    if (errors.size() == 1) throw Error(what + ": " + errors[rank]);
    throw Error(what + " failed on rank " + std::to_string(rank) + ": " + errors[rank]);
  }
}

}  // namespace accelerate::checkpoint
