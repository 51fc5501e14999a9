// The real all-MiniLM-L6-v2 (scripts/fetch-minilm.sh puts it in
// data/all-MiniLM-L6-v2; ACCELERATE_MINILM_DIR names another folder): its
// sentence-transformers checkpoint (no "bert." prefix, an old position_ids
// buffer) loads, and our mean-pooled sentence embeddings equal transformers'
// on token ids from its Python tokenizer (bert_reference.py minilm). Each
// test reports itself skipped, saying why, without the weights (or the
// Python reference where it needs it).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>

#include "accelerate/models/bert.h"
#include "reference_python.h"
#include "support/temp_dir.h"

namespace am = accelerate::models;
using accelerate::testing::max_abs_diff;
using accelerate::testing::TempDir;

namespace {

std::string minilm_dir() {
  const char* dir = std::getenv("ACCELERATE_MINILM_DIR");
  return dir && *dir ? dir : MINILM_DIR;
}

#define REQUIRE_MINILM()                                                          \
  if (!std::filesystem::exists(minilm_dir() + "/model.safetensors"))              \
  GTEST_SKIP() << "no MiniLM weights in " << minilm_dir()                         \
               << ": run scripts/fetch-minilm.sh (scripts/test.sh does), or set " \
                  "ACCELERATE_MINILM_DIR"

}  // namespace

TEST(MiniLM, SentenceEmbeddingsEqualTransformers) {
  REQUIRE_MINILM();
  REQUIRE_REFERENCE_PYTHON();
  TempDir dir;
  const auto result = accelerate::testing::run_reference_script(
      BERT_REFERENCE_SCRIPT, {"minilm", minilm_dir(), dir.file("minilm.safetensors")});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto reference = accelerate::testing::load_named_tensors(dir.file("minilm.safetensors"));
  const at::Tensor& mask = reference.at("attention_mask");
  ASSERT_FALSE(at::equal(mask, at::ones_like(mask))) << "the sentences should need padding";

  auto model = am::BertModelImpl::from_pretrained(minilm_dir());
  EXPECT_EQ(model->config().hidden_size, 384);
  EXPECT_EQ(model->config().num_hidden_layers, 6);
  model->eval();
  at::NoGradGuard no_grad;
  const auto out = model->forward(reference.at("input_ids"), mask, reference.at("token_type_ids"));
  const at::Tensor embedding = am::mean_pooling(out.last_hidden_state, mask);
  const at::Tensor& expected = reference.at("embedding");
  ASSERT_EQ(embedding.sizes(), expected.sizes());
  const double diff = max_abs_diff(embedding, expected);
  EXPECT_LE(diff, 1e-5);
  RecordProperty("max_abs_diff", c10::str(diff));  // in the test XML, for docs/models-bert.md
  // Real sentence embeddings: related sentences are closer than unrelated
  // ones (0: "A man is eating food.", 1: "... a piece of bread.", 2: "The
  // girl is carrying a baby.").
  const at::Tensor unit = embedding / embedding.norm(2, 1, true);
  const double related = (unit[0] * unit[1]).sum().item<double>();
  const double unrelated = (unit[0] * unit[2]).sum().item<double>();
  EXPECT_GT(related, unrelated + 0.3) << related << " vs " << unrelated;
  RecordProperty("cosines", c10::str(related, " ", unrelated));
}

// The fine-tuning start of the next issue: MiniLM's encoder under a new
// classification head; the encoder's outputs are MiniLM's.
TEST(MiniLM, LoadsUnderANewClassificationHead) {
  REQUIRE_MINILM();
  auto encoder = am::BertModelImpl::from_pretrained(minilm_dir());
  auto classifier = am::BertForSequenceClassificationImpl::from_pretrained(
      minilm_dir(), am::BertLoadOptions().num_labels(3));
  EXPECT_EQ(classifier->config().num_labels(), 3);
  const auto theirs = encoder->named_parameters();
  for (const auto& item : classifier->bert->named_parameters()) {
    EXPECT_TRUE(at::equal(item.value(), theirs[item.key()])) << item.key();
  }
  classifier->eval();
  at::NoGradGuard no_grad;
  // [CLS] hello world [SEP] in MiniLM's vocabulary.
  const at::Tensor ids = torch::tensor({101, 7592, 2088, 102}, at::kLong).view({1, 4});
  EXPECT_EQ(classifier->forward(ids).sizes(), (std::vector<int64_t>{1, 3}));
}
