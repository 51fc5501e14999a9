// The BERT models against transformers (tests/models/bert_reference.py run
// under $ACCELERATE_REFERENCE_PYTHON, scripts/install-reference-python.sh):
// transformers' tiny random encoders and classifiers load here and give
// transformers' hidden states, pooled outputs, logits, losses and gradients
// on padded batches with two segments; either layout (with or without the
// "bert." prefix) loads into either model; what we save loads in
// transformers and gives ours. Without the interpreter every test here
// reports itself skipped.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <sstream>

#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/models/bert.h"
#include "reference_python.h"
#include "support/temp_dir.h"

namespace am = accelerate::models;
using accelerate::testing::max_abs_diff;
using accelerate::testing::TempDir;

namespace {

const std::string& bert_reference_folder() {
  return accelerate::testing::reference_folder(BERT_REFERENCE_SCRIPT);
}

std::string bert_variant_dir(const std::string& variant) {
  return bert_reference_folder() + "/" + variant;
}

std::map<std::string, at::Tensor> bert_reference_outputs(const std::string& variant) {
  return accelerate::testing::load_named_tensors(bert_variant_dir(variant) +
                                                 "/reference.safetensors");
}

// Hidden states and pooled output within 1e-5 of transformers'.
void expect_bert_outputs(am::BertModelImpl& model, std::map<std::string, at::Tensor>& reference,
                         const std::string& what) {
  at::NoGradGuard no_grad;
  model.eval();
  const auto out = model.forward(reference.at("input_ids"), reference.at("attention_mask"),
                                 reference.at("token_type_ids"));
  ASSERT_EQ(out.last_hidden_state.sizes(), reference.at("last_hidden_state").sizes()) << what;
  const double hidden_diff = max_abs_diff(out.last_hidden_state, reference.at("last_hidden_state"));
  const double pooled_diff = max_abs_diff(out.pooler_output, reference.at("pooler_output"));
  EXPECT_LE(hidden_diff, 1e-5) << what;
  EXPECT_LE(pooled_diff, 1e-5) << what;
  ::testing::Test::RecordProperty(what, c10::str(hidden_diff, " ", pooled_diff));
  // Not near zero, so the bound means something.
  EXPECT_GT(reference.at("last_hidden_state").abs().max().item<double>(), 0.5) << what;
}

const char* const kClassifiers[] = {"single_label", "regression", "multi_label"};

}  // namespace

TEST(BertReference, EncoderOutputsEqualTransformersWithPaddingAndSegments) {
  REQUIRE_REFERENCE_PYTHON();
  ASSERT_FALSE(bert_reference_folder().empty());
  auto reference = bert_reference_outputs("encoder");
  auto model = am::BertModelImpl::from_pretrained(bert_variant_dir("encoder") + "/model");
  expect_bert_outputs(*model, reference, "encoder");
  // The mask and the segments both matter here: without them the outputs
  // move far from transformers'.
  at::NoGradGuard no_grad;
  const auto unmasked =
      model->forward(reference.at("input_ids"), {}, reference.at("token_type_ids"));
  EXPECT_GT(max_abs_diff(unmasked.pooler_output, reference.at("pooler_output")), 1e-2);
  const auto one_segment =
      model->forward(reference.at("input_ids"), reference.at("attention_mask"));
  EXPECT_GT(max_abs_diff(one_segment.pooler_output, reference.at("pooler_output")), 1e-2);
}

TEST(BertReference, ClassifierLogitsEqualTransformers) {
  REQUIRE_REFERENCE_PYTHON();
  ASSERT_FALSE(bert_reference_folder().empty());
  for (const std::string variant : kClassifiers) {
    auto reference = bert_reference_outputs(variant);
    auto model = am::BertForSequenceClassificationImpl::from_pretrained(bert_variant_dir(variant) +
                                                                        "/model");
    EXPECT_EQ(model->config().id2label.back(),
              "class_" + std::to_string(reference.at("logits").size(1) - 1));
    expect_bert_outputs(*model->bert, reference, variant);
    at::NoGradGuard no_grad;
    model->eval();
    const at::Tensor logits = model->forward(
        reference.at("input_ids"), reference.at("attention_mask"), reference.at("token_type_ids"));
    ASSERT_EQ(logits.sizes(), reference.at("logits").sizes()) << variant;
    const double diff = max_abs_diff(logits, reference.at("logits"));
    EXPECT_LE(diff, 1e-5) << variant;
    RecordProperty(variant + "_logits", c10::str(diff));
    EXPECT_GT(reference.at("logits").abs().max().item<double>(), 0.1) << variant;
  }
}

