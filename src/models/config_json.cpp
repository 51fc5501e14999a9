#include "models/config_json.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <torch/nn/module.h>

#include "common/strict_json.h"

namespace accelerate::models {

namespace fs = std::filesystem;
using nlohmann::json;

ConfigJson::ConfigJson(const std::string& family, const std::string& path_or_folder)
    : family_(family), path_(path_or_folder) {
  if (fs::is_directory(path_)) path_ = (fs::path(path_) / "config.json").string();
  std::ifstream in(path_, std::ios::binary);
  if (!in) throw ConfigError(family_ + ": cannot read '" + path_ + "'");
  std::ostringstream text;
  text << in.rdbuf();
  StrictJsonProblem problem;
  auto parsed = parse_strict_json(text.str(), StrictJsonLimits{}, &problem);
  if (!parsed) fail(problem.message);
  if (!parsed->is_object()) fail("not a JSON object");
  root_ = std::move(*parsed);
}

void ConfigJson::fail(const std::string& what) const {
  throw ConfigError(family_ + " '" + path_ + "': " + what);
}

const json* ConfigJson::find(const json& object, const std::string& key) {
  const auto found = object.find(key);
  return found == object.end() || found->is_null() ? nullptr : &*found;
}

int64_t ConfigJson::integer(const json& object, const std::string& key, int64_t fallback,
                            const std::string& where) const {
  const json* value = find(object, key);
  if (!value) return fallback;
  if (!value->is_number_integer()) fail("\"" + where + key + "\" must be an integer");
  return value->get<int64_t>();
}

double ConfigJson::number(const json& object, const std::string& key, double fallback,
                          const std::string& where) const {
  const json* value = find(object, key);
  if (!value) return fallback;
  if (!value->is_number()) fail("\"" + where + key + "\" must be a number");
  return value->get<double>();
}

bool ConfigJson::boolean(const std::string& key, bool fallback) const {
  const json* value = find(key);
  if (!value) return fallback;
  if (!value->is_boolean()) fail("\"" + key + "\" must be true or false");
  return value->get<bool>();
}

std::string ConfigJson::text(const json& object, const std::string& key,
                             const std::string& fallback) const {
  const json* value = find(object, key);
  if (!value) return fallback;
  if (!value->is_string()) fail("\"" + key + "\" must be a string");
  return value->get<std::string>();
}

void ConfigJson::require(std::initializer_list<const char*> keys) const {
  for (const char* key : keys) {
    if (!root_.contains(key)) fail(std::string("\"") + key + "\" is missing");
  }
}

std::map<std::string, std::string> ConfigJson::other_keys(
    const std::set<std::string>& modelled) const {
  std::map<std::string, std::string> other;
  for (const auto& [key, value] : root_.items()) {
    if (!modelled.count(key)) other[key] = value.dump();
  }
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (root_.contains(key)) other[key] = root_[key].dump();
  }
  return other;
}

std::string torch_dtype_name(at::ScalarType dtype) {
  return dtype == at::kBFloat16 ? "bfloat16" : dtype == at::kHalf ? "float16" : "float32";
}

std::string saved_dtype_name(const torch::nn::Module& module) {
  for (const at::Tensor& p : module.parameters()) return torch_dtype_name(p.scalar_type());
  return "float32";
}

nlohmann::json config_json_start(const std::map<std::string, std::string>& other_keys,
                                 const std::string& model_type, const std::string& architecture,
                                 const std::string& dtype) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, text] : other_keys) out[key] = nlohmann::json::parse(text);
  if (!dtype.empty()) {
    out["torch_dtype"] = dtype;
    out["dtype"] = dtype;
  }
  out["model_type"] = model_type;
  out["architectures"] = nlohmann::json::array({architecture});
  return out;
}

void write_config_file(const std::string& directory, const std::string& text, const char* writer) {
  fs::create_directories(directory);
  const std::string path = (fs::path(directory) / "config.json").string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out.flush()) throw Error(std::string(writer) + ": cannot write '" + path + "'");
}

void require_positive(const char* family, int64_t value, const char* name) {
  if (value <= 0) {
    throw ConfigError(std::string(family) + ": " + name + " must be positive, not " +
                      std::to_string(value));
  }
}

}  // namespace accelerate::models
