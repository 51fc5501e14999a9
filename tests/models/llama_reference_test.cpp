// The Llama model against transformers (tests/models/llama_reference.py run
// under $ACCELERATE_REFERENCE_PYTHON, scripts/install-reference-python.sh):
// transformers' tiny random models load here and give transformers' logits,
// loss and gradients; what we save loads in transformers and gives ours.
// Without the interpreter every test here reports itself skipped.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/models/llama.h"
#include "accelerate/models/pretrained.h"
#include "reference_python.h"
#include "support/temp_dir.h"

namespace am = accelerate::models;
using accelerate::testing::max_abs_diff;
using accelerate::testing::TempDir;

namespace {

const std::string& reference_folder() {
  return accelerate::testing::reference_folder(LLAMA_REFERENCE_SCRIPT);
}

accelerate::testing::RunResult run_reference(const std::vector<std::string>& args) {
  return accelerate::testing::run_reference_script(LLAMA_REFERENCE_SCRIPT, args);
}

std::map<std::string, at::Tensor> reference_outputs(const std::string& variant) {
  return accelerate::testing::load_named_tensors(reference_folder() + "/" + variant +
                                                 "/reference.safetensors");
}

// Logits within 1e-5 (fp32 rounding) of transformers'.
void expect_reference_logits(const std::string& variant) {
  ASSERT_FALSE(reference_folder().empty());
  auto reference = reference_outputs(variant);
  auto model =
      am::LlamaForCausalLMImpl::from_pretrained(reference_folder() + "/" + variant + "/model");
  model->eval();
  at::NoGradGuard no_grad;
  const at::Tensor logits = model->forward(reference.at("input_ids"));
  ASSERT_EQ(logits.sizes(), reference.at("logits").sizes());
  const double diff = max_abs_diff(logits, reference.at("logits"));
  EXPECT_LE(diff, 1e-5) << variant;
  // The logits are not near zero, so the bound means something.
  EXPECT_GT(reference.at("logits").abs().max().item<double>(), 0.5) << variant;
}

// Loss and every parameter's gradient within 1e-4 relative of transformers'.
void expect_reference_gradients(const std::string& variant) {
  ASSERT_FALSE(reference_folder().empty());
  auto reference = reference_outputs(variant);
  auto model =
      am::LlamaForCausalLMImpl::from_pretrained(reference_folder() + "/" + variant + "/model");
  model->train();
  const at::Tensor loss = model->loss(reference.at("input_ids"), reference.at("labels"));
  const double expected_loss = reference.at("loss").item<double>();
  EXPECT_LE(std::abs(loss.item<double>() - expected_loss), 1e-4 * std::abs(expected_loss))
      << variant;
  loss.backward();
  size_t compared = 0;
  for (const auto& item : model->named_parameters()) {
    const auto found = reference.find("grad." + item.key());
    ASSERT_NE(found, reference.end()) << "transformers has no gradient for " << item.key();
    const at::Tensor& grad = item.value().grad();
    ASSERT_TRUE(grad.defined()) << item.key();
    const double scale = found->second.abs().max().item<double>();
    EXPECT_GT(scale, 0) << item.key();
    EXPECT_LE(max_abs_diff(grad, found->second), 1e-4 * scale) << variant << " " << item.key();
    ++compared;
  }
  size_t reference_grads = 0;
  for (const auto& [name, tensor] : reference) reference_grads += name.rfind("grad.", 0) == 0;
  EXPECT_EQ(compared, reference_grads) << variant;
}

}  // namespace

TEST(LlamaReference, LogitsEqualTransformersPlain) {
  REQUIRE_REFERENCE_PYTHON();
  expect_reference_logits("plain");
}

TEST(LlamaReference, LogitsEqualTransformersLlama3RopeTied) {
  REQUIRE_REFERENCE_PYTHON();
  expect_reference_logits("llama3_tied");
}

TEST(LlamaReference, LogitsEqualTransformersShardedWithBiases) {
  REQUIRE_REFERENCE_PYTHON();
  expect_reference_logits("sharded");
}

TEST(LlamaReference, LossAndGradientsEqualTransformersPlain) {
  REQUIRE_REFERENCE_PYTHON();
  expect_reference_gradients("plain");
}

