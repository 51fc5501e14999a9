// gpt_profile: where the time of examples/gpt's training step goes.
//
// accelerate::Trainer::train()'s loop for the GPT example (trainer.h), call
// for call: the same Accelerator options (TrainerLoop::accelerator_options),
// model, seed, shuffled DataLoader, optimizer (make_trainer_optimizer: the
// default optim's FusedAdamW over TrainerLoop::adamw_groups), clipping,
// cosine schedule and the per-step loss mean over processes that
// logging_steps 1 costs, with a clock around each phase. Its phases line up
// with bench/gpt/gpt_twin.py's, so the two explain the tokens/s gap that
// bench/gpt/run_gpt_bench.sh reports (docs/gpt-performance.md).
//
//   accelerate launch --cpu --num_processes 2 gpt_profile --train T.tokens [--bf16]
//
// Prints, on the main process, one line per step and then
//   result side=cpp processes=N precision=fp32 tokens_per_s=... data_ms=...
//     forward_ms=... backward_ms=... clip_ms=... optimizer_ms=... log_ms=...
//     comm_ms=... exposed_ms=...
// (means per step after --skip). data: the loader's next batch; forward:
// the loss; backward: accelerator.backward (gradient sync included);
// clip: clip_grad_norm_; optimizer: AdamW, the schedule and zero_grad; log:
// the loss as a double, averaged over processes; comm/exposed: the gradient
// reducer's all-reduce time in flight and the part backward waited for (0
// on one process).
//
// --trace FILE writes LibTorch's profiler trace of step --skip + 1 (Chrome
// trace JSON; the main process), to compare op by op with the twin's
// --trace.
#include <accelerate/accelerate.h>
#include <accelerate/detail/trainer_optimizer.h>
#include <accelerate/trainer/trainer.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "presets.h"
#include "token_data.h"

namespace {

struct Settings {
  std::string train, preset = "small", trace;
  int64_t steps = 30, skip = 5, batch = 16, warmup = 10;
  double learning_rate = 1e-3;
  bool bf16 = false;
  uint64_t seed = 42;
};

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "gpt_profile: error: " << problem
            << "\nusage: gpt_profile --train FILE [--preset small|tiny] [--steps 30] [--skip 5]"
               " [--batch_size 16] [--warmup_steps 10] [--learning_rate 1e-3] [--bf16]"
               " [--seed 42] [--trace FILE]\n";
  std::exit(2);
}

Settings parse(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--bf16") {
      s.bf16 = true;
      continue;
    }
    if (i + 1 >= argc) usage(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--train")
      s.train = value;
    else if (flag == "--preset")
      s.preset = value;
    else if (flag == "--trace")
      s.trace = value;
    else if (flag == "--steps")
      s.steps = std::stoll(value);
    else if (flag == "--skip")
      s.skip = std::stoll(value);
    else if (flag == "--batch_size")
      s.batch = std::stoll(value);
    else if (flag == "--warmup_steps")
      s.warmup = std::stoll(value);
    else if (flag == "--learning_rate")
      s.learning_rate = std::stod(value);
    else if (flag == "--seed")
      s.seed = std::stoull(value);
    else
      usage("unknown flag " + flag);
  }
  if (s.train.empty()) usage("--train is required");
  if (s.steps < 1 || s.skip < 0 || s.skip >= s.steps || s.batch < 1)
    usage("bad --steps/--skip/--batch_size");
  return s;
}

