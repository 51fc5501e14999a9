// The BERT models without Python: padding leaves the real tokens' outputs
// alone, dropout follows train()/eval(), config.json is read and written
// with one-line errors, folders round-trip with either prefix and give
// one-line errors, the loss picks transformers' problem type, and mean
// pooling ignores padding. (tests/models/bert_reference_test.cpp compares
// the arithmetic with transformers.)
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/common/errors.h"
#include "accelerate/models/bert.h"
#include "accelerate/models/pretrained.h"
#include "support/error_message.h"
#include "support/temp_dir.h"

namespace am = accelerate::models;
using accelerate::testing::error_of;
using accelerate::testing::TempDir;

namespace {

am::BertConfig tiny_bert_config(double dropout = 0.0) {
  am::BertConfig config;
  config.vocab_size = 50;
  config.hidden_size = 32;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.intermediate_size = 48;
  config.max_position_embeddings = 16;
  config.hidden_dropout_prob = dropout;
  config.attention_probs_dropout_prob = dropout;
  config.set_num_labels(3);
  return config;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

}  // namespace

TEST(BertModel, PaddingLeavesTheRealTokensAlone) {
  torch::manual_seed(11);
  am::BertModel model(tiny_bert_config());
  model->eval();
  at::NoGradGuard no_grad;
  const at::Tensor ids = torch::tensor({7, 12, 3, 44, 9}, at::kLong).view({1, 5});
  const at::Tensor padded = at::constant_pad_nd(ids, {0, 3}, 0);
  const at::Tensor mask = torch::tensor({1, 1, 1, 1, 1, 0, 0, 0}, at::kLong).view({1, 8});
  const auto alone = model->forward(ids);
  const auto masked = model->forward(padded, mask);
  EXPECT_TRUE(
      at::allclose(masked.last_hidden_state.narrow(1, 0, 5), alone.last_hidden_state, 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(masked.pooler_output, alone.pooler_output, 1e-5, 1e-5));
  // Without the mask the padding is attended to and changes everything.
  const auto unmasked = model->forward(padded);
  EXPECT_FALSE(at::allclose(unmasked.pooler_output, alone.pooler_output, 1e-3, 1e-3));
  // Segments matter: token type 1 gives other outputs.
  const auto second = model->forward(ids, {}, at::ones_like(ids));
  EXPECT_FALSE(at::allclose(second.pooler_output, alone.pooler_output, 1e-3, 1e-3));
}

TEST(BertModel, DropoutOnlyWhileTraining) {
  torch::manual_seed(12);
  am::BertForSequenceClassification model(tiny_bert_config(/*dropout=*/0.3));
  const at::Tensor ids = torch::tensor({{5, 6, 7, 8}, {9, 10, 11, 12}}, at::kLong);
  model->eval();
  const at::Tensor a = model->forward(ids), b = model->forward(ids);
  EXPECT_TRUE(at::equal(a, b));
  model->train();
  EXPECT_FALSE(at::allclose(model->forward(ids), a));
}

TEST(BertModel, BadInputsAreOneLineErrors) {
  am::BertModel model(tiny_bert_config());
  const at::Tensor ids = at::zeros({2, 4}, at::kLong);
  EXPECT_EQ(error_of([&] { model->forward(ids.view({8})); }),
            "BERT: input_ids must be [batch, tokens], not [8]");
  EXPECT_EQ(error_of([&] {
              model->forward(ids, at::ones({2, 3}));
            }),
            "BERT: attention_mask [2, 3] does not match input_ids [2, 4]");
  EXPECT_EQ(error_of([&] {
              model->forward(at::zeros({1, 17}, at::kLong));
            }),
            "BERT: 17 tokens exceed max_position_embeddings 16");
}

TEST(BertConfig, ReadsTransformersKeysAndWritesThemBack) {
  TempDir dir;
  write_text(dir.file("config.json"), R"({
    "model_type": "bert", "architectures": ["BertForSequenceClassification"],
    "vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
    "intermediate_size": 48, "hidden_act": "gelu_pytorch_tanh", "hidden_dropout_prob": 0.2,
    "attention_probs_dropout_prob": 0.05, "max_position_embeddings": 16, "type_vocab_size": 3,
    "layer_norm_eps": 1e-7, "pad_token_id": 1, "classifier_dropout": 0.4,
    "id2label": {"1": "POSITIVE", "0": "NEGATIVE"}, "label2id": {"NEGATIVE": 0, "POSITIVE": 1},
    "problem_type": "single_label_classification", "initializer_range": 0.02})");
  const am::BertConfig config = am::read_bert_config(dir.path());
  EXPECT_EQ(config.hidden_act, am::BertActivation::kGeluTanh);
  EXPECT_EQ(config.type_vocab_size, 3);
  EXPECT_EQ(config.pad_token_id, 1);
  EXPECT_DOUBLE_EQ(config.layer_norm_eps, 1e-7);
  EXPECT_DOUBLE_EQ(config.head_dropout(), 0.4);
  EXPECT_EQ(config.id2label, (std::vector<std::string>{"NEGATIVE", "POSITIVE"}));
  ASSERT_TRUE(config.problem_type.has_value());
  EXPECT_EQ(*config.problem_type, am::ProblemType::kSingleLabelClassification);
  EXPECT_EQ(config.other_keys.at("initializer_range"), "0.02");

  am::write_bert_config(config, dir.file("again"), "BertForSequenceClassification");
  const am::BertConfig again = am::read_bert_config(dir.file("again"));
  EXPECT_EQ(again.hidden_act, config.hidden_act);
  EXPECT_EQ(again.id2label, config.id2label);
  EXPECT_EQ(again.problem_type, config.problem_type);
  EXPECT_EQ(again.classifier_dropout, config.classifier_dropout);
  EXPECT_EQ(again.other_keys.at("initializer_range"), "0.02");
  EXPECT_EQ(am::bert_config_json(again, "BertForSequenceClassification"),
            am::bert_config_json(config, "BertForSequenceClassification"));

  // No id2label: num_labels, else transformers' 2.
  write_text(dir.file("config.json"),
             R"({"vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 1,
                 "num_attention_heads": 4, "intermediate_size": 8, "num_labels": 5})");
  EXPECT_EQ(am::read_bert_config(dir.path()).num_labels(), 5);
}

