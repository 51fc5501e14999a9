// What each process holds at tensor parallelism, counted on real ranks
// (threads over a FileStore, Gloo), against `accelerate estimate-memory
// --parallelism_config_tp_size`'s figures for the same config.json: the
// parameters of GPT-2 (tied and untied), of a Llama with grouped-query
// attention and biases and of a BERT encoder, split over 2 and 4 processes,
// and the model state (parameters, gradients, AdamW's two moments) after a
// step.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>

#include "accelerate/models/bert.h"
#include "accelerate/models/gpt2.h"
#include "accelerate/models/llama.h"
#include "cli/training_estimate.h"
#include "cli/transformer_shape.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"
#include "tiny_llama_config.h"

namespace tensor_parallel_memory_test {

namespace am = accelerate::models;
namespace cli = accelerate::cli;
using accelerate::Communicator;
using accelerate::TensorParallel;

// Elements of every tensor AdamW keeps for `model`'s parameters after one
// step, and of the parameters and gradients.
struct Counted {
  double parameters = 0;
  double state = 0;  // parameters + gradients + both moments
};

template <typename Model>
Counted count_after_a_step(Model& model, const std::function<at::Tensor(Model&)>& loss) {
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  loss(model).backward();
  optimizer.step();
  Counted counted;
  for (const auto& p : model->parameters()) {
    counted.parameters += static_cast<double>(p.numel());
    counted.state += static_cast<double>(p.numel() + p.grad().numel());
  }
  EXPECT_EQ(optimizer.state().size(), model->parameters().size()) << "a state per parameter";
  for (const auto& entry : optimizer.state()) {
    const auto& state = static_cast<const torch::optim::AdamWParamState&>(*entry.second);
    counted.state += static_cast<double>(state.exp_avg().numel() + state.exp_avg_sq().numel());
  }
  return counted;
}

// On `tp` thread ranks: the split model's counts on every rank equal the
// estimate's for the config.json `write_config` writes, within 5% (the
// parameters within one embedding row).
template <typename Model>
void expect_estimate_counts(const std::function<void(const std::string&)>& write_config,
                            const std::function<Model()>& build, int tp,
                            const std::function<at::Tensor(Model&)>& loss) {
  accelerate::testing::TempDir dir;
  write_config(dir.path());
  const cli::TransformerShape shape = cli::transformer_from_config_json(dir.file("config.json"));
  const cli::ProcessParameters held = cli::parameters_per_process(shape, tp);
  ASSERT_LT(held.total, static_cast<double>(cli::total_parameters(shape)));
  cli::TrainingSetup setup;
  setup.num_processes = tp;
  setup.tp_size = tp;
  const cli::ModelStateBytes estimate =
      cli::model_state_per_process(held.total, held.outside, setup);
  accelerate::testing::run_rank_communicators(tp, [&](std::shared_ptr<Communicator> comm) {
    torch::manual_seed(3);
    Model model = build();
    ASSERT_EQ(static_cast<double>(cli::total_parameters(shape)), static_cast<double>([&] {
                int64_t n = 0;
                for (const auto& p : model->parameters()) n += p.numel();
                return n;
              }()))
        << "the shape counts the whole model";
    model->parallelize(TensorParallel(comm));
    const Counted counted = count_after_a_step(model, loss);
    // Exact for even splits; an uneven vocabulary gives rank 0 a row more.
    EXPECT_NEAR(counted.parameters, held.total, shape.hidden)
        << shape.source << ", rank " << comm->rank();
    const double bytes = 4 * counted.state;
    EXPECT_NEAR(estimate.device(), bytes, 0.05 * bytes) << shape.source;
  });
}

at::Tensor ids(int64_t vocab) { return at::arange(24, at::kLong).remainder(vocab).view({2, 12}); }

// A decoder's language-model loss.
template <typename Model>
std::function<at::Tensor(Model&)> lm_loss(int64_t vocab) {
  return [vocab](Model& model) { return model->loss(ids(vocab), ids(vocab)); };
}

am::GPT2Config gpt2_config(bool tied) {
  am::GPT2Config config;
  config.vocab_size = 64, config.n_positions = 16, config.n_embd = 32;
  config.n_layer = 2, config.n_head = 4;
  config.tie_word_embeddings = tied;
  config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0;
  return config;
}

void expect_gpt2(bool tied, int tp) {
  const am::GPT2Config config = gpt2_config(tied);
  expect_estimate_counts<am::GPT2LMHeadModel>(
      [&](const std::string& dir) { am::write_gpt2_config(config, dir); },
      [&] { return am::GPT2LMHeadModel(config); }, tp,
      lm_loss<am::GPT2LMHeadModel>(config.vocab_size));
}

TEST(TensorParallelMemory, Gpt2TiedAtTp2HoldsWhatTheEstimateSays) { expect_gpt2(true, 2); }
TEST(TensorParallelMemory, Gpt2UntiedAtTp4HoldsWhatTheEstimateSays) { expect_gpt2(false, 4); }

TEST(TensorParallelMemory, LlamaWithBiasesAtTp2HoldsWhatTheEstimateSays) {
  am::LlamaConfig config = accelerate::testing::tiny_llama_config(64, 16);
  config.attention_bias = true;
  config.mlp_bias = true;
  config.tie_word_embeddings = false;
  expect_estimate_counts<am::LlamaForCausalLM>(
      [&](const std::string& dir) { am::write_llama_config(config, dir); },
      [&] { return am::LlamaForCausalLM(config); }, 2,
      lm_loss<am::LlamaForCausalLM>(config.vocab_size));
}

// The encoder as estimate-memory counts it (embeddings, layers, pooler),
// vocabulary 99 split unevenly (50 + 49 rows: within the 5% here).
TEST(TensorParallelMemory, BertEncoderAtTp2HoldsWhatTheEstimateSays) {
  am::BertConfig config;
  config.vocab_size = 99, config.hidden_size = 32, config.num_hidden_layers = 2;
  config.num_attention_heads = 4, config.intermediate_size = 48;
  config.max_position_embeddings = 16;
  config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0;
  expect_estimate_counts<am::BertModel>(
      [&](const std::string& dir) { am::write_bert_config(config, dir, "BertModel"); },
      [&] { return am::BertModel(config); }, 2,
      [](am::BertModel& model) {
        const auto out = model->forward(ids(99));
        return out.last_hidden_state.square().mean() + out.pooler_output.mean();
      });
}

}  // namespace tensor_parallel_memory_test
