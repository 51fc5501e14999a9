// Fractional logging/eval/save steps, eval_delay, save_strategy "best" and
// save_only_model against transformers' Trainer:
// tests/trainer/trainer_flow_reference.py ("features") runs each case under
// $ACCELERATE_REFERENCE_PYTHON and writes the steps at which it logged,
// evaluated and saved, then the checkpoint folders left at the end and what
// each holds (model, optimizer, scheduler, rng, state). The same settings
// run here must give the same. Metric values come from a script, so which
// evaluation is a new best does not depend on the two runs' weights.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "accelerate/trainer/trainer.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"
#include "trainer_flow_support.h"

namespace trainer_flow_test {
namespace {

// The script's categories for one of this Trainer's checkpoint files.
std::string holding_of(const std::string& name) {
  const auto starts = [&](const char* prefix) { return name.rfind(prefix, 0) == 0; };
  if (starts("model") && name.find(".safetensors") != std::string::npos) return "model";
  if (starts("optimizer")) return "optimizer";
  if (starts("scheduler")) return "scheduler";
  if (starts("random_states")) return "rng";
  if (name == "trainer_state.json") return "state";
  return "";
}

// "checkpoint-6:model,state checkpoint-12:...", as the script writes it.
std::string folders_text(const std::string& output_dir) {
  std::vector<std::pair<int64_t, std::string>> folders;
  if (!std::filesystem::exists(output_dir)) return "";  // nothing was saved
  for (const auto& entry : std::filesystem::directory_iterator(output_dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("checkpoint-", 0) != 0) continue;
    std::set<std::string> kinds;
    for (const auto& file : std::filesystem::directory_iterator(entry.path())) {
      const std::string kind = holding_of(file.path().filename().string());
      if (!kind.empty()) kinds.insert(kind);
    }
    std::string text = name + ":";
    for (const auto& kind : kinds) text += (text.back() == ':' ? "" : ",") + kind;
    folders.emplace_back(std::stoll(name.substr(11)), text);
  }
  std::sort(folders.begin(), folders.end());
  std::string text;
  for (const auto& folder : folders) text += (text.empty() ? "" : " ") + folder.second;
  return text;
}

// One case line ("case key=value ..."): the same settings, trained here on 1 rank.
FlowRun run_feature_case(const std::string& line, const std::string& dir) {
  std::map<std::string, std::string> c;
  std::istringstream fields(line);
  std::string item;
  fields >> item;  // "case"
  while (fields >> item) {
    const auto equals = item.find('=');
    c[item.substr(0, equals)] = item.substr(equals + 1);
  }
  const auto save = accelerate::parse_save_strategy(c.at("save_strategy"));
  if (!save) throw std::runtime_error("unknown save strategy " + c.at("save_strategy"));
  auto args = accelerate::TrainingArguments()
                  .output_dir(dir)
                  .per_device_train_batch_size(std::stoll(c.at("batch")))
                  .per_device_eval_batch_size(std::stoll(c.at("batch")))
                  .gradient_accumulation_steps(std::stoi(c.at("accumulation")))
                  .max_steps(std::stoll(c.at("max_steps")))
                  .num_train_epochs(std::stod(c.at("epochs")))
                  .logging_strategy(strategy(c.at("logging_strategy")))
                  .logging_steps(std::stod(c.at("logging_steps")))
                  .eval_strategy(strategy(c.at("eval_strategy")))
                  .eval_delay(std::stod(c.at("eval_delay")))
                  .save_strategy(*save)
                  .save_steps(std::stod(c.at("save_steps")))
                  .save_only_model(c.at("save_only_model") == "1")
                  .load_best_model_at_end(c.at("load_best") == "1")
                  .learning_rate(0.01)
                  .seed(1);
  if (!c.at("eval_steps").empty()) args.eval_steps(std::stod(c.at("eval_steps")));
  if (!c.at("save_total_limit").empty()) args.save_total_limit(std::stoi(c.at("save_total_limit")));
  if (!c.at("metric").empty()) args.metric_for_best_model(c.at("metric"));
  std::string metric = c.at("metric").empty() ? "score" : c.at("metric");
  if (metric.rfind("eval_", 0) == 0) metric = metric.substr(5);
  std::vector<double> scores;
  std::istringstream listed(c.at("scores"));
  for (std::string value; std::getline(listed, value, ',');) scores.push_back(std::stod(value));
  FlowRun run;
  accelerate::testing::run_rank_communicators(1, [&](std::shared_ptr<accelerate::Communicator> cm) {
    FlowNet model;
    accelerate::Trainer<FlowNet, accelerate::TensorDataset> trainer(
        model, args, flow_data(std::stoll(c.at("samples")), 1),
        [](FlowNet& m, const accelerate::Example& b) {
          const at::Tensor out = m->fc(b.data);
          return accelerate::ModelOutput(torch::mse_loss(out, b.target), out);
        },
        flow_data(8, 2), {}, cm);
    std::size_t evaluations = 0;
    trainer.compute_metrics([&](const accelerate::EvalPrediction&) {
      const double value = evaluations < scores.size() ? scores[evaluations] : 0.0;
      ++evaluations;
      return accelerate::Metrics{{metric, value}};
    });
    auto recorder = std::make_shared<FlowSteps>();
    trainer.add_callback(recorder);
    trainer.train();
    run.steps = *recorder;
  });
  run.folders = folders_text(dir);
  return run;
}

TEST(TrainerFlowFeatures, FractionsDelayBestAndWeightsOnlyAsTransformers) {
  REQUIRE_FLOW_REFERENCE();
  accelerate::testing::TempDir dir("trainer-flow-features");
  const std::string file = dir.path() + "/features.txt";
  const auto ran = run_flow_reference({"features", file});
  ASSERT_FLOW_REFERENCE_RAN(ran);
  const int cases = expect_flows_as_reference(file, dir.path(), run_feature_case);
  EXPECT_EQ(cases, 10);  // as many as the script has
}

}  // namespace
}  // namespace trainer_flow_test
