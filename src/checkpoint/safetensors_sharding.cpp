// Shard planning and index files for save_model (see safetensors_sharding.h).
#include "checkpoint/safetensors_sharding.h"

#include <cctype>
#include <cstdio>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "accelerate/common/errors.h"
#include "checkpoint/safetensors_header.h"
#include "checkpoint/safetensors_io.h"

namespace accelerate::safetensors {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

[[noreturn]] void fail_index(const std::string& path, const std::string& problem) {
  throw Error("index file '" + path + "': " + problem);
}

}  // namespace

uint64_t parse_size(const std::string& text) {
  struct Unit {
    const char* suffix;
    uint64_t multiplier;
    bool bits_if_lowercase_b;
  };
  // Longest suffixes first so "GIB" is not taken for "B".
  static const Unit kUnits[] = {{"GIB", uint64_t{1} << 30, false},
                                {"MIB", uint64_t{1} << 20, false},
                                {"KIB", uint64_t{1} << 10, false},
                                {"GB", 1'000'000'000, true},
                                {"MB", 1'000'000, true},
                                {"KB", 1'000, true},
                                {"B", 1, false},
                                {"", 1, false}};
  const std::string up = upper(text);
  for (const auto& unit : kUnits) {
    if (!ends_with(up, unit.suffix)) continue;
    const std::string digits = text.substr(0, text.size() - std::string(unit.suffix).size());
    uint64_t value = 0;
    bool ok = !digits.empty() && digits.size() <= 19;
    for (char c : digits) ok = ok && std::isdigit(static_cast<unsigned char>(c));
    if (ok) value = std::stoull(digits);
    if (!ok || value > std::numeric_limits<uint64_t>::max() / unit.multiplier) break;
    value *= unit.multiplier;
    return unit.bits_if_lowercase_b && text.back() == 'b' ? value / 8 : value;
  }
  throw ConfigError("max_shard_size '" + printable(text) +
                    "' is not a size: use an integer, optionally followed by a unit (\"5GB\", "
                    "\"500MB\", \"2GiB\")");
}

std::vector<std::vector<size_t>> plan_shards(const std::vector<uint64_t>& sizes,
                                             uint64_t max_shard_size) {
  std::vector<std::vector<size_t>> shards(1);
  uint64_t current = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    // Overflow-free form of current + sizes[i] > max_shard_size.
    const bool too_big = sizes[i] > max_shard_size || current > max_shard_size - sizes[i];
    if (!shards.back().empty() && too_big) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(i);
    current += sizes[i];
  }
  return shards;
}

std::string shard_file_name(const std::string& stem, size_t index, size_t count,
                            const std::string& extension) {
  char numbers[32];
  std::snprintf(numbers, sizeof(numbers), "-%05zu-of-%05zu", index + 1, count);
  return stem + numbers + extension;
}

bool is_shard_file_name(const std::string& name, const std::string& stem,
                        const std::string& extension) {
  const std::string pattern = "-00000-of-00000";
  if (name.size() != stem.size() + pattern.size() + extension.size()) return false;
  if (name.compare(0, stem.size(), stem) != 0 || !ends_with(name, extension)) return false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = name[stem.size() + i];
    if (pattern[i] == '0' ? !std::isdigit(static_cast<unsigned char>(c)) : c != pattern[i])
      return false;
  }
  return true;
}

std::string index_json(const ShardIndex& index) {
  nlohmann::json root;
  root["metadata"]["total_size"] = index.total_size;
  root["weight_map"] = nlohmann::json::object();
  for (const auto& [name, file] : index.weight_map) root["weight_map"][name] = file;
  return root.dump(2, ' ', /*ensure_ascii=*/true) + "\n";
}

ShardIndex read_index(const std::string& path) {
  const File file = File::open_read(path);
  const uint64_t size = file.size();
  if (size > kMaxHeaderSize)
    fail_index(path, "larger than " + std::to_string(kMaxHeaderSize) + " bytes");
  std::string text(size, '\0');
  file.read_at(text.data(), size, 0);
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail_index(path, std::string("not valid JSON: ") + printable(e.what()));
  }
  if (!root.is_object() || !root.contains("weight_map") || !root["weight_map"].is_object()) {
    fail_index(path, "no \"weight_map\" object");
  }
  ShardIndex index;
  if (root.contains("metadata") && root["metadata"].is_object() &&
      root["metadata"].contains("total_size") &&
      root["metadata"]["total_size"].is_number_unsigned()) {
    index.total_size = root["metadata"]["total_size"].get<uint64_t>();
  }
  std::set<std::string> files;
  for (const auto& [name, value] : root["weight_map"].items()) {
    if (!value.is_string())
      fail_index(path, "weight_map entry '" + printable(name) + "' is not a file name");
    const std::string file_name = value.get<std::string>();
    if (file_name.empty() || file_name == "." || file_name == ".." ||
        file_name.find('/') != std::string::npos || file_name.find('\0') != std::string::npos) {
      fail_index(path, "weight_map entry '" + printable(name) + "' names '" + printable(file_name) +
                           "', which is not a plain file name");
    }
    index.weight_map[name] = file_name;
    files.insert(file_name);
  }
  index.files.assign(files.begin(), files.end());
  return index;
}

}  // namespace accelerate::safetensors