TEST(BertConfig, BadFilesAreOneLineErrorsNamingTheKey) {
  TempDir dir;
  const std::string path = dir.file("config.json");
  const std::string sizes =
      R"("vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
         "intermediate_size": 8)";
  auto error_for = [&](const std::string& extra) {
    write_text(path, "{" + sizes + extra + "}");
    return error_of([&] { am::read_bert_config(path); });
  };
  const std::string prefix = "BERT config '" + path + "': ";
  EXPECT_EQ(error_for(R"(, "model_type": "llama")"),
            prefix + "model_type \"llama\" is not \"bert\"");
  EXPECT_EQ(error_for(R"(, "hidden_act": "swish")"),
            prefix +
                "hidden_act \"swish\" is not supported (gelu, gelu_new, "
                "gelu_pytorch_tanh, relu)");
  EXPECT_EQ(error_for(R"(, "position_embedding_type": "relative_key")"),
            prefix + "position_embedding_type \"relative_key\" is not supported (only absolute)");
  EXPECT_EQ(error_for(R"(, "id2label": {"0": "a", "2": "b"})"),
            prefix + "\"id2label\" must map \"0\" ... \"1\" to names, not \"2\"");
  EXPECT_EQ(error_for(R"(, "problem_type": "ranking")"),
            prefix +
                "problem_type \"ranking\" is not one of regression, "
                "single_label_classification, multi_label_classification");
  EXPECT_EQ(error_for(R"(, "hidden_size": 30)"), prefix + "duplicate key 'hidden_size'");
  write_text(path, R"({"vocab_size": 50, "hidden_size": 30, "num_hidden_layers": 1,
                       "num_attention_heads": 4, "intermediate_size": 8})");
  EXPECT_EQ(
      error_of([&] { am::read_bert_config(path); }),
      "BERT config: hidden_size 30 is not a multiple of num_attention_heads 4 (in '" + path + "')");
  write_text(path, R"({"vocab_size": 50, "num_hidden_layers": 1})");
  EXPECT_EQ(error_of([&] { am::read_bert_config(path); }), prefix + "\"hidden_size\" is missing");
}

