// checkpoint_bench: Accelerator::save_state / load_state throughput against
// raw sequential write and read of the same number of bytes on the same disk
// (goal: at least 80% of raw).
//
//   checkpoint_bench [--mb 128] [--full] [--dir /tmp] [--no_sync] [--repeats 3]
//
// The state is a stack of Linear(2048, 2048) layers plus Adam's two moments
// (after one step), about --mb megabytes in all; --full makes it ~1 GB (run
// it rarely: it writes a gigabyte per repeat). With sync (the default, as
// CheckpointOptions::sync_to_disk), both save_state and the raw write fsync
// their files; --no_sync compares page-cache writes. As root, dirty pages are
// written back and the page cache emptied before every timed phase, so
// reads come from the disk and no phase pays for another's writeback.
// Prints the best of --repeats for each, and the ratios side by side.
#include <fcntl.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"

namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

uint64_t folder_bytes(const fs::path& folder) {
  uint64_t total = 0;
  for (const auto& entry : fs::recursive_directory_iterator(folder)) {
    if (entry.is_regular_file()) total += entry.file_size();
  }
  return total;
}

constexpr size_t kChunk = 16u << 20;

// Sequential write of `bytes` from memory, as a lower bound on what any
// format could take.
double raw_write(const std::string& path, const std::vector<char>& buffer, bool sync) {
  const auto start = std::chrono::steady_clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + path);
  for (size_t offset = 0; offset < buffer.size();) {
    const size_t n = std::min(kChunk, buffer.size() - offset);
    const ssize_t written = ::write(fd, buffer.data() + offset, n);
    if (written <= 0) throw std::runtime_error("write failed on " + path);
    offset += static_cast<size_t>(written);
  }
  if (sync) ::fsync(fd);
  ::close(fd);
  return seconds_since(start);
}

// Reads into `buffer` (already allocated and touched): the pure cost of
// moving the bytes, the strictest baseline.
double raw_read(const std::string& path, std::vector<char>& buffer) {
  const auto start = std::chrono::steady_clock::now();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path);
  for (size_t offset = 0; offset < buffer.size();) {
    const ssize_t got =
        ::read(fd, buffer.data() + offset, std::min(kChunk, buffer.size() - offset));
    if (got <= 0) throw std::runtime_error("read failed on " + path);
    offset += static_cast<size_t>(got);
  }
  ::close(fd);
  return seconds_since(start);
}

// Writes back dirty pages and empties the page cache (root only), so every
// timed phase starts from the same state: without it, one phase's writeback
// lands in the next one's time and ratios swing several-fold between runs.
bool settle_page_cache() {
  ::sync();
  const int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, "3", 1) == 1;
  ::close(fd);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  double megabytes = 128;
  std::string dir = "/tmp";
  bool sync = true;
  int repeats = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--mb" && i + 1 < argc)
      megabytes = std::atof(argv[++i]);
    else if (arg == "--full")
      megabytes = 1024, repeats = 1;
    else if (arg == "--dir" && i + 1 < argc)
      dir = argv[++i];
    else if (arg == "--no_sync")
      sync = false;
    else if (arg == "--repeats" && i + 1 < argc)
      repeats = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr,
                   "usage: checkpoint_bench [--mb N] [--full] [--dir DIR] [--no_sync] "
                   "[--repeats N]\nunknown argument: %s\n",
                   arg.c_str());
      return 2;
    }
  }
  const fs::path work = fs::path(dir) / ("checkpoint_bench_" + std::to_string(::getpid()));
  fs::create_directories(work);

  // Parameters + two Adam moments: 3 x 16 MiB per layer.
  const int64_t width = 2048;
  const double layer_mb = 3.0 * width * width * 4 / (1 << 20);
  const int layers = std::max(1, static_cast<int>(megabytes / layer_mb + 0.5));
  torch::nn::Sequential model;
  for (int i = 0; i < layers; ++i) model->push_back(torch::nn::Linear(width, width));
  accelerate::Optimizer<torch::optim::Adam> optimizer(model->parameters(),
                                                      torch::optim::AdamOptions(1e-3));
  for (auto& p : model->parameters()) p.mutable_grad() = torch::ones_like(p);
  optimizer.step();  // creates the moments

  // Where save_state's time goes: writing the files, syncing them, renaming.
  auto stage_start = std::chrono::steady_clock::now();
  double write_s = 0, sync_s = 0, rename_s = 0;
  accelerate::AcceleratorOptions options;
  options.checkpoint_options(accelerate::CheckpointOptions().sync_to_disk(sync).stage_observer(
      [&](accelerate::CheckpointStage stage, const std::string&) {
        const double elapsed = seconds_since(stage_start);
        if (stage == accelerate::CheckpointStage::kFilesWritten) write_s = elapsed;
        if (stage == accelerate::CheckpointStage::kMetadataWritten) sync_s = elapsed - write_s;
        if (stage == accelerate::CheckpointStage::kRenamed) rename_s = elapsed - write_s - sync_s;
      }));
  accelerate::Accelerator accelerator(options);
  accelerator.prepare(model, optimizer);

  const std::string checkpoint = (work / "ckpt").string();
  double best_save = 1e30, best_load = 1e30, best_write = 1e30, best_read = 1e30;
  double best_parts[3] = {0, 0, 0};
  uint64_t bytes = 0;
  std::vector<char> buffer;
  bool settled = true;
  auto settle = [&] { settled = settle_page_cache() && settled; };
  for (int r = 0; r < repeats; ++r) {
    settle();
    auto start = std::chrono::steady_clock::now();
    stage_start = start;
    accelerator.save_state(checkpoint);
    const double save_s = seconds_since(start);
    if (save_s < best_save) {
      best_save = save_s;
      best_parts[0] = write_s, best_parts[1] = sync_s, best_parts[2] = rename_s;
    }
    bytes = folder_bytes(checkpoint);
    settle();
    start = std::chrono::steady_clock::now();
    accelerator.load_state(checkpoint);
    best_load = std::min(best_load, seconds_since(start));

    if (buffer.size() != bytes) buffer.assign(bytes, 1);
    const std::string raw = (work / "raw.bin").string();
    settle();
    best_write = std::min(best_write, raw_write(raw, buffer, sync));
    settle();
    best_read = std::min(best_read, raw_read(raw, buffer));
  }
  fs::remove_all(work);

  const double mb = static_cast<double>(bytes) / 1e6;
  std::printf(
      "checkpoint_bench: %d x Linear(%lld, %lld) + Adam, %.0f MB on %s, fsync %s, best of %d\n",
      layers, static_cast<long long>(width), static_cast<long long>(width), mb, dir.c_str(),
      sync ? "on" : "off", repeats);
  std::printf("%-12s %9s %10s %12s %8s\n", "", "seconds", "MB/s", "raw MB/s", "ratio");
  std::printf("%-12s %9.3f %10.0f %12.0f %7.0f%%\n", "save_state", best_save, mb / best_save,
              mb / best_write, 100.0 * best_write / best_save);
  std::printf("%-12s %9.3f %10.0f %12.0f %7.0f%%\n", "load_state", best_load, mb / best_load,
              mb / best_read, 100.0 * best_read / best_load);
  std::printf("save_state parts: write %.3f s, sync %.3f s, rename %.3f s\n", best_parts[0],
              best_parts[1], best_parts[2]);
  std::printf("page cache %s before each timed phase%s\n", settled ? "emptied" : "NOT emptied",
              settled ? " (reads come from the disk)" : " (needs root): ratios are noisy");
  return 0;
}
