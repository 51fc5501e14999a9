// A small real training run for the checkpoint tests: shuffled loader,
// dropout, Adam, StepLR, gradient accumulation, save_state every few
// optimizer steps (automatic naming, total_limit). Run it plain (one
// process) or through `accelerate launch`.
//
//   checkpoint_probe PROJECT_DIR [--resume] [--stop_after STEP] [--save_every N]
//
// It prints "final digest <hex> after <n> optimizer steps" (a hash of every
// parameter's bytes) when training ends, and "resumed from <dir> at step <n>"
// after --resume. Fault injection, to test killed saves:
//   CHECKPOINT_PROBE_KILL_AT=<stage>|custom  a CheckpointStage name (staged,
//       files_written, metadata_written, renamed, pruned), or "custom" for
//       the middle of the main process's writes (a registered object's save)
//   CHECKPOINT_PROBE_KILL_RANK=<r>            the process that dies (default 0)
//   CHECKPOINT_PROBE_KILL_STEP=<n>            during the save at optimizer step n
// The chosen process SIGKILLs itself there.
#include <torch/torch.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/accelerator/random.h"

namespace {

constexpr int64_t kSamples = 128;
constexpr int kEpochs = 3;

std::string env(const char* name, const char* fallback = "") {
  const char* value = std::getenv(name);
  return value ? value : fallback;
}

// The training loop's own counter, saved through register_for_checkpointing;
// it also hosts the "custom" kill point.
struct Progress {
  int64_t optimizer_steps = 0;
  std::function<void()> on_save;
  void save(torch::serialize::OutputArchive& archive) const {
    if (on_save) on_save();
    archive.write("optimizer_steps", c10::IValue(optimizer_steps));
  }
  void load(torch::serialize::InputArchive& archive) {
    c10::IValue value;
    archive.read("optimizer_steps", value);
    optimizer_steps = value.toInt();
  }
};

uint64_t digest(const torch::nn::Module& model) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (const auto& parameter : model.parameters()) {
    auto bytes = parameter.detach().contiguous();
    const auto* data = static_cast<const unsigned char*>(bytes.data_ptr());
    for (size_t i = 0; i < bytes.nbytes(); ++i) hash = (hash ^ data[i]) * 1099511628211ull;
  }
  return hash;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: checkpoint_probe PROJECT_DIR [--resume] [--stop_after STEP] "
                 "[--save_every N]\n");
    return 2;
  }
  const std::string project = argv[1];
  bool resume = false;
  int64_t stop_after = -1;
  int64_t save_every = 3;  // optimizer steps
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--resume") == 0) resume = true;
    if (std::strcmp(argv[i], "--stop_after") == 0 && i + 1 < argc)
      stop_after = std::atoll(argv[++i]);
    if (std::strcmp(argv[i], "--save_every") == 0 && i + 1 < argc)
      save_every = std::atoll(argv[++i]);
  }
  const std::string kill_at = env("CHECKPOINT_PROBE_KILL_AT");
  const int kill_rank = std::atoi(env("CHECKPOINT_PROBE_KILL_RANK", "0").c_str());
  const int64_t kill_step = std::atoll(env("CHECKPOINT_PROBE_KILL_STEP", "-1").c_str());
  Progress progress;
  int rank = 0;
  auto maybe_die = [&](const std::string& point) {
    if (point == kill_at && rank == kill_rank && progress.optimizer_steps == kill_step) {
      std::fprintf(stderr, "probe: rank %d killing itself at %s\n", rank, point.c_str());
      std::raise(SIGKILL);
    }
  };

  accelerate::AcceleratorOptions options;
  options.gradient_accumulation_steps(2);
  options.project_config(accelerate::ProjectConfiguration()
                             .project_dir(project)
                             .automatic_checkpoint_naming(true)
                             .total_limit(2));
  options.checkpoint_options(accelerate::CheckpointOptions().stage_observer(
      [&](accelerate::CheckpointStage stage, const std::string&) {
        maybe_die(accelerate::to_string(stage));
      }));
  accelerate::Accelerator accelerator(options);
  rank = accelerator.process_index();
  at::set_num_threads(1);  // bitwise reproducible
  progress.on_save = [&] { maybe_die("custom"); };

  accelerate::set_seed(7, /*device_specific=*/true, rank);
  auto data_generator = at::detail::createCPUGenerator(99);
  auto x = at::randn({kSamples, 8}, data_generator);
  auto y = x.sum(1, true).sin();
  torch::nn::Sequential model(torch::nn::Linear(8, 32), torch::nn::ReLU(), torch::nn::Dropout(0.2),
                              torch::nn::Linear(32, 1));
  accelerate::Optimizer<torch::optim::Adam> optimizer(model->parameters(),
                                                      torch::optim::AdamOptions(1e-2));
  accelerate::Scheduler<torch::optim::StepLR> scheduler(optimizer, 4, 0.7);
  accelerate::DataLoader loader(accelerate::TensorDataset(x, y),
                                accelerate::DataLoaderOptions(8).shuffle(true));
  accelerator.prepare(model, optimizer, scheduler, loader);
  accelerator.register_for_checkpointing(progress);

  if (resume) {
    const std::string from = accelerator.load_state();
    accelerator.print("resumed from ", from, " at step ", progress.optimizer_steps);
  }
  model->train();
  while (loader.epoch() < kEpochs) {
    for (auto& batch : loader) {
      auto scope = accelerator.accumulate();
      accelerator.backward(torch::mse_loss(model->forward(batch.data), batch.target));
      optimizer.step();
      scheduler.step();
      optimizer.zero_grad();
      if (!accelerator.sync_gradients()) continue;
      ++progress.optimizer_steps;
      if (progress.optimizer_steps % save_every == 0) accelerator.save_state();
      if (progress.optimizer_steps == stop_after) {
        accelerator.print("stopped after step ", stop_after);
        return 0;
      }
    }
  }
  std::printf("rank %d: final digest %016llx after %lld optimizer steps\n", rank,
              static_cast<unsigned long long>(digest(*model)),
              static_cast<long long>(progress.optimizer_steps));
  return 0;
}
