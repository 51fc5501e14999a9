// The truncation of `tokenizers` (its truncate_encodings), applied to the
// model's ids of one text or two before the post-processor adds its special
// tokens (include/accelerate/text/tokenizer.h, TruncationOptions).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "accelerate/text/tokenizer.h"

namespace accelerate::detail {

// Cuts `first` (and `second`, when given) so that with `special_tokens`
// added they hold at most options.max_length() ids. Throws
// accelerate::Error (one line) where `tokenizers` refuses: a strategy
// that cannot remove enough from its sequence, only_second without a
// second sequence, and (where `tokenizers` would wrap around) a max_length
// below the special tokens' count.
// How many ids of text `sequence` (0: the first, 1: the second) tokenizers
// 0.23 produces before it truncates: it stops tokenizing a text at the
// first word that brings it to max_length ids (not the room left by the
// special tokens; added tokens in the text count but do not stop it),
// except the first text under only_second. Where a text
// is longer than max_length this changes where longest_first cuts, and
// `tokenizers` (so transformers 5) is the reference.
size_t tokenize_limit(const TruncationOptions& options, int sequence);

void truncate_sequences(std::vector<int32_t>& first, std::vector<int32_t>* second,
                        size_t special_tokens, const TruncationOptions& options);

}  // namespace accelerate::detail
