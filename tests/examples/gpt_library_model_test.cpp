// The GPT example's Hugging Face folders and the models library's GPT-2
// (accelerate/models/gpt2.h) read each other: the example's save loads into
// GPT2LMHeadModel and gives the example's logits, and GPT2LMHeadModel's save
// loads with gpt::load_pretrained. (The example still trains its own model;
// docs/models-gpt2.md, "Not yet", says why.)
#include <gtest/gtest.h>

#include "accelerate/models/gpt2.h"
#include "gpt_model.h"
#include "support/temp_dir.h"

namespace gpt_library_model_test {

namespace am = accelerate::models;

gpt::GptConfig interop_config() {
  gpt::GptConfig config = gpt::GptConfig::preset("tiny", 300);
  config.n_positions = 24, config.n_embd = 32, config.n_layer = 2, config.n_head = 4;
  return config;
}

// Biases and LayerNorms away from their initial 0 and 1, so that a
// misplaced one shows.
template <class Model>
void spread_weights(Model& model) {
  at::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.add_(at::randn_like(p) * 0.1);
}

TEST(GptLibraryModel, TheExamplesSaveLoadsIntoGPT2LMHeadModel) {
  torch::manual_seed(11);
  gpt::Gpt example(interop_config());
  spread_weights(example);
  example->eval();
  accelerate::testing::TempDir dir;
  gpt::save_pretrained(example, dir.path());
  auto library = am::GPT2LMHeadModelImpl::from_pretrained(dir.path());
  library->eval();
  at::NoGradGuard no_grad;
  const at::Tensor ids = torch::randint(300, {2, 24});
  const at::Tensor ours = example->forward(ids);
  EXPECT_LE((library->forward(ids) - ours).abs().max().item<double>(), 1e-5);
  EXPECT_GT(ours.abs().max().item<double>(), 0.5);
}

TEST(GptLibraryModel, GPT2LMHeadModelsSaveLoadsIntoTheExample) {
  am::GPT2Config config;
  config.vocab_size = 300, config.n_positions = 24, config.n_embd = 32, config.n_layer = 2,
  config.n_head = 4;
  torch::manual_seed(12);
  am::GPT2LMHeadModel library(config);
  spread_weights(library);
  library->eval();
  accelerate::testing::TempDir dir;
  library->save_pretrained(dir.path());
  gpt::Gpt example = gpt::load_pretrained(dir.path());
  example->eval();
  at::NoGradGuard no_grad;
  const at::Tensor ids = torch::randint(300, {2, 24});
  EXPECT_LE((example->forward(ids) - library->forward(ids)).abs().max().item<double>(), 1e-5);
}

}  // namespace gpt_library_model_test
