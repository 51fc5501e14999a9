// Activation memory of the Llama and BERT models of accelerate::models,
// built from a Hugging Face config.json, measured as gpt_activation_peak_bench
// measures the GPT example's (one process, fp32, the counting CPU
// allocator), for `accelerate estimate-memory CONFIG --seq_len T`:
//
//   transformer_activation_bench --config config.json [--seq_len 256] [--batch 1]
//                                [--steps 2] [--checkpointing off|on|both]
//                                [--mixed_precision no|bf16]
//
// Llama trains as LlamaForCausalLM (transformers' causal-LM loss over the
// vocabulary); BERT as BertForSequenceClassification (the only BERT head
// the library has: pooler, classifier, cross-entropy over the labels).
// Checkpointing recomputes every decoder / encoder layer in backward (BERT's
// set_gradient_checkpointing; for Llama the bench runs the same layers
// through checkpoint_function, as BERT's encoder does). Dropout as the
// config says (the estimate counts none: give configs with 0).
//   held:  the rise in live tensor bytes when the forward pass returned,
//   peak:  the most the count rose above the step's start (the gradients
//          already exist: a warm-up step made them).
// One line per run, "key value" pairs for scripts (bench/memory/run_estimate_bench.sh).
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>

#include "accelerate/common/errors.h"
#include "accelerate/memory/activation_checkpointing.h"
#include "accelerate/models/bert.h"
#include "accelerate/models/llama.h"
#include "accelerate/precision/autocast.h"
#include "compat/memory_compat.h"

namespace {

namespace am = accelerate::models;
using LossFn = std::function<at::Tensor()>;

struct Figures {
  double held = 0, forward_peak = 0, backward_peak = 0;
};

// LlamaModel's forward with every layer checkpointed when asked.
at::Tensor llama_loss(am::LlamaForCausalLM& model, const at::Tensor& ids, bool checkpointing) {
  auto& decoder = *model->model;
  at::Tensor x = decoder.embed_tokens(ids);
  const am::RotaryTables rope = decoder.rotary(ids.size(1), x.device());
  const at::Tensor cos = rope.cos, sin = rope.sin;
  for (const auto& child : *decoder.layers) {
    auto layer = child->as<am::LlamaDecoderLayer>();
    if (!checkpointing) {
      x = layer->forward(x, cos, sin);
      continue;
    }
    x = accelerate::checkpoint_function(
        [layer, cos, sin](const std::vector<at::Tensor>& in) {
          return std::vector<at::Tensor>{layer->forward(in[0], cos, sin)};
        },
        {x}, layer->parameters())[0];
  }
  const at::Tensor hidden = decoder.norm(x);
  const at::Tensor logits =
      model->lm_head ? model->lm_head(hidden) : at::linear(hidden, decoder.embed_tokens->weight);
  return am::causal_lm_loss(logits, ids);
}

// bf16: the forward pass under CPU autocast, backward outside it.
bool g_bf16 = false;

Figures measure(torch::nn::Module& model, const LossFn& forward, int steps) {
  namespace compat = accelerate::compat;
  const auto loss_of = [&] {
    std::optional<accelerate::AutocastGuard> autocast;
    if (g_bf16) autocast.emplace(torch::kCPU, torch::kBFloat16);
    return forward();
  };
  model.train();
  loss_of().backward();  // creates every .grad
  Figures most;
  for (int step = 0; step < steps; ++step) {
    for (auto& p : model.parameters()) p.mutable_grad().zero_();
    const double start = static_cast<double>(compat::cpu_live_bytes());
    compat::reset_cpu_peak_bytes();
    auto loss = loss_of();
    const double held = static_cast<double>(compat::cpu_live_bytes()) - start;
    const double forward_peak = static_cast<double>(compat::cpu_peak_bytes()) - start;
    compat::reset_cpu_peak_bytes();
    loss.backward();
    loss = torch::Tensor();
    const double backward_peak = static_cast<double>(compat::cpu_peak_bytes()) - start;
    most.held = std::max(most.held, held);
    most.forward_peak = std::max(most.forward_peak, forward_peak);
    most.backward_peak = std::max(most.backward_peak, backward_peak);
  }
  return most;
}

// The model of the config's family, and its loss on one random batch.
Figures run(const std::string& config_path, int64_t seq_len, int64_t batch, int steps,
            bool checkpointing, std::string* family) {
  torch::manual_seed(0);
  try {
    am::LlamaForCausalLM model(am::read_llama_config(config_path));
    *family = "llama";
    const auto ids = torch::randint(model->config().vocab_size, {batch, seq_len});
    return measure(
        *model, [&] { return llama_loss(model, ids, checkpointing); }, steps);
  } catch (const accelerate::ConfigError&) {
  }
  am::BertForSequenceClassification model(am::read_bert_config(config_path));
  *family = "bert";
  model->bert->set_gradient_checkpointing(checkpointing);
  const auto ids = torch::randint(model->config().vocab_size, {batch, seq_len});
  const auto labels = torch::randint(model->config().num_labels(), {batch});
  return measure(
      *model, [&] { return model->loss(ids, labels); }, steps);
}

}  // namespace

int main(int argc, char** argv) {
  std::string config, checkpointing = "both", precision = "no";
  int64_t seq_len = 256, batch = 1;
  int steps = 2;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "transformer_activation_bench: %s needs a value\n", flag.c_str());
      return 2;
    }
    const std::string value = argv[i + 1];
    if (flag == "--config") {
      config = value;
    } else if (flag == "--seq_len") {
      seq_len = std::stoll(value);
    } else if (flag == "--batch") {
      batch = std::stoll(value);
    } else if (flag == "--steps") {
      steps = std::stoi(value);
    } else if (flag == "--checkpointing" && (value == "on" || value == "off" || value == "both")) {
      checkpointing = value;
    } else if (flag == "--mixed_precision" && (value == "no" || value == "bf16")) {
      precision = value;
    } else {
      std::fprintf(stderr, "transformer_activation_bench: bad flag %s %s\n", flag.c_str(),
                   value.c_str());
      return 2;
    }
  }
  if (config.empty()) {
    std::fprintf(stderr, "transformer_activation_bench: --config config.json is required\n");
    return 2;
  }
  g_bf16 = precision == "bf16";
  accelerate::compat::install_cpu_allocation_counter();
  for (const bool on : {false, true}) {
    if ((on && checkpointing == "off") || (!on && checkpointing == "on")) continue;
    std::string family;
    const Figures f = run(config, seq_len, batch, steps, on, &family);
    std::printf(
        "family %s seq_len %lld batch %lld mixed_precision %s checkpointing %s held %.0f "
        "forward_peak %.0f backward_peak %.0f peak %.0f\n",
        family.c_str(), static_cast<long long>(seq_len), static_cast<long long>(batch),
        precision.c_str(), on ? "on" : "off", f.held, f.forward_peak, f.backward_peak,
        std::max(f.forward_peak, f.backward_peak));
    std::fflush(stdout);
  }
  return 0;
}