using Clock = std::chrono::steady_clock;
double ms(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

int run(const Settings& s) {
  const auto args = accelerate::TrainingArguments()
                        .per_device_train_batch_size(s.batch)
                        .learning_rate(s.learning_rate)
                        .weight_decay(0.1)
                        .max_grad_norm(1.0)
                        .max_steps(s.steps)
                        .warmup_steps(s.warmup)
                        .lr_scheduler_type(accelerate::SchedulerType::kCosine)
                        .seed(s.seed)
                        .bf16(s.bf16)
                        .output_dir("/tmp/gpt_profile_unused");
  const auto file = gpt::TokenFile::open(s.train);
  auto config = gpt::preset_config(s.preset, file->vocab_size());
  accelerate::set_seed(s.seed);  // as examples/gpt: the initial weights
  gpt::Gpt model(config);
  accelerate::Accelerator accelerator(accelerate::TrainerLoop::accelerator_options(args, {}));
  accelerate::set_seed(s.seed);
  accelerate::DataLoader loader(
      gpt::TokenChunks(file, config.n_positions),
      accelerate::DataLoaderOptions(static_cast<size_t>(s.batch)).shuffle(true).seed(s.seed));
  // The Trainer's optimizer for its default optim (FusedAdamW).
  accelerate::detail::TrainerOptimizer made =
      accelerate::detail::make_trainer_optimizer(*model, args);
  torch::optim::Optimizer& optimizer = *made.optimizer;
  accelerator.prepare(model, *made.prepared, loader);
  accelerate::Scheduler<accelerate::WarmupSchedule> scheduler(
      optimizer, accelerate::SchedulerType::kCosine, s.warmup, s.steps);
  accelerator.prepare(scheduler);

  const bool main = accelerator.is_main_process();
  const int world = accelerator.num_processes();
  if (main) {
    std::cout << "gpt_profile: " << world << " process(es), " << torch::get_num_threads()
              << " thread(s) per process, " << (s.bf16 ? "bf16" : "fp32") << ", "
              << gpt::parameter_count(model) << " parameters" << std::endl;
  }
  model->train();
  const auto parameters = model->parameters();
  double totals[6] = {0, 0, 0, 0, 0, 0}, timed_seconds = 0;
  // The gradient reducer's statistics (several processes): communication in
  // flight and the part backward waited for, per step.
  const accelerate::GradientReducer* reducer =
      accelerator.reducers().empty() ? nullptr : accelerator.reducers().front();
  double comm_ms = 0, exposed_ms = 0;
  std::unique_ptr<torch::autograd::profiler::RecordProfile> trace;
  int64_t step = 0;
  auto last = Clock::now();
  auto t0 = last;
  for (auto it = loader.begin(); it != loader.end() && step < s.steps; t0 = Clock::now(), ++it) {
    if (step == s.skip && main && !s.trace.empty()) {
      trace = std::make_unique<torch::autograd::profiler::RecordProfile>(s.trace);
    }
    auto& batch = *it;
    const auto t1 = Clock::now();
    auto micro_step = accelerator.accumulate();
    at::Tensor loss = model->loss_on_shifted_labels(batch.data, batch.target);
    const auto t2 = Clock::now();
    accelerator.backward(loss);
    const auto t3 = Clock::now();
    const double norm = accelerator.clip_grad_norm_(parameters, args.max_grad_norm());
    const auto t4 = Clock::now();
    optimizer.step();
    scheduler.step();
    made.zero_grad();
    const auto t5 = Clock::now();
    const double local = loss.detach().to(at::kDouble).item<double>();
    const double mean =
        accelerator.reduce(at::full({1}, local, at::kDouble)).item<double>() / world;
    const auto t6 = Clock::now();
    trace.reset();
    ++step;
    const double phase[6] = {ms(t0, t1), ms(t1, t2), ms(t2, t3),
                             ms(t3, t4), ms(t4, t5), ms(t5, t6)};
    const double seconds = std::chrono::duration<double>(t6 - last).count();
    last = t6;
    if (step > s.skip) {
      for (int i = 0; i < 6; ++i) totals[i] += phase[i];
      timed_seconds += seconds;
      if (reducer != nullptr) {
        comm_ms += reducer->last_step_stats().communication_seconds * 1e3;
        exposed_ms += reducer->last_step_stats().exposed_wait_seconds * 1e3;
      }
    }
    if (main) {
      std::printf(
          "step %lld: loss %.6f, grad_norm %.4f, %.3f s (data %.1f, forward %.1f, "
          "backward %.1f, clip %.1f, optimizer %.1f, log %.1f ms)\n",
          static_cast<long long>(step), mean, norm, seconds, phase[0], phase[1], phase[2], phase[3],
          phase[4], phase[5]);
      std::fflush(stdout);
    }
  }
  const double timed = static_cast<double>(step - s.skip);
  if (main) {
    std::printf(
        "result side=cpp processes=%d precision=%s tokens_per_s=%.2f timed_steps=%lld "
        "data_ms=%.1f forward_ms=%.1f backward_ms=%.1f clip_ms=%.1f optimizer_ms=%.1f "
        "log_ms=%.1f comm_ms=%.1f exposed_ms=%.1f\n",
        world, s.bf16 ? "bf16" : "fp32",
        timed * static_cast<double>(s.batch * world * config.n_positions) / timed_seconds,
        static_cast<long long>(step - s.skip), totals[0] / timed, totals[1] / timed,
        totals[2] / timed, totals[3] / timed, totals[4] / timed, totals[5] / timed, comm_ms / timed,
        exposed_ms / timed);
  }
  accelerator.wait_for_everyone();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& error) {
    std::cerr << "gpt_profile: error: " << error.what() << std::endl;
    return 1;
  }
}
