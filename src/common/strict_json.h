// Strict JSON parsing for files whose meaning must not depend on the reader.
// nlohmann keeps the last of two equal keys silently, so a safetensors header
// with two entries for one tensor, or a DeepSpeed config with two "stage"
// entries, would mean whatever the last one says here and maybe something
// else in Python; duplicates are refused instead. Nesting is bounded so that
// a hostile file cannot make us build an absurdly deep document. Internal;
// LibTorch-free.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace accelerate {

struct StrictJsonLimits {
  int max_depth = 32;  // objects and arrays inside one another
};

// Why parse_strict_json refused a text.
struct StrictJsonProblem {
  enum class Kind { kDuplicateKey, kTooDeep, kSyntax };
  Kind kind = Kind::kSyntax;
  // The whole problem on one line: "duplicate key 'a.b'", "JSON nested deeper
  // than N levels", or "line L, column C: <nlohmann's description>".
  std::string message;
  // The parts, for callers that word the problem their own way.
  // kDuplicateKey: the key with the keys of the objects around it, dotted
  // ("a.b"); array elements add nothing to the path.
  std::string key_path;
  // kSyntax: "line L, column C" (1-based, columns in bytes); empty where
  // nlohmann gives no position (a number too large for a double).
  std::string location;
  // kSyntax: nlohmann's description, on one line, without its prefix.
  std::string description;
};

// Parses `text`; on failure returns nullopt and fills *problem (if not null).
std::optional<nlohmann::json> parse_strict_json(const std::string& text,
                                                const StrictJsonLimits& limits,
                                                StrictJsonProblem* problem);

}  // namespace accelerate