TEST(BertPretrained, SavesAndLoadsEitherLayoutIntoEitherModel) {
  torch::manual_seed(13);
  am::BertForSequenceClassification classifier(tiny_bert_config());
  TempDir dir;
  classifier->save_pretrained(dir.file("classifier"));
  auto again = am::BertForSequenceClassificationImpl::from_pretrained(dir.file("classifier"));
  EXPECT_EQ(again->config().id2label, classifier->config().id2label);
  const auto mine = classifier->named_parameters();
  for (const auto& item : again->named_parameters()) {
    EXPECT_TRUE(at::equal(item.value(), mine[item.key()])) << item.key();
  }
  // The classifier's folder into the bare encoder: "bert." stripped, head dropped.
  auto encoder = am::BertModelImpl::from_pretrained(dir.file("classifier"));
  for (const auto& item : encoder->named_parameters()) {
    EXPECT_TRUE(at::equal(item.value(), mine["bert." + item.key()])) << item.key();
  }
  // The encoder's folder (no prefix) into a classifier: a new head of 4.
  encoder->save_pretrained(dir.file("encoder"));
  torch::manual_seed(14);
  auto headed = am::BertForSequenceClassificationImpl::from_pretrained(
      dir.file("encoder"), am::BertLoadOptions().num_labels(4));
  EXPECT_EQ(headed->config().num_labels(), 4);
  // The new head has the values an ordinary build draws from the same seed.
  torch::manual_seed(14);
  am::BertForSequenceClassification fresh(headed->config());
  EXPECT_TRUE(at::equal(headed->classifier->weight, fresh->classifier->weight));
  EXPECT_TRUE(at::equal(headed->classifier->bias, fresh->classifier->bias));
  for (const auto& item : headed->bert->named_parameters()) {
    EXPECT_TRUE(at::equal(item.value(), mine["bert." + item.key()])) << item.key();
  }
  // What the loader reports for a base folder loaded into a headed model.
  am::BertForSequenceClassification target(tiny_bert_config());
  const auto report = am::load_pretrained_weights(
      *target, dir.file("encoder"),
      am::PretrainedLoadOptions().base_model_prefix("bert").allow_missing({"classifier."}));
  EXPECT_EQ(report.kept_initial,
            (std::vector<std::string>{"classifier.weight", "classifier.bias"}));
  EXPECT_TRUE(report.skipped.empty());
}

TEST(BertPretrained, BadFoldersGiveOneLineErrors) {
  torch::manual_seed(15);
  am::BertForSequenceClassification source(tiny_bert_config());
  TempDir dir;
  source->save_pretrained(dir.path());
  const std::string file = dir.file("model.safetensors");
  auto tensors = accelerate::load_safetensors(file);
  auto edited = tensors;
  // Old BERT files carry the position_ids buffer: skipped, as transformers does.
  edited.emplace_back("bert.embeddings.position_ids", at::arange(16, at::kLong).view({1, 16}));
  edited.emplace_back("bert.encoder.layer.7.output.dense.bias", at::zeros({32}));
  accelerate::save_safetensors(file, edited, {{"format", "pt"}});
  EXPECT_EQ(error_of([&] { am::BertForSequenceClassificationImpl::from_pretrained(dir.path()); }),
            "load_pretrained_weights: unexpected tensor 'bert.encoder.layer.7.output.dense.bias' "
            "in '" +
                file + "': the model has no such parameter");
  edited.pop_back();
  accelerate::save_safetensors(file, edited, {{"format", "pt"}});
  EXPECT_NO_THROW(am::BertForSequenceClassificationImpl::from_pretrained(dir.path()));

  edited = tensors;
  for (auto& [name, tensor] : edited) {
    if (name == "bert.encoder.layer.1.attention.self.key.weight") tensor = at::zeros({32, 31});
  }
  accelerate::save_safetensors(file, edited, {{"format", "pt"}});
  EXPECT_EQ(
      error_of([&] { am::BertModelImpl::from_pretrained(dir.path()); }),
      "load_pretrained_weights: tensor 'bert.encoder.layer.1.attention.self.key.weight' in '" +
          file + "' has shape [32, 31] but the model's is [32, 32]");

  edited = tensors;
  edited.erase(std::remove_if(edited.begin(), edited.end(),
                              [](const auto& item) {
                                return item.first == "bert.embeddings.LayerNorm.weight";
                              }),
               edited.end());
  accelerate::save_safetensors(file, edited, {{"format", "pt"}});
  EXPECT_EQ(error_of([&] { am::BertForSequenceClassificationImpl::from_pretrained(dir.path()); }),
            "load_pretrained_weights: missing tensor 'bert.embeddings.LayerNorm.weight': no "
            "weight file in '" +
                dir.path() + "' holds it");
}

