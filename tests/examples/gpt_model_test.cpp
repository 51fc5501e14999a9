// The GPT example's model (examples/gpt/gpt_model.h): sizes of the presets,
// GPT-2's initial loss, causality, gradient checkpointing with bitwise equal
// gradients, save/load in Hugging Face's GPT-2 layout, the same logits from
// an independent Python GPT-2 forward over those files, and that it learns.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "accelerate/errors.h"
#include "accelerate/safetensors.h"
#include "gpt_model.h"
#include "support/process_runner.h"
#include "support/temp_dir.h"

namespace gpt_model_test {

using gpt::Gpt;
using gpt::GptConfig;

GptConfig small_config() {
  GptConfig config = GptConfig::preset("tiny", 512);
  config.n_positions = 32, config.n_embd = 32, config.n_layer = 2, config.n_head = 4;
  return config;
}

using accelerate::testing::TempDir;

TEST(GptModel, PresetSizes) {
  EXPECT_NEAR(gpt::parameter_count(Gpt(GptConfig::preset("tiny", 4096))), 1.3e6, 0.1e6);
  EXPECT_NEAR(gpt::parameter_count(Gpt(GptConfig::preset("small", 8192))), 14e6, 1e6);
  EXPECT_THROW(GptConfig::preset("huge", 10), std::invalid_argument);
  GptConfig odd = small_config();
  odd.n_head = 5;
  EXPECT_THROW(Gpt{odd}, std::invalid_argument);
}

TEST(GptModel, StartsNearTheUniformLossAndShapesAreRight) {
  torch::manual_seed(0);
  Gpt model(small_config());
  auto tokens = torch::randint(512, {4, 32});
  EXPECT_EQ(model->forward(tokens).sizes(), (std::vector<int64_t>{4, 32, 512}));
  const double loss = model->loss(tokens, torch::randint(512, {4, 32})).item<double>();
  EXPECT_NEAR(loss, std::log(512.0), 0.1);  // GPT-2's small initial weights
  EXPECT_THROW(model->forward(torch::randint(512, {1, 33})), accelerate::Error);
}

TEST(GptModel, ATokenSeesOnlyThePast) {
  torch::manual_seed(0);
  Gpt model(small_config());
  model->eval();
  auto tokens = torch::randint(512, {1, 16});
  auto changed = tokens.clone();
  changed[0][10] = (changed[0][10].item<int64_t>() + 1) % 512;
  const auto a = model->forward(tokens), b = model->forward(changed);
  EXPECT_TRUE(torch::equal(a.slice(1, 0, 10), b.slice(1, 0, 10)));
  EXPECT_FALSE(torch::equal(a.slice(1, 10), b.slice(1, 10)));
}

TEST(GptModel, GradientCheckpointingGivesTheSameGradientsWithDropout) {
  const auto gradients = [](bool checkpointing) {
    GptConfig config = small_config();
    config.dropout = 0.1;
    config.gradient_checkpointing = checkpointing;
    torch::manual_seed(3);
    Gpt model(config);
    auto tokens = torch::randint(512, {2, 32});
    model->loss(tokens, tokens.roll(-1, 1)).backward();
    std::vector<torch::Tensor> grads;
    for (const auto& p : model->parameters()) grads.push_back(p.grad().clone());
    return grads;
  };
  const auto plain = gradients(false), checkpointed = gradients(true);
  ASSERT_EQ(plain.size(), checkpointed.size());
  for (std::size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(torch::equal(plain[i], checkpointed[i])) << "parameter " << i;
  }
}

TEST(GptModel, SavesHuggingFacesGpt2LayoutAndLoadsItBack) {
  torch::manual_seed(1);
  Gpt model(small_config());
  model->eval();
  TempDir dir;
  gpt::save_pretrained(model, dir.path());
  const auto state = accelerate::load_safetensors(dir.path() + "/model.safetensors");
  std::map<std::string, at::Tensor> by_name(state.begin(), state.end());
  ASSERT_EQ(by_name.count("transformer.h.0.attn.c_attn.weight"), 1u);
  // Conv1D orientation: [in, out].
  EXPECT_EQ(by_name["transformer.h.0.attn.c_attn.weight"].sizes(), (std::vector<int64_t>{32, 96}));
  EXPECT_EQ(by_name["transformer.h.1.mlp.c_fc.weight"].sizes(), (std::vector<int64_t>{32, 128}));
  EXPECT_EQ(by_name["transformer.wte.weight"].sizes(), (std::vector<int64_t>{512, 32}));
  EXPECT_EQ(by_name.count("transformer.ln_f.bias"), 1u);
  Gpt loaded = gpt::load_pretrained(dir.path());
  loaded->eval();
  auto tokens = torch::randint(512, {2, 20});
  EXPECT_TRUE(torch::equal(model->forward(tokens), loaded->forward(tokens)));
}

bool python_has_torch() {
  return ::access("/usr/bin/python3", X_OK) == 0 &&
         accelerate::testing::run_program({"/usr/bin/python3", "-c", "import torch"}, {},
                                          std::chrono::seconds(60))
                 .exit_code == 0;
}

TEST(GptModel, AnIndependentPythonGpt2ComputesTheSameLogits) {
  if (!python_has_torch()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  torch::manual_seed(2);
  Gpt model(small_config());
  model->eval();
  TempDir dir;
  gpt::save_pretrained(model, dir.path());
  auto tokens = torch::randint(512, {2, 24});
  accelerate::save_safetensors(dir.path() + "/io.safetensors",
                               {{"tokens", tokens}, {"logits", model->forward(tokens).detach()}});
  const auto result = accelerate::testing::run_program(
      {"/usr/bin/python3", GPT2_REFERENCE_SCRIPT, dir.path()}, {}, std::chrono::seconds(120));
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
}

TEST(GptModel, LearnsARepeatingSequence) {
  torch::manual_seed(4);
  Gpt model(small_config());
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(3e-3));
  auto tokens = torch::arange(33).remainder(7).unsqueeze(0).repeat({4, 1});
  auto inputs = tokens.slice(1, 0, 32), targets = tokens.slice(1, 1, 33);
  const double first = model->loss(inputs, targets).item<double>();
  double last = first;
  for (int step = 0; step < 60; ++step) {
    optimizer.zero_grad();
    auto loss = model->loss(inputs, targets);
    loss.backward();
    optimizer.step();
    last = loss.item<double>();
  }
  EXPECT_LT(last, 0.1 * first);
}

}  // namespace gpt_model_test
