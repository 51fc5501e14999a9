// Text generation for the GPT example: autoregressive sampling from a Gpt.
//
//   auto ids = gpt::generate(model, tokenizer.encode("The jury"), 50, 0.8, 40, /*seed=*/1);
//   std::cout << tokenizer.decode(ids);
#pragma once

#include <cstdint>
#include <vector>

#include "presets.h"

namespace gpt {

// Returns the prompt followed by max_new_tokens sampled tokens. Each step
// runs the model on the last n_positions tokens (no key/value cache) and
// draws the next token from softmax(logits / temperature), restricted to the
// top_k most likely tokens (0: all; ties with the k-th all stay in). A
// temperature of 0 picks the most likely token (greedy; the seed is unused).
// Sampling uses a private CPU generator seeded with `seed`, so the same seed
// gives the same tokens and the global RNG is left alone. Runs under
// NoGradGuard in eval mode and restores the model's training mode after.
// Throws std::invalid_argument for an empty prompt, a token outside the
// vocab, or a negative max_new_tokens, temperature or top_k.
std::vector<int32_t> generate(Gpt& model, std::vector<int32_t> prompt, int64_t max_new_tokens,
                              double temperature, int64_t top_k, uint64_t seed);

}  // namespace gpt