TEST(BertClassifier, LossFollowsTransformersProblemTypes) {
  const at::Tensor logits = torch::tensor({{0.5, -1.0, 2.0}, {1.5, 0.0, -0.5}});
  EXPECT_EQ(am::infer_problem_type(1, at::zeros({2})), am::ProblemType::kRegression);
  EXPECT_EQ(am::infer_problem_type(3, at::zeros({2}, at::kLong)),
            am::ProblemType::kSingleLabelClassification);
  EXPECT_EQ(am::infer_problem_type(3, at::zeros({2, 3})),
            am::ProblemType::kMultiLabelClassification);
  const at::Tensor classes = torch::tensor({2, 0}, at::kLong);
  const double expected_ce =
      -(at::log_softmax(logits, 1)[0][2] + at::log_softmax(logits, 1)[1][0]).item<double>() / 2;
  EXPECT_NEAR(
      am::sequence_classification_loss(logits, classes, am::ProblemType::kSingleLabelClassification)
          .item<double>(),
      expected_ce, 1e-6);
  const at::Tensor one = torch::tensor({{0.5}, {2.0}});
  EXPECT_NEAR(
      am::sequence_classification_loss(one, torch::tensor({1.0, 1.0}), am::ProblemType::kRegression)
          .item<double>(),
      (0.25 + 1.0) / 2, 1e-6);
  EXPECT_EQ(error_of([&] {
              am::sequence_classification_loss(logits, at::zeros({2}),
                                               am::ProblemType::kSingleLabelClassification);
            }),
            "sequence_classification_loss: single-label classification wants integer labels, "
            "not Float");

  // The model decides once and keeps the decision (saved with the config).
  torch::manual_seed(16);
  am::BertForSequenceClassification model(tiny_bert_config());
  const at::Tensor ids = torch::tensor({{5, 6, 7}, {8, 9, 10}}, at::kLong);
  model->loss(ids, classes);
  ASSERT_TRUE(model->config().problem_type.has_value());
  EXPECT_EQ(*model->config().problem_type, am::ProblemType::kSingleLabelClassification);
}

TEST(BertPooling, MeanPoolingIgnoresPadding) {
  const at::Tensor hidden = at::arange(12, at::kFloat).view({2, 3, 2});
  const at::Tensor mask = torch::tensor({{1, 1, 0}, {1, 0, 0}}, at::kLong);
  const at::Tensor pooled = am::mean_pooling(hidden, mask);
  EXPECT_TRUE(at::allclose(pooled, torch::tensor({{1.0, 2.0}, {6.0, 7.0}})));
  EXPECT_EQ(error_of([&] {
              am::mean_pooling(hidden, at::ones({2, 2}));
            }),
            "mean_pooling: hidden [2, 3, 2] and attention_mask [2, 2] do not match ([batch, "
            "tokens, hidden], [batch, tokens])");
}

TEST(BertModel, GradientCheckpointingGivesTheSameGradients) {
  torch::manual_seed(17);
  am::BertForSequenceClassification model(tiny_bert_config(/*dropout=*/0.2));
  model->train();
  const at::Tensor ids = torch::tensor({{5, 6, 7, 8, 0}, {9, 10, 11, 0, 0}}, at::kLong);
  const at::Tensor mask = ids.ne(0).to(at::kLong);
  const at::Tensor labels = torch::tensor({1, 2}, at::kLong);
  auto gradients = [&] {
    model->zero_grad();
    // The same dropout masks in both runs (and, checkpointed, in the recomputation).
    torch::manual_seed(99);
    model->loss(ids, labels, mask).backward();
    std::vector<at::Tensor> out;
    for (const auto& p : model->parameters()) out.push_back(p.grad().clone());
    return out;
  };
  const auto plain = gradients();
  EXPECT_FALSE(model->bert->gradient_checkpointing());
  model->bert->set_gradient_checkpointing(true);
  const auto checkpointed = gradients();
  ASSERT_EQ(plain.size(), checkpointed.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(at::equal(plain[i], checkpointed[i])) << i;
  // The layers' outputs come from the checkpoint's autograd node, not from
  // the layers' own operations.
  const auto out = model->bert->forward(ids, mask);
  ASSERT_TRUE(out.last_hidden_state.grad_fn());
  const at::Tensor pooled_input = out.last_hidden_state;
  EXPECT_NE(pooled_input.grad_fn()->name().find("Checkpoint"), std::string::npos)
      << pooled_input.grad_fn()->name();
  model->bert->set_gradient_checkpointing(false);
  EXPECT_EQ(model->bert->forward(ids, mask).last_hidden_state.grad_fn()->name().find("Checkpoint"),
            std::string::npos);
}