// Loss and every parameter's gradient within 1e-4 relative of transformers',
// with the problem type transformers chose.
TEST(BertReference, LossAndGradientsEqualTransformers) {
  REQUIRE_REFERENCE_PYTHON();
  ASSERT_FALSE(bert_reference_folder().empty());
  for (const std::string variant : kClassifiers) {
    auto reference = bert_reference_outputs(variant);
    auto model = am::BertForSequenceClassificationImpl::from_pretrained(bert_variant_dir(variant) +
                                                                        "/model");
    ASSERT_FALSE(model->config().problem_type.has_value()) << variant;
    model->train();
    const at::Tensor loss =
        model->loss(reference.at("input_ids"), reference.at("labels"),
                    reference.at("attention_mask"), reference.at("token_type_ids"));
    std::ifstream type_file(bert_variant_dir(variant) + "/problem_type.txt");
    std::stringstream expected_type;
    expected_type << type_file.rdbuf();
    ASSERT_TRUE(model->config().problem_type.has_value());
    EXPECT_EQ(am::to_string(*model->config().problem_type), expected_type.str()) << variant;
    const double expected_loss = reference.at("loss").item<double>();
    const double loss_error =
        std::abs(loss.item<double>() - expected_loss) / std::abs(expected_loss);
    EXPECT_LE(loss_error, 1e-4) << variant;
    double worst_grad = 0;
    loss.backward();
    size_t compared = 0;
    for (const auto& item : model->named_parameters()) {
      const auto found = reference.find("grad." + item.key());
      ASSERT_NE(found, reference.end()) << "transformers has no gradient for " << item.key();
      const at::Tensor& grad = item.value().grad();
      ASSERT_TRUE(grad.defined()) << item.key();
      ++compared;
      const std::string& name = item.key();
      if (name.size() > 23 && name.compare(name.size() - 23, 23, "attention.self.key.bias") == 0) {
        // A key bias adds the same score to every key of a query, which the
        // softmax cancels: its gradient is zero, both sides give rounding
        // noise (~1e-12 and ~1e-8 here), so only its smallness is compared.
        EXPECT_LE(grad.abs().max().item<double>(), 1e-6) << variant << " " << name;
        EXPECT_LE(found->second.abs().max().item<double>(), 1e-6) << variant << " " << name;
        continue;
      }
      const double scale = found->second.abs().max().item<double>();
      EXPECT_GT(scale, 0) << name;
      const double grad_error = max_abs_diff(grad, found->second) / scale;
      EXPECT_LE(grad_error, 1e-4) << variant << " " << name;
      worst_grad = std::max(worst_grad, grad_error);
    }
    size_t reference_grads = 0;
    for (const auto& [name, tensor] : reference) reference_grads += name.rfind("grad.", 0) == 0;
    EXPECT_EQ(compared, reference_grads) << variant;
    // Relative errors, in the test XML (docs/models-bert.md quotes them).
    RecordProperty(variant, c10::str("loss ", loss_error, " worst gradient ", worst_grad));
  }
}