TEST(LlamaReference, LossAndGradientsEqualTransformersLlama3RopeTied) {
  REQUIRE_REFERENCE_PYTHON();
  expect_reference_gradients("llama3_tied");
}

TEST(LlamaReference, LossAndGradientsEqualTransformersShardedWithBiases) {
  REQUIRE_REFERENCE_PYTHON();
  expect_reference_gradients("sharded");
}

TEST(LlamaReference, LogitsEqualTransformersMistralSlidingWindow) {
  REQUIRE_REFERENCE_PYTHON();
  expect_reference_logits("mistral_window");
}

TEST(LlamaReference, LogitsEqualTransformersQwen2BiasesAndLayerWindows) {
  REQUIRE_REFERENCE_PYTHON();
  expect_reference_logits("qwen2_window");
}

TEST(LlamaReference, LossAndGradientsEqualTransformersMistralSlidingWindow) {
  REQUIRE_REFERENCE_PYTHON();
  expect_reference_gradients("mistral_window");
}

TEST(LlamaReference, LossAndGradientsEqualTransformersQwen2BiasesAndLayerWindows) {
  REQUIRE_REFERENCE_PYTHON();
  expect_reference_gradients("qwen2_window");
}

// The windows are shorter than the 12-token inputs, so they change the
// logits: the comparisons above could not pass without them.
TEST(LlamaReference, TheSlidingWindowsChangeTheLogits) {
  REQUIRE_REFERENCE_PYTHON();
  ASSERT_FALSE(reference_folder().empty());
  for (const std::string variant : {"mistral_window", "qwen2_window"}) {
    const std::string folder = reference_folder() + "/" + variant + "/model";
    am::LlamaConfig config = am::read_llama_config(folder);
    ASSERT_TRUE(config.sliding_window.has_value()) << variant;
    config.sliding_window.reset();
    auto whole_past = std::make_shared<am::LlamaForCausalLMImpl>(config);
    am::load_pretrained_weights(*whole_past, folder);
    at::NoGradGuard no_grad;
    whole_past->eval();
    const at::Tensor ids = reference_outputs(variant).at("input_ids");
    EXPECT_GT(max_abs_diff(whole_past->forward(ids), reference_outputs(variant).at("logits")), 1e-3)
        << variant;
  }
}

// Our saves (after changing the weights, so transformers must read ours)
// load with transformers' from_pretrained and give our logits: one file
// untied, one file tied with llama3 rope, and shards.
TEST(LlamaReference, TransformersLoadsWhatWeSave) {
  REQUIRE_REFERENCE_PYTHON();
  ASSERT_FALSE(reference_folder().empty());
  for (const auto& [variant, shard] :
       std::vector<std::pair<std::string, std::string>>{{"plain", "5GB"},
                                                        {"llama3_tied", "5GB"},
                                                        {"sharded", "30KB"},
                                                        {"mistral_window", "5GB"},
                                                        {"qwen2_window", "30KB"}}) {
    auto model =
        am::LlamaForCausalLMImpl::from_pretrained(reference_folder() + "/" + variant + "/model");
    torch::manual_seed(7);
    {
      at::NoGradGuard no_grad;
      for (auto& p : model->parameters()) p.add_(at::randn_like(p) * 0.05);
    }
    TempDir dir;
    const auto files = model->save_pretrained(dir.file("model"), shard);
    EXPECT_EQ(files.size() > 1, shard == "30KB") << variant;
    const at::Tensor ids = reference_outputs(variant).at("input_ids");
    accelerate::save_safetensors(dir.file("ids.safetensors"), {{"input_ids", ids}});
    const auto result = run_reference(
        {"logits", dir.file("model"), dir.file("ids.safetensors"), dir.file("out.safetensors")});
    ASSERT_EQ(result.exit_code, 0) << variant << ": " << result.err;
    const at::Tensor theirs =
        accelerate::load_safetensors(dir.file("out.safetensors")).at(0).second;
    at::NoGradGuard no_grad;
    model->eval();
    const at::Tensor ours = model->forward(ids);
    EXPECT_LE(max_abs_diff(ours, theirs), 1e-5) << variant;
    EXPECT_GT(max_abs_diff(ours, reference_outputs(variant).at("logits")), 1e-2)
        << variant << ": the changed weights should change the logits";
  }
}
