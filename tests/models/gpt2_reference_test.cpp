// The GPT-2 models against transformers (tests/models/gpt2_reference.py run
// under $ACCELERATE_REFERENCE_PYTHON, scripts/install-reference-python.sh):
// transformers' tiny random GPT2LMHeadModels load here and give
// transformers' logits, hidden states, loss and gradients; the hub's folder
// layout loads; what we save loads in transformers and gives ours.
// Without the interpreter every test here reports itself skipped.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/models/gpt2.h"
#include "reference_python.h"
#include "support/temp_dir.h"

namespace am = accelerate::models;
using accelerate::testing::max_abs_diff;
using accelerate::testing::TempDir;

namespace {

const std::string& gpt2_reference_folder() {
  return accelerate::testing::reference_folder(GPT2_REFERENCE_SCRIPT);
}

std::map<std::string, at::Tensor> gpt2_reference_outputs(const std::string& variant) {
  return accelerate::testing::load_named_tensors(gpt2_reference_folder() + "/" + variant +
                                                 "/reference.safetensors");
}

std::string gpt2_model_folder(const std::string& variant) {
  return gpt2_reference_folder() + "/" + variant + "/model";
}

// Logits within 1e-5 (fp32 rounding) of transformers', from `folder`.
void expect_gpt2_logits(const std::string& variant, const std::string& folder) {
  ASSERT_FALSE(gpt2_reference_folder().empty());
  auto reference = gpt2_reference_outputs(variant);
  auto model = am::GPT2LMHeadModelImpl::from_pretrained(folder);
  model->eval();
  at::NoGradGuard no_grad;
  const at::Tensor logits = model->forward(reference.at("input_ids"));
  ASSERT_EQ(logits.sizes(), reference.at("logits").sizes());
  const double diff = max_abs_diff(logits, reference.at("logits"));
  EXPECT_LE(diff, 1e-5) << variant;
  // The logits are not near zero, so the bound means something.
  EXPECT_GT(reference.at("logits").abs().max().item<double>(), 0.5) << variant;
  std::cout << "[ gpt2 ] " << variant << ": logits max abs diff " << diff << " (largest "
            << reference.at("logits").abs().max().item<double>() << ")\n";
}

// Loss and every parameter's gradient within 1e-4 relative of transformers'.
void expect_gpt2_gradients(const std::string& variant) {
  ASSERT_FALSE(gpt2_reference_folder().empty());
  auto reference = gpt2_reference_outputs(variant);
  auto model = am::GPT2LMHeadModelImpl::from_pretrained(gpt2_model_folder(variant));
  model->train();  // dropout 0 in the references: train mode is deterministic
  const at::Tensor loss = model->loss(reference.at("input_ids"), reference.at("labels"));
  const double expected_loss = reference.at("loss").item<double>();
  const double loss_diff = std::abs(loss.item<double>() - expected_loss) / std::abs(expected_loss);
  EXPECT_LE(loss_diff, 1e-4) << variant;
  loss.backward();
  size_t compared = 0;
  double worst = 0;
  for (const auto& item : model->named_parameters()) {
    const auto found = reference.find("grad." + item.key());
    ASSERT_NE(found, reference.end()) << "transformers has no gradient for " << item.key();
    const at::Tensor& grad = item.value().grad();
    ASSERT_TRUE(grad.defined()) << item.key();
    ASSERT_EQ(grad.sizes(), found->second.sizes()) << item.key();
    const double scale = found->second.abs().max().item<double>();
    const double diff = max_abs_diff(grad, found->second);
    // c_attn's key bias gets no gradient in exact arithmetic (a bias on
    // every key of a query is cancelled by the softmax): both near zero.
    if (scale < 1e-6) {
      EXPECT_LE(grad.abs().max().item<double>(), 1e-6) << variant << " " << item.key();
    } else {
      EXPECT_LE(diff, 1e-4 * scale) << variant << " " << item.key();
      worst = std::max(worst, diff / scale);
    }
    ++compared;
  }
  size_t reference_grads = 0;
  for (const auto& [name, tensor] : reference) reference_grads += name.rfind("grad.", 0) == 0;
  EXPECT_EQ(compared, reference_grads) << variant;
  std::cout << "[ gpt2 ] " << variant << ": loss relative diff " << loss_diff
            << ", gradients worst max diff / max abs " << worst << " over " << compared
            << " tensors\n";
}

}  // namespace

TEST(GPT2Reference, LogitsEqualTransformersPlain) {
  REQUIRE_REFERENCE_PYTHON();
  expect_gpt2_logits("plain", gpt2_model_folder("plain"));
}

