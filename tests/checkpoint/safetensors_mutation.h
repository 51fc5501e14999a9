// Seeded random damage to safetensors files, for tests that check a reader
// refuses every bad file with accelerate::Error and never crashes. Torch-free.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <random>
#include <string>

#include "accelerate/common/errors.h"

namespace accelerate::safetensors::testing {

struct MutationStats {
  uint64_t tried = 0, accepted = 0, refused = 0, other_exceptions = 0;
  // Refusals from checks past JSON parsing (their messages name a tensor):
  // shows the damage reaches the deep checks, not just the length prefix.
  uint64_t refused_naming_tensor = 0;
  std::string first_other;  // what() of the first non-Error exception
};

namespace detail {

inline uint64_t length_prefix(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0 && bytes.size() >= 8; --i)
    n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  return n;
}

inline void set_length_prefix(std::string& bytes, uint64_t n) {
  for (int i = 0; i < 8 && static_cast<size_t>(i) < bytes.size(); ++i) {
    bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  }
}

// Replaces part of the JSON text with a token chosen to break assumptions,
// then (usually) fixes the length prefix so the parser sees the edit.
inline void edit_json(std::string& bytes, std::mt19937_64& rng) {
  static const char* kTokens[] = {"-1",
                                  "0",
                                  "1",
                                  "4",
                                  "1.5",
                                  "1e400",
                                  "18446744073709551615",
                                  "18446744073709551616",
                                  "9223372036854775808",
                                  "4294967296",
                                  "null",
                                  "true",
                                  "\"\"",
                                  "\"F32\"",
                                  "\"BOOL\"",
                                  "\"X\"",
                                  "[]",
                                  "[0]",
                                  "[0,0]",
                                  "{}",
                                  "[",
                                  "]",
                                  "{",
                                  "}",
                                  ",",
                                  ":",
                                  "\"",
                                  "\"__metadata__\"",
                                  "\"a.weight\"",
                                  "\\u0000",
                                  "\xff"};
  const uint64_t header_size = length_prefix(bytes);
  if (bytes.size() < 9 || header_size == 0 || header_size > bytes.size() - 8) return;
  const size_t begin = 8 + rng() % header_size;
  const size_t length = rng() % 4 == 0 ? 0 : 1 + rng() % 6;
  const size_t erase = std::min<size_t>(length, 8 + header_size - begin);
  const std::string token = kTokens[rng() % (sizeof(kTokens) / sizeof(kTokens[0]))];
  bytes.replace(begin, erase, token);
  if (rng() % 8 != 0) set_length_prefix(bytes, header_size - erase + token.size());
}

inline void mutate_once(std::string& bytes, std::mt19937_64& rng) {
  if (bytes.empty()) return;
  switch (rng() % 6) {
    case 0:  // bit flips
      for (int i = 0, n = 1 + rng() % 3; i < n; ++i)
        bytes[rng() % bytes.size()] ^= 1 << (rng() % 8);
      break;
    case 1:  // truncation
      bytes.resize(rng() % bytes.size());
      break;
    case 2: {  // header length rewrite: near the truth, or anything at all
      const uint64_t n = length_prefix(bytes);
      const uint64_t choices[] = {
          0, n - 1, n + 1, n + 8, uint64_t{1} << 63, ~uint64_t{0}, 99'999'999, 100'000'001, rng()};
      set_length_prefix(bytes, choices[rng() % (sizeof(choices) / sizeof(choices[0]))]);
      break;
    }
    case 3:
    case 4:
      edit_json(bytes, rng);
      break;
    default: {  // insert or delete bytes anywhere
      const size_t at = rng() % bytes.size();
      if (rng() % 2) {
        bytes.insert(at, std::string(1 + rng() % 8, static_cast<char>(rng())));
      } else {
        bytes.erase(at, 1 + rng() % 8);
      }
    }
  }
}

}  // namespace detail

// Calls `read(mutated bytes)` on copies of `original` with 1-3 random
// mutations each: at least `min_tries` times (so a loaded machine still
// tests enough), then until `budget` has passed or `max_tries` were made.
inline MutationStats run_mutations(const std::string& original, uint64_t seed,
                                   std::chrono::milliseconds budget, uint64_t min_tries,
                                   uint64_t max_tries,
                                   const std::function<void(const std::string&)>& read) {
  std::mt19937_64 rng(seed);
  MutationStats stats;
  const auto deadline = std::chrono::steady_clock::now() + budget;
  while (stats.tried < min_tries ||
         (stats.tried < max_tries && std::chrono::steady_clock::now() < deadline)) {
    std::string bytes = original;
    for (int i = 0, n = 1 + rng() % 3; i < n; ++i) detail::mutate_once(bytes, rng);
    ++stats.tried;
    try {
      read(bytes);
      ++stats.accepted;
    } catch (const Error& e) {
      ++stats.refused;
      if (std::string(e.what()).find("tensor '") != std::string::npos)
        ++stats.refused_naming_tensor;
    } catch (const std::exception& e) {
      if (stats.other_exceptions++ == 0) stats.first_other = e.what();
    } catch (...) {
      if (stats.other_exceptions++ == 0) stats.first_other = "(not a std::exception)";
    }
  }
  return stats;
}

}  // namespace accelerate::safetensors::testing
