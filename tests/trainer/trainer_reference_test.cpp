// The new learning-rate schedules and Adafactor against transformers, and
// FusedAdamW against torch.optim.AdamW(fused=True)
// (tests/trainer/trainer_reference.py run under $ACCELERATE_REFERENCE_PYTHON,
// scripts/install-reference-python.sh). The script holds the cases and
// writes transformers' results; these tests replay each case here and
// compare. Without the interpreter every test reports itself skipped.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>

#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/schedule/adafactor.h"
#include "accelerate/schedule/fused_adamw.h"
#include "accelerate/schedule/lr_schedule.h"
#include "accelerate/schedule/reduce_lr_on_plateau.h"
#include "support/process_runner.h"
#include "support/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using accelerate::SchedulerType;

std::string trainer_reference_python() {
  const char* python = std::getenv("ACCELERATE_REFERENCE_PYTHON");
  return python && *python && fs::exists(python) ? python : "";
}

#define REQUIRE_TRAINER_REFERENCE()                                                          \
  if (trainer_reference_python().empty())                                                    \
  GTEST_SKIP() << "no Python reference: set ACCELERATE_REFERENCE_PYTHON to the interpreter " \
                  "scripts/install-reference-python.sh prints (scripts/test.sh does)"

// Runs the script's `command` into `out`; an empty string on success, else why not.
std::string run_trainer_reference(const std::string& command, const std::string& out) {
  const auto result = accelerate::testing::run_program(
      {trainer_reference_python(), TRAINER_REFERENCE_SCRIPT, command, out},
      {{"HF_HUB_OFFLINE", "1"}, {"CUDA_VISIBLE_DEVICES", ""}}, std::chrono::minutes(3));
  if (result.exit_code == 0) return "";
  return "trainer_reference.py " + command + " failed (" + std::to_string(result.exit_code) +
         "): " + result.err;
}

// The optimizer the script schedules: default rate 0.05, groups 0.1 and 0.01.
struct TwoGroups {
  torch::Tensor a = torch::zeros({2}, torch::requires_grad());
  torch::Tensor b = torch::zeros({2}, torch::requires_grad());
  std::unique_ptr<torch::optim::SGD> optimizer;
  TwoGroups() {
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(std::vector<torch::Tensor>{a},
                        std::make_unique<torch::optim::SGDOptions>(0.1));
    groups.emplace_back(std::vector<torch::Tensor>{b},
                        std::make_unique<torch::optim::SGDOptions>(0.01));
    optimizer = std::make_unique<torch::optim::SGD>(groups, torch::optim::SGDOptions(0.05));
  }
  double rate(std::size_t group) const {
    return optimizer->param_groups()[group].options().get_lr();
  }
};

double relative_gap(double ours, double theirs) {
  if (ours == theirs) return 0.0;
  return std::abs(ours - theirs) / std::max(std::abs(ours), std::abs(theirs));
}

// Every rate of every schedule case, at every step of its run and 5 past its
// end, within 1e-12 relative of transformers' get_scheduler.
TEST(TrainerReference, SchedulesEqualTransformersAtEveryStep) {
  REQUIRE_TRAINER_REFERENCE();
  accelerate::testing::TempDir dir("trainer-ref");
  const std::string file = dir.path() + "/schedules.txt";
  ASSERT_EQ(run_trainer_reference("schedules", file), "");
  std::ifstream in(file);
  std::string line;
  std::unique_ptr<TwoGroups> groups;
  std::unique_ptr<accelerate::WarmupSchedule> schedule;
  std::unique_ptr<accelerate::ReduceLROnPlateau> plateau;
  std::string label;
  int cases = 0, rates = 0;
  double worst = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string kind;
    fields >> kind;
    if (kind == "case") {
      std::string name, json;
      int64_t warmup = 0, training = 0;
      fields >> name >> warmup >> training;
      std::getline(fields, json);
      label = line;
      const auto type = accelerate::parse_scheduler_type(name);
      ASSERT_TRUE(type.has_value()) << name;
      groups = std::make_unique<TwoGroups>();
      schedule = std::make_unique<accelerate::WarmupSchedule>(
          *groups->optimizer, *type, warmup, training, accelerate::parse_lr_scheduler_kwargs(json));
      plateau.reset();
      ++cases;
    } else if (kind == "plateau") {
      std::string json;
      std::getline(fields, json);
      label = line;
      groups = std::make_unique<TwoGroups>();
      schedule.reset();
      plateau = std::make_unique<accelerate::ReduceLROnPlateau>(
          *groups->optimizer, accelerate::parse_lr_scheduler_kwargs(json));
      ++cases;
    } else if (kind == "rate" || kind == "metric") {
      ASSERT_TRUE(groups);
      std::string first, lr0, lr1;
      fields >> first >> lr0 >> lr1;
      if (kind == "rate" && std::stoll(first) > 0) schedule->step();
      if (kind == "metric") plateau->step(std::strtod(first.c_str(), nullptr));
      const double theirs[] = {std::strtod(lr0.c_str(), nullptr),
                               std::strtod(lr1.c_str(), nullptr)};
      for (std::size_t g = 0; g < 2; ++g) {
        const double gap = relative_gap(groups->rate(g), theirs[g]);
        worst = std::max(worst, gap);
        EXPECT_LE(gap, 1e-12) << label << " | " << kind << " " << first << " group " << g
                              << ": ours " << groups->rate(g) << ", transformers " << theirs[g];
        ++rates;
      }
    }
  }
  EXPECT_EQ(cases, 20);  // as many as the script has
  std::cout << "[ schedules ] " << cases << " cases, " << rates << " rates; largest relative gap "
            << worst << "\n";
}

