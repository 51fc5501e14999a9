// The GPT example's sampling (examples/gpt/generate.h) and presets
// (presets.h): greedy equals an independent argmax, seeds, top_k, a learned
// pattern, the global RNG and the training mode left alone, bad arguments;
// the presets' sizes and that the example's model learns from windows and
// their next tokens.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <set>
#include <stdexcept>
#include <vector>

#include "generate.h"
#include "presets.h"

namespace gpt_generate_test {

accelerate::models::GPT2Config generation_config() {
  accelerate::models::GPT2Config config = gpt::preset_config("tiny", 64);
  config.n_positions = 32, config.n_embd = 32, config.n_layer = 2, config.n_head = 4;
  return config;
}

std::vector<int32_t> random_prompt(int64_t length, int64_t vocab) {
  const auto t = torch::randint(vocab, {length}, torch::kInt);
  return {t.data_ptr<int32_t>(), t.data_ptr<int32_t>() + length};
}

// The last position's logits for the last n_positions tokens.
torch::Tensor next_logits(gpt::Gpt& model, const std::vector<int32_t>& tokens) {
  torch::NoGradGuard no_grad;
  const size_t context = static_cast<size_t>(model->config().n_positions);
  const size_t start = tokens.size() > context ? tokens.size() - context : 0;
  std::vector<int64_t> window(tokens.begin() + start, tokens.end());
  return model->forward(torch::tensor(window).unsqueeze(0))[0][-1].contiguous();
}

TEST(Generate, GreedyIsTheArgmaxAtEveryStepAndIgnoresTheSeed) {
  torch::manual_seed(5);
  gpt::Gpt model(generation_config());
  const auto prompt = random_prompt(28, 64);  // grows past n_positions: the window slides
  const auto greedy = gpt::generate(model, prompt, 12, 0.0, 0, 1);
  EXPECT_EQ(gpt::generate(model, prompt, 12, 0.0, 0, 2), greedy);
  EXPECT_EQ(gpt::generate(model, prompt, 12, 0.0, 50, 3), greedy);
  model->eval();
  std::vector<int32_t> expected = prompt;
  for (int step = 0; step < 12; ++step) {
    const auto logits = next_logits(model, expected);
    const float* values = logits.data_ptr<float>();
    int32_t best = 0;
    for (int32_t v = 1; v < 64; ++v) best = values[v] > values[best] ? v : best;
    expected.push_back(best);
  }
  EXPECT_EQ(greedy, expected);
}

TEST(Generate, TheSeedDecidesTheSample) {
  torch::manual_seed(6);
  gpt::Gpt model(generation_config());
  const std::vector<int32_t> prompt = {1, 2, 3};
  const auto a = gpt::generate(model, prompt, 20, 1.0, 0, 11);
  ASSERT_EQ(a.size(), 23u);
  EXPECT_EQ(std::vector<int32_t>(a.begin(), a.begin() + 3), prompt);
  EXPECT_EQ(gpt::generate(model, prompt, 20, 1.0, 0, 11), a);
  EXPECT_NE(gpt::generate(model, prompt, 20, 1.0, 0, 12), a);
}

TEST(Generate, TopKKeepsTheKMostLikelyTokens) {
  torch::manual_seed(7);
  gpt::Gpt model(generation_config());
  model->eval();
  const auto prompt = random_prompt(5, 64);
  const auto greedy = gpt::generate(model, prompt, 15, 0.0, 0, 0);
  EXPECT_EQ(gpt::generate(model, prompt, 15, 1.0, 1, 21), greedy);
  EXPECT_EQ(gpt::generate(model, prompt, 15, 3.0, 1, 22), greedy);
  // top_k = 3 at a high temperature: every token is among its step's top 3.
  const auto sampled = gpt::generate(model, prompt, 30, 5.0, 3, 23);
  std::set<int32_t> distinct;
  for (size_t i = prompt.size(); i < sampled.size(); ++i) {
    const auto logits =
        next_logits(model, std::vector<int32_t>(sampled.begin(), sampled.begin() + i));
    const float third = std::get<0>(logits.topk(3))[2].item<float>();
    EXPECT_GE(logits[sampled[i]].item<float>(), third) << "step " << i;
    distinct.insert(sampled[i]);
  }
  EXPECT_GT(distinct.size(), 3u);  // not greedy in disguise
}

TEST(Generate, ATrainedModelContinuesItsPattern) {
  torch::manual_seed(8);
  gpt::Gpt model(generation_config());
  const std::vector<int64_t> pattern = {5, 17, 3, 42, 8, 23, 11};
  // Every phase of the pattern, so the model also learns windows that start
  // mid-pattern, as generation's sliding window does.
  auto rows = torch::empty({7, 33}, torch::kLong);
  for (int64_t r = 0; r < 7; ++r) {
    for (int64_t t = 0; t < 33; ++t) rows[r][t] = pattern[(r + t) % 7];
  }
  const auto inputs = rows.slice(1, 0, 32), targets = rows.slice(1, 1, 33);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(3e-3));
  for (int step = 0; step < 60; ++step) {
    optimizer.zero_grad();
    model->loss_on_shifted_labels(inputs, targets).backward();
    optimizer.step();
  }
  const auto generated = gpt::generate(model, {5, 17, 3}, 40, 0.0, 0, 0);
  for (size_t i = 0; i < generated.size(); ++i) {
    ASSERT_EQ(generated[i], pattern[i % 7]) << "token " << i;
  }
}

