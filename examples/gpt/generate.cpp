#include "generate.h"

#include <ATen/CPUGeneratorImpl.h>
#include <accelerate/common/scope_guard.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace gpt {
namespace {

void check_arguments(const Gpt& model, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                     double temperature, int64_t top_k) {
  const auto require = [](bool ok, const std::string& problem) {
    if (!ok) throw std::invalid_argument("generate: " + problem);
  };
  require(!prompt.empty(), "the prompt is empty (give at least one token)");
  require(max_new_tokens >= 0, "max_new_tokens " + std::to_string(max_new_tokens) + " is negative");
  require(std::isfinite(temperature) && temperature >= 0,
          "temperature " + std::to_string(temperature) + " is not a finite number >= 0");
  require(top_k >= 0, "top_k " + std::to_string(top_k) + " is negative");
  const int64_t vocab = model->config().vocab_size;
  for (size_t i = 0; i < prompt.size(); ++i) {
    require(prompt[i] >= 0 && prompt[i] < vocab,
            "prompt token " + std::to_string(prompt[i]) + " at index " + std::to_string(i) +
                " is not in [0, " + std::to_string(vocab) + ")");
  }
}

// The next token from one row of logits [vocab] (CPU, double).
int64_t pick(torch::Tensor logits, double temperature, int64_t top_k, at::Generator& generator) {
  if (temperature == 0) return logits.argmax().item<int64_t>();
  logits = logits / temperature;
  if (top_k > 0 && top_k < logits.size(0)) {
    const auto kth = std::get<0>(logits.topk(top_k)).min();
    logits = logits.masked_fill(logits < kth, -std::numeric_limits<double>::infinity());
  }
  const auto probabilities = torch::softmax(logits, 0);
  return at::multinomial(probabilities, 1, false, generator).item<int64_t>();
}

}  // namespace

std::vector<int32_t> generate(Gpt& model, std::vector<int32_t> prompt, int64_t max_new_tokens,
                              double temperature, int64_t top_k, uint64_t seed) {
  check_arguments(model, prompt, max_new_tokens, temperature, top_k);
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  accelerate::ScopeGuard restore([&] { model->train(was_training); });
  // CPU sampling from a private generator: the same tokens whatever device
  // the model is on, and no draw from the global generators.
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto device = model->transformer->wte->weight.device();
  const auto context = static_cast<size_t>(model->config().n_positions);
  std::vector<int32_t> tokens = std::move(prompt);
  tokens.reserve(tokens.size() + static_cast<size_t>(max_new_tokens));
  for (int64_t step = 0; step < max_new_tokens; ++step) {
    const size_t start = tokens.size() > context ? tokens.size() - context : 0;
    const auto input =
        torch::tensor(std::vector<int32_t>(tokens.begin() + start, tokens.end()), torch::kInt)
            .to(device, torch::kLong)
            .unsqueeze(0);
    const auto last = model->forward(input)[0][-1].to(torch::kCPU, torch::kDouble);
    tokens.push_back(static_cast<int32_t>(pick(last, temperature, top_k, generator)));
  }
  return tokens;
}

}  // namespace gpt