// transformers' base_model_prefix rules: an encoder's folder (no "bert.")
// loads into the classifier with a new head, and a classifier's folder
// into the encoder with the head dropped.
TEST(BertReference, EitherLayoutLoadsIntoEitherModel) {
  REQUIRE_REFERENCE_PYTHON();
  ASSERT_FALSE(bert_reference_folder().empty());
  auto encoder_reference = bert_reference_outputs("encoder");
  torch::manual_seed(3);
  auto classifier = am::BertForSequenceClassificationImpl::from_pretrained(
      bert_variant_dir("encoder") + "/model", am::BertLoadOptions().num_labels(5));
  EXPECT_EQ(classifier->config().num_labels(), 5);
  EXPECT_EQ(classifier->classifier->weight.size(0), 5);
  expect_bert_outputs(*classifier->bert, encoder_reference, "encoder into the classifier");

  auto classifier_reference = bert_reference_outputs("single_label");
  auto encoder = am::BertModelImpl::from_pretrained(bert_variant_dir("single_label") + "/model");
  expect_bert_outputs(*encoder, classifier_reference, "classifier into the encoder");
}

// Our saves (after changing the weights, so transformers must read ours)
// load with transformers' from_pretrained and give our outputs: the
// encoder, a classifier in one file, and one in shards.
TEST(BertReference, TransformersLoadsWhatWeSave) {
  REQUIRE_REFERENCE_PYTHON();
  ASSERT_FALSE(bert_reference_folder().empty());
  const std::vector<std::pair<std::string, std::string>> saves = {
      {"encoder", "5GB"}, {"single_label", "5GB"}, {"regression", "30KB"}};
  for (const auto& [variant, shard] : saves) {
    auto reference = bert_reference_outputs(variant);
    const std::string source = bert_variant_dir(variant) + "/model";
    TempDir dir;
    std::vector<std::string> files;
    std::shared_ptr<am::BertModelImpl> encoder;
    std::shared_ptr<am::BertForSequenceClassificationImpl> classifier;
    if (variant == "encoder") {
      encoder = am::BertModelImpl::from_pretrained(source);
    } else {
      classifier = am::BertForSequenceClassificationImpl::from_pretrained(source);
    }
    torch::nn::Module& model = encoder ? static_cast<torch::nn::Module&>(*encoder) : *classifier;
    torch::manual_seed(7);
    {
      at::NoGradGuard no_grad;
      for (auto& p : model.parameters()) p.add_(at::randn_like(p) * 0.05);
    }
    files = encoder ? encoder->save_pretrained(dir.file("model"), shard)
                    : classifier->save_pretrained(dir.file("model"), shard);
    EXPECT_EQ(files.size() > 1, shard == "30KB") << variant;
    accelerate::save_safetensors(dir.file("inputs.safetensors"),
                                 {{"input_ids", reference.at("input_ids")},
                                  {"attention_mask", reference.at("attention_mask")},
                                  {"token_type_ids", reference.at("token_type_ids")}});
    const auto result = accelerate::testing::run_reference_script(
        BERT_REFERENCE_SCRIPT, {"outputs", dir.file("model"), dir.file("inputs.safetensors"),
                                dir.file("out.safetensors")});
    ASSERT_EQ(result.exit_code, 0) << variant << ": " << result.err;
    auto theirs = accelerate::testing::load_named_tensors(dir.file("out.safetensors"));
    at::NoGradGuard no_grad;
    model.eval();
    const auto& ids = reference.at("input_ids");
    const auto& mask = reference.at("attention_mask");
    const auto& types = reference.at("token_type_ids");
    if (encoder) {
      const auto ours = encoder->forward(ids, mask, types);
      EXPECT_LE(max_abs_diff(ours.last_hidden_state, theirs.at("last_hidden_state")), 1e-5);
      EXPECT_LE(max_abs_diff(ours.pooler_output, theirs.at("pooler_output")), 1e-5);
      EXPECT_GT(max_abs_diff(ours.pooler_output, reference.at("pooler_output")), 1e-2)
          << "the changed weights should change the outputs";
    } else {
      const at::Tensor ours = classifier->forward(ids, mask, types);
      EXPECT_LE(max_abs_diff(ours, theirs.at("logits")), 1e-5) << variant;
      EXPECT_GT(max_abs_diff(ours, reference.at("logits")), 1e-2)
          << variant << ": the changed weights should change the logits";
    }
  }
}