// An optimizer (Adafactor, FusedAdamW) with the same parameters and
// gradients as the script's `command` wrote, after 1 step and after 10, within
// 1e-6 relative (float32 rounding) of the script's optimizer under `config`.
void expect_steps_like_reference(
    const std::string& command, const std::string& config,
    const std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>&
        make) {
  accelerate::testing::TempDir dir("trainer-ref");
  ASSERT_EQ(run_trainer_reference(command, dir.path()), "");
  std::map<std::string, at::Tensor> saved;
  for (auto& [name, tensor] :
       accelerate::load_safetensors(dir.path() + "/" + command + ".safetensors")) {
    saved[name] = tensor;
  }
  std::vector<torch::Tensor> params;
  for (int i = 0; saved.count("param." + std::to_string(i)); ++i) {
    params.push_back(saved.at("param." + std::to_string(i)).clone().set_requires_grad(true));
  }
  ASSERT_EQ(params.size(), 4u);
  const std::unique_ptr<torch::optim::Optimizer> optimizer = make(params);
  double worst = 0;
  for (int step = 0; step < 10; ++step) {
    for (std::size_t i = 0; i < params.size(); ++i) {
      params[i].mutable_grad() =
          saved.at("grad." + std::to_string(step) + "." + std::to_string(i)).clone();
    }
    optimizer->step();
    if (step != 0 && step != 9) continue;
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto& theirs =
          saved.at(config + ".after" + std::to_string(step + 1) + "." + std::to_string(i));
      const double gap =
          ((params[i].detach() - theirs).abs().max() / theirs.abs().max()).item<double>();
      worst = std::max(worst, gap);
      EXPECT_LE(gap, 1e-6) << config << " after step " << step + 1 << ", parameter " << i;
    }
  }
  std::cout << "[ " << command << " ] " << config << ": largest relative gap " << worst << "\n";
}

void expect_adafactor_like_transformers(const std::string& config,
                                        const accelerate::AdafactorOptions& options) {
  expect_steps_like_reference("adafactor", config, [&](std::vector<torch::Tensor> params) {
    return std::make_unique<accelerate::Adafactor>(std::move(params), options);
  });
}

TEST(TrainerReference, AdafactorAsTheTrainerMakesItEqualsTransformers) {
  REQUIRE_TRAINER_REFERENCE();
  expect_adafactor_like_transformers(
      "trainer",
      accelerate::AdafactorOptions(1e-2).scale_parameter(false).relative_step(false).warmup_init(
          false));
}

TEST(TrainerReference, AdafactorRelativeStepFirstMomentDecayEqualsTransformers) {
  REQUIRE_TRAINER_REFERENCE();
  expect_adafactor_like_transformers(
      "relative", accelerate::AdafactorOptions().beta1(0.9).weight_decay(0.01).clip_threshold(0.5));
}

// FusedAdamW against torch.optim.AdamW(fused=True), on 2 threads so that
// the first parameter's loop runs in ranges.
void expect_fused_adamw_like_torch(const std::string& config,
                                   const torch::optim::AdamWOptions& options) {
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  expect_steps_like_reference("adamw", config, [&](std::vector<torch::Tensor> params) {
    return std::make_unique<accelerate::FusedAdamW>(std::move(params), options);
  });
  at::set_num_threads(threads);
}

TEST(TrainerReference, FusedAdamWEqualsTorchFusedAdamW) {
  REQUIRE_TRAINER_REFERENCE();
  expect_fused_adamw_like_torch("trainer", torch::optim::AdamWOptions(5e-3).weight_decay(0.01));
  expect_fused_adamw_like_torch(
      "betas", torch::optim::AdamWOptions(0.05).betas({0.8, 0.95}).eps(1e-6).weight_decay(0.0));
}

}  // namespace