TEST(GPT2Reference, LogitsEqualTransformersUntiedScaled) {
  REQUIRE_REFERENCE_PYTHON();
  expect_gpt2_logits("untied_scaled", gpt2_model_folder("untied_scaled"));
}

TEST(GPT2Reference, LogitsEqualTransformersShardedUnscaled) {
  REQUIRE_REFERENCE_PYTHON();
  expect_gpt2_logits("sharded", gpt2_model_folder("sharded"));
}

// The hub's layout: no "transformer." prefix, attn.bias and attn.masked_bias
// buffers beside the weights.
TEST(GPT2Reference, HubLayoutLoadsAndGivesTheSameLogits) {
  REQUIRE_REFERENCE_PYTHON();
  expect_gpt2_logits("plain", gpt2_reference_folder() + "/hub_layout");
}

// GPT2Model from a GPT2LMHeadModel's folder (prefix stripped, no head).
TEST(GPT2Reference, BaseModelHiddenStatesEqualTransformers) {
  REQUIRE_REFERENCE_PYTHON();
  ASSERT_FALSE(gpt2_reference_folder().empty());
  for (const std::string variant : {"plain", "untied_scaled"}) {
    auto reference = gpt2_reference_outputs(variant);
    auto model = am::GPT2ModelImpl::from_pretrained(gpt2_model_folder(variant));
    model->eval();
    at::NoGradGuard no_grad;
    const double diff =
        max_abs_diff(model->forward(reference.at("input_ids")), reference.at("hidden"));
    EXPECT_LE(diff, 1e-5) << variant;
    std::cout << "[ gpt2 ] " << variant << ": base model hidden states max abs diff " << diff
              << "\n";
  }
}

TEST(GPT2Reference, LossAndGradientsEqualTransformersPlain) {
  REQUIRE_REFERENCE_PYTHON();
  expect_gpt2_gradients("plain");
}

TEST(GPT2Reference, LossAndGradientsEqualTransformersUntiedScaled) {
  REQUIRE_REFERENCE_PYTHON();
  expect_gpt2_gradients("untied_scaled");
}

TEST(GPT2Reference, LossAndGradientsEqualTransformersShardedUnscaled) {
  REQUIRE_REFERENCE_PYTHON();
  expect_gpt2_gradients("sharded");
}

// Our saves (after changing the weights, so transformers must read ours)
// load with transformers' from_pretrained, with nothing missing, unexpected
// or mis-shaped, and give our logits: tied in one file, untied in one file,
// and in shards.
TEST(GPT2Reference, TransformersLoadsWhatWeSave) {
  REQUIRE_REFERENCE_PYTHON();
  ASSERT_FALSE(gpt2_reference_folder().empty());
  for (const auto& [variant, shard] : std::vector<std::pair<std::string, std::string>>{
           {"plain", "5GB"}, {"untied_scaled", "5GB"}, {"sharded", "30KB"}}) {
    auto model = am::GPT2LMHeadModelImpl::from_pretrained(gpt2_model_folder(variant));
    torch::manual_seed(7);
    {
      at::NoGradGuard no_grad;
      for (auto& p : model->parameters()) p.add_(at::randn_like(p) * 0.05);
    }
    TempDir dir;
    const auto files = model->save_pretrained(dir.file("model"), shard);
    EXPECT_EQ(files.size() > 1, shard == "30KB") << variant;
    const at::Tensor ids = gpt2_reference_outputs(variant).at("input_ids");
    accelerate::save_safetensors(dir.file("ids.safetensors"), {{"input_ids", ids}});
    const auto result = accelerate::testing::run_reference_script(
        GPT2_REFERENCE_SCRIPT,
        {"logits", dir.file("model"), dir.file("ids.safetensors"), dir.file("out.safetensors")});
    ASSERT_EQ(result.exit_code, 0) << variant << ": " << result.err;
    const at::Tensor theirs =
        accelerate::load_safetensors(dir.file("out.safetensors")).at(0).second;
    at::NoGradGuard no_grad;
    model->eval();
    const at::Tensor ours = model->forward(ids);
    const double diff = max_abs_diff(ours, theirs);
    EXPECT_LE(diff, 1e-5) << variant;
    EXPECT_GT(max_abs_diff(ours, gpt2_reference_outputs(variant).at("logits")), 1e-2)
        << variant << ": the changed weights should change the logits";
    std::cout << "[ gpt2 ] " << variant << ": transformers on our save, logits max abs diff "
              << diff << "\n";
  }
}
