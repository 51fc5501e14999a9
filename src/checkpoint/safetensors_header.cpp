// Parsing and validating safetensors headers (see safetensors_header.h).
#include "checkpoint/safetensors_header.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "accelerate/common/errors.h"
#include "checkpoint/safetensors_io.h"
#include "common/strict_json.h"

namespace accelerate::safetensors {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& problem) {
  throw Error("safetensors file '" + source + "': " + problem);
}

[[noreturn]] void fail_tensor(const std::string& source, const std::string& name,
                              const std::string& problem) {
  fail(source, "tensor '" + printable(name) + "': " + problem);
}

// Parses the JSON strictly (see strict_json.h): two readers must not see
// different tensors in one header.
json parse_json(const std::string& text, const std::string& source) {
  StrictJsonProblem problem;
  std::optional<json> parsed = parse_strict_json(text, StrictJsonLimits{16}, &problem);
  if (parsed) return std::move(*parsed);
  switch (problem.kind) {
    case StrictJsonProblem::Kind::kDuplicateKey:
      fail(source, "duplicate key '" + printable(problem.key_path) + "' in header");
    case StrictJsonProblem::Kind::kSyntax:
      fail(source, "header is not valid JSON: " + printable(problem.message));
    default:
      fail(source, problem.message);
  }
}

// A JSON number that is a non-negative integer (not 2.0, not -1, not 1e30).
bool is_count(const json& value) { return value.is_number_unsigned(); }

std::vector<int64_t> parse_shape(const json& shape, const std::string& source,
                                 const std::string& name, size_t element_size, uint64_t* nbytes) {
  if (!shape.is_array()) fail_tensor(source, name, "\"shape\" is not an array");
  std::vector<int64_t> dims;
  dims.reserve(shape.size());
  // Bytes so far; kept below 2^63 so the product can never wrap.
  uint64_t bytes = element_size;
  constexpr uint64_t kLimit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  for (const auto& dim : shape) {
    if (!is_count(dim)) {
      fail_tensor(source, name,
                  "shape entry " + printable(dim.dump()) + " is not a non-negative integer");
    }
    const uint64_t d = dim.get<uint64_t>();
    if (d > kLimit) fail_tensor(source, name, "shape entry " + std::to_string(d) + " overflows");
    if (d != 0 && bytes > kLimit / d) {
      fail_tensor(source, name, "shape " + printable(shape.dump()) + " overflows");
    }
    bytes *= d;
    dims.push_back(static_cast<int64_t>(d));
  }
  *nbytes = bytes;
  return dims;
}

TensorEntry parse_entry(const std::string& name, const json& info, const std::string& source,
                        uint64_t data_size) {
  if (name.empty()) fail(source, "a tensor has an empty name");
  if (!info.is_object()) fail_tensor(source, name, "entry is not a JSON object");
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!info.contains(field)) fail_tensor(source, name, std::string("missing \"") + field + "\"");
  }
  TensorEntry entry;
  entry.name = name;
  const auto& dtype = info["dtype"];
  if (!dtype.is_string()) fail_tensor(source, name, "\"dtype\" is not a string");
  entry.dtype = dtype.get<std::string>();
  const size_t element_size = dtype_size(entry.dtype);
  if (element_size == 0)
    fail_tensor(source, name, "unknown dtype '" + printable(entry.dtype) + "'");

  uint64_t nbytes = 0;
  entry.shape = parse_shape(info["shape"], source, name, element_size, &nbytes);

  const auto& offsets = info["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !is_count(offsets[0]) ||
      !is_count(offsets[1])) {
    fail_tensor(source, name, "\"data_offsets\" is not a pair of non-negative integers");
  }
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  const std::string range =
      "data_offsets [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) + "]";
  if (entry.begin > entry.end) fail_tensor(source, name, range + " run backwards");
  if (entry.end > data_size) {
    fail_tensor(source, name,
                range + " go past the data section of " + std::to_string(data_size) +
                    " bytes (file truncated?)");
  }
  if (entry.end - entry.begin != nbytes) {
    fail_tensor(source, name,
                entry.dtype + " shape " + printable(info["shape"].dump()) + " needs " +
                    std::to_string(nbytes) + " bytes but " + range + " hold " +
                    std::to_string(entry.end - entry.begin));
  }
  return entry;
}

}  // namespace

size_t dtype_size(const std::string& dtype) {
  static const std::pair<const char*, size_t> kSizes[] = {
      {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
      {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
      {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (const auto& [name, size] : kSizes) {
    if (dtype == name) return size;
  }
  return 0;
}

std::string printable(const std::string& text) {
  constexpr size_t kMaxLength = 120;
  std::string out;
  for (size_t i = 0; i < text.size() && i < kMaxLength; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > kMaxLength) out += "...";
  return out;
}

Header parse_header(const std::string& header_json, uint64_t data_size,
                    const std::string& source_name) {
  const json root = parse_json(header_json, source_name);
  if (!root.is_object()) fail(source_name, "header is not a JSON object");

  Header header;
  header.data_offset = 8 + header_json.size();
  header.file_size = header.data_offset + data_size;
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) fail(source_name, "\"__metadata__\" is not a JSON object");
      for (const auto& [meta_key, meta_value] : value.items()) {
        if (!meta_value.is_string()) {
          fail(source_name, "metadata '" + printable(meta_key) + "' is not a string");
        }
        header.metadata[meta_key] = meta_value.get<std::string>();
      }
      continue;
    }
    header.tensors.push_back(parse_entry(key, value, source_name, data_size));
  }

  // The tensors must tile the data section: each begins where the one
  // before it ends. Ties (empty tensors) are ordered by name for a stable
  // file order.
  auto& tensors = header.tensors;
  std::sort(tensors.begin(), tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });
  uint64_t expected = 0;
  for (const auto& entry : tensors) {
    if (entry.begin != expected) {
      fail_tensor(source_name, entry.name,
                  std::string(entry.begin < expected ? "overlaps the tensor before it"
                                                     : "leaves a gap after the tensor before it") +
                      " (begins at " + std::to_string(entry.begin) + ", expected " +
                      std::to_string(expected) + ")");
    }
    expected = entry.end;
  }
  if (expected != data_size) {
    fail(source_name, "tensors cover " + std::to_string(expected) +
                          " bytes but the data section has " + std::to_string(data_size));
  }
  return header;
}

Header read_header(const std::string& path) { return read_header(File::open_read(path)); }

Header read_header(const File& file) {
  const std::string& path = file.path();
  const uint64_t file_size = file.size();
  if (file_size < 8) {
    fail(path,
         "file is " + std::to_string(file_size) + " bytes, too short for the 8-byte header length");
  }
  unsigned char length_bytes[8];
  file.read_at(length_bytes, 8, 0);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | length_bytes[i];
  if (header_size > kMaxHeaderSize) {
    fail(path, "header length " + std::to_string(header_size) + " exceeds the limit of " +
                   std::to_string(kMaxHeaderSize) + " bytes");
  }
  if (header_size > file_size - 8) {
    fail(path, "header length " + std::to_string(header_size) + " goes past the end of the " +
                   std::to_string(file_size) + "-byte file (truncated?)");
  }
  std::string text(header_size, '\0');
  file.read_at(text.data(), header_size, 8);
  return parse_header(text, file_size - 8 - header_size, path);
}

}  // namespace accelerate::safetensors
