// Strict JSON parsing (see strict_json.h).
#include "common/strict_json.h"

#include <algorithm>
#include <set>
#include <vector>

namespace accelerate {
namespace {

using nlohmann::json;

// Thrown from inside the parser's callback, caught in parse_strict_json.
struct CallbackFailure {
  StrictJsonProblem problem;
};

// "line L, column C" of the byte nlohmann stopped at. e.byte counts the bytes
// read, the offending one included; nlohmann's own count is not used.
std::string location_of(const std::string& text, size_t bytes_read) {
  const size_t offset = bytes_read == 0 ? 0 : std::min(bytes_read - 1, text.size());
  const size_t line = 1 + std::count(text.begin(), text.begin() + offset, '\n');
  const size_t line_start = text.rfind('\n', offset == 0 ? 0 : offset - 1);
  const size_t column =
      line_start == std::string::npos || offset == 0 ? offset + 1 : offset - line_start;
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

// nlohmann's description on one line, without "[json.exception.<id>] " and
// "parse error at line L, column C: ".
std::string description_of(const json::exception& e) {
  std::string what = e.what();
  if (what.rfind("[json.exception.", 0) == 0) {
    const size_t close = what.find("] ");
    if (close != std::string::npos) what.erase(0, close + 2);
  }
  if (what.rfind("parse error", 0) == 0) {
    const size_t colon = what.find(": ");
    if (colon != std::string::npos) what.erase(0, colon + 2);
  }
  std::replace(what.begin(), what.end(), '\n', ' ');
  return what;
}

}  // namespace

std::optional<json> parse_strict_json(const std::string& text, const StrictJsonLimits& limits,
                                      StrictJsonProblem* problem) {
  using Kind = StrictJsonProblem::Kind;
  struct Frame {
    std::set<std::string> keys;
    std::string current;  // the key whose value is being read (objects only)
    bool is_array = false;
  };
  std::vector<Frame> frames;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth > limits.max_depth) {
      StrictJsonProblem too_deep;
      too_deep.kind = Kind::kTooDeep;
      too_deep.message = "JSON nested deeper than " + std::to_string(limits.max_depth) + " levels";
      throw CallbackFailure{std::move(too_deep)};
    }
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        frames.push_back({{}, {}, event == json::parse_event_t::array_start});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!frames.empty()) frames.pop_back();
        break;
      case json::parse_event_t::key: {
        if (frames.empty()) break;
        const auto& key = parsed.get_ref<const std::string&>();
        if (!frames.back().keys.insert(key).second) {
          StrictJsonProblem duplicate;
          duplicate.kind = Kind::kDuplicateKey;
          for (size_t i = 0; i + 1 < frames.size(); ++i) {
            if (!frames[i].is_array) duplicate.key_path += frames[i].current + ".";
          }
          duplicate.key_path += key;
          duplicate.message = "duplicate key '" + duplicate.key_path + "'";
          throw CallbackFailure{std::move(duplicate)};
        }
        frames.back().current = key;
        break;
      }
      default:
        break;
    }
    return true;
  };
  StrictJsonProblem found;
  try {
    return json::parse(text, callback);
  } catch (CallbackFailure& failure) {
    found = std::move(failure.problem);
  } catch (const json::exception& e) {
    // parse_error knows where it stopped; out_of_range (a number too large)
    // does not.
    const auto* parse_error = dynamic_cast<const json::parse_error*>(&e);
    found.kind = Kind::kSyntax;
    found.location = parse_error ? location_of(text, parse_error->byte) : "";
    found.description = description_of(e);
    found.message =
        found.location.empty() ? found.description : found.location + ": " + found.description;
  }
  if (problem) *problem = std::move(found);
  return std::nullopt;
}

}  // namespace accelerate