TEST(Generate, LeavesTheGlobalGeneratorAndTheTrainingModeAlone) {
  torch::manual_seed(9);
  gpt::Gpt model(generation_config());
  torch::manual_seed(123);
  const auto expected = torch::rand({6});
  torch::manual_seed(123);
  model->train();
  gpt::generate(model, {1, 2}, 10, 1.0, 0, 4);
  EXPECT_TRUE(torch::equal(torch::rand({6}), expected));
  EXPECT_TRUE(model->is_training());
  model->eval();
  gpt::generate(model, {1, 2}, 3, 1.0, 5, 4);
  EXPECT_FALSE(model->is_training());
}

TEST(Generate, RefusesBadArguments) {
  torch::manual_seed(10);
  gpt::Gpt model(generation_config());
  EXPECT_THROW(gpt::generate(model, {}, 5, 1.0, 0, 0), std::invalid_argument);
  EXPECT_THROW(gpt::generate(model, {64}, 5, 1.0, 0, 0), std::invalid_argument);
  EXPECT_THROW(gpt::generate(model, {-1}, 5, 1.0, 0, 0), std::invalid_argument);
  EXPECT_THROW(gpt::generate(model, {1}, -1, 1.0, 0, 0), std::invalid_argument);
  EXPECT_THROW(gpt::generate(model, {1}, 5, -0.5, 0, 0), std::invalid_argument);
  EXPECT_THROW(gpt::generate(model, {1}, 5, std::nan(""), 0, 0), std::invalid_argument);
  EXPECT_THROW(gpt::generate(model, {1}, 5, 1.0, -1, 0), std::invalid_argument);
  EXPECT_EQ(gpt::generate(model, {1, 2}, 0, 1.0, 0, 0), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(gpt::generate(model, {1}, 4, 1.0, 1000, 0).size(), 5u);  // top_k above the vocab
}

// ---- presets ----

TEST(GptPresets, SizesAndRefusals) {
  EXPECT_NEAR(gpt::parameter_count(gpt::Gpt(gpt::preset_config("tiny", 4096))), 1.3e6, 0.1e6);
  EXPECT_NEAR(gpt::parameter_count(gpt::Gpt(gpt::preset_config("small", 8192))), 14e6, 1e6);
  EXPECT_THROW(gpt::preset_config("huge", 10), std::invalid_argument);
  const auto dropped = gpt::preset_config("tiny", 64, 0.25);
  EXPECT_EQ(dropped.resid_pdrop, 0.25);
  EXPECT_EQ(dropped.embd_pdrop, 0.25);
  EXPECT_EQ(dropped.attn_pdrop, 0.25);
  EXPECT_EQ(gpt::preset_config("tiny", 64).attn_pdrop, 0.0);  // the example's default
}

TEST(GptPresets, LearnsARepeatingSequenceFromWindowsAndTheirNextTokens) {
  torch::manual_seed(4);
  gpt::Gpt model(generation_config());
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(3e-3));
  auto tokens = torch::arange(33).remainder(7).unsqueeze(0).repeat({4, 1});
  auto inputs = tokens.slice(1, 0, 32), targets = tokens.slice(1, 1, 33);
  const double first = model->loss_on_shifted_labels(inputs, targets).item<double>();
  EXPECT_NEAR(first, std::log(64.0), 0.1);  // GPT-2's small initial weights
  double last = first;
  for (int step = 0; step < 60; ++step) {
    optimizer.zero_grad();
    auto loss = model->loss_on_shifted_labels(inputs, targets);
    loss.backward();
    optimizer.step();
    last = loss.item<double>();
  }
  EXPECT_LT(last, 0.1 * first);
}

}  // namespace gpt_generate_test
