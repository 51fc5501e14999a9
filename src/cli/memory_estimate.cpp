#include "cli/memory_estimate.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "checkpoint/safetensors_header.h"

namespace accelerate::cli {
namespace {

// Far beyond any model, and small enough that 16 bytes per parameter
// still fits in 64 bits.
constexpr uint64_t kMaxParameters = 1'000'000'000'000'000ULL;  // 1e15

}  // namespace

const std::vector<std::string>& known_estimate_dtypes() {
  static const std::vector<std::string> dtypes = {"float32", "float16", "bfloat16", "int8", "int4"};
  return dtypes;
}

std::optional<uint64_t> parse_parameter_count(const std::string& text) {
  // Exact decimal arithmetic: "1.3e9" is 13 * 10^8, never 1299999999.99.
  size_t i = 0;
  std::string digits;
  int exponent = 0;
  bool seen_point = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digits += c;
      if (seen_point) --exponent;
    } else if (c == '.' && !seen_point) {
      seen_point = true;
    } else {
      break;
    }
  }
  if (digits.empty()) return std::nullopt;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    size_t j = i + 1;
    bool negative = false;
    if (j < text.size() && (text[j] == '+' || text[j] == '-')) negative = text[j++] == '-';
    const size_t start = j;
    int value = 0;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j])) && value < 1000) {
      value = value * 10 + (text[j++] - '0');
    }
    if (j == start) return std::nullopt;
    exponent += negative ? -value : value;
    i = j;
  }
  if (i < text.size()) {
    switch (std::tolower(static_cast<unsigned char>(text[i]))) {
      case 'k':
        exponent += 3;
        break;
      case 'm':
        exponent += 6;
        break;
      case 'b':
      case 'g':
        exponent += 9;
        break;
      case 't':
        exponent += 12;
        break;
      default:
        return std::nullopt;
    }
    ++i;
  }
  if (i != text.size()) return std::nullopt;
  // Drop leading zeros, then fold the exponent into the digit string.
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));
  while (exponent < 0 && !digits.empty() && digits.back() == '0') {
    digits.pop_back();
    ++exponent;
  }
  if (digits.empty() || exponent < 0) return std::nullopt;  // zero or a fraction
  if (digits.size() + static_cast<size_t>(exponent) > 16) return std::nullopt;
  uint64_t value = 0;
  for (char c : digits) value = value * 10 + static_cast<uint64_t>(c - '0');
  for (int k = 0; k < exponent; ++k) value *= 10;
  if (value > kMaxParameters) return std::nullopt;
  return value;
}

ModelSize model_size_from_count(uint64_t parameters) {
  ModelSize size;
  size.parameters = parameters;
  size.total_bytes = parameters * 4;
  return size;
}

std::optional<uint64_t> training_bytes_with_adam(uint64_t fp32_bytes, const std::string& dtype) {
  if (dtype == "float32") {
    // weights 1x, gradients 1x, Adam's two moments 2x; the step peaks at 4x.
    return fp32_bytes * 4;
  }
  if (dtype == "float16" || dtype == "bfloat16") {
    // Mixed precision: fp32 master weights (1x), fp32 + half gradients
    // (1.5x), fp32 Adam moments (2x); the largest phase is the 2x.
    const uint64_t phases[] = {fp32_bytes, fp32_bytes + fp32_bytes / 2, fp32_bytes * 2};
    return *std::max_element(std::begin(phases), std::end(phases));
  }
  return std::nullopt;  // no training estimate for quantized weights
}

namespace {

// A dtype's size relative to float32, as Accelerate divides it.
double dtype_divisor(const std::string& dtype) {
  if (dtype == "float16" || dtype == "bfloat16") return 2;
  if (dtype == "int8") return 4;
  if (dtype == "int4") return 8;
  return 1;
}

}  // namespace

std::vector<EstimateRow> estimate_rows(const ModelSize& size,
                                       const std::vector<std::string>& dtypes) {
  std::vector<EstimateRow> rows;
  for (const auto& dtype : dtypes) {
    const double divisor = dtype_divisor(dtype);
    EstimateRow row;
    row.dtype = dtype;
    row.integral = divisor == 1;
    row.total = static_cast<double>(size.total_bytes) / divisor;
    if (size.largest_layer_bytes)
      row.largest_layer = static_cast<double>(*size.largest_layer_bytes) / divisor;
    if (auto training = training_bytes_with_adam(size.total_bytes, dtype)) {
      row.training = static_cast<double>(*training);
    }
    rows.push_back(row);
  }
  return rows;
}

std::vector<ZeroEstimateRow> zero_estimate_rows(const ModelSize& size,
                                                const std::vector<std::string>& dtypes,
                                                int processes) {
  const double n = processes;
  std::vector<ZeroEstimateRow> rows;
  for (const auto& dtype : dtypes) {
    ZeroEstimateRow row;
    row.dtype = dtype;
    if (dtype == "float32" || dtype == "float16" || dtype == "bfloat16") {
      // W: the weights in this dtype; gradients and each Adam moment are as large.
      const double w = static_cast<double>(size.total_bytes) / dtype_divisor(dtype);
      row.per_process = std::array<double, 3>{4 * w, 2 * w + 2 * w / n, w + 3 * w / n};
    }
    rows.push_back(row);
  }
  return rows;
}

std::string format_bytes(double bytes, bool integral) {
  static const char* const kUnits[] = {"bytes", "KB", "MB", "GB", "TB"};
  const char* unit = "PB";
  bool divided = false;
  for (const char* candidate : kUnits) {
    if (bytes < 1024.0) {
      unit = candidate;
      break;
    }
    bytes /= 1024.0;
    divided = true;
  }
  char text[64];
  if (integral && !divided) {
    std::snprintf(text, sizeof text, "%.0f %s", bytes, unit);
    return text;
  }
  // Two decimals, then no trailing zeros but at least one decimal: the way
  // Python prints round(x, 2).
  std::snprintf(text, sizeof text, "%.2f", bytes);
  std::string number = text;
  while (number.size() > 1 && number.back() == '0' && number[number.size() - 2] != '.')
    number.pop_back();
  return number + " " + unit;
}

namespace {

std::string with_thousands(uint64_t value) {
  std::string digits = std::to_string(value);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
  return digits;
}

std::string centered(const std::string& text, size_t width) {
  const size_t left = (width - text.size()) / 2;
  return std::string(left, ' ') + text + std::string(width - text.size() - left, ' ');
}

}  // namespace

// A boxed table, every cell centred; the first line of `cells` is the header.
std::string render_box_table(const std::vector<std::vector<std::string>>& cells) {
  std::vector<size_t> widths(cells[0].size(), 0);
  for (const auto& line : cells) {
    for (size_t c = 0; c < line.size(); ++c) widths[c] = std::max(widths[c], line[c].size() + 2);
  }
  auto rule = [&](const char* left, const char* middle, const char* right) {
    std::string text = left;
    for (size_t c = 0; c < widths.size(); ++c) {
      for (size_t k = 0; k < widths[c]; ++k) text += "─";
      text += c + 1 < widths.size() ? middle : right;
    }
    return text + "\n";
  };
  auto line = [&](const std::vector<std::string>& row) {
    std::string text = "│";
    for (size_t c = 0; c < row.size(); ++c) text += centered(row[c], widths[c]) + "│";
    return text + "\n";
  };
  std::string out = rule("┌", "┬", "┐") + line(cells[0]) + rule("├", "┼", "┤");
  for (size_t r = 1; r < cells.size(); ++r) out += line(cells[r]);
  return out + rule("└", "┴", "┘");
}

std::string render_estimate(const std::string& model_name, const ModelSize& size,
                            const std::vector<EstimateRow>& rows) {
  std::vector<std::vector<std::string>> cells = {
      {"dtype", "Largest Layer", "Total Size", "Training using Adam"}};
  for (const auto& row : rows) {
    cells.push_back({row.dtype,
                     row.largest_layer ? format_bytes(*row.largest_layer, row.integral) : "N/A",
                     format_bytes(row.total, row.integral),
                     row.training ? format_bytes(*row.training, true) : "N/A"});
  }
  std::string out = "Memory usage for loading `" + model_name +
                    "`: " + with_thousands(size.parameters) + " parameters";
  if (size.largest_layer_bytes)
    out += ", largest layer '" + safetensors::printable(size.largest_layer_name) + "'";
  out += "\n" + render_box_table(cells);
  out +=
      "Training using Adam: the largest of weights, gradients, optimizer states and the step "
      "at batch size 1, without activations.\n";
  return out;
}

std::string render_zero_estimate(const std::vector<ZeroEstimateRow>& rows, int processes) {
  std::vector<std::vector<std::string>> cells = {
      {"dtype", "ZeRO stage 0", "ZeRO stage 1", "ZeRO stage 2"}};
  for (const auto& row : rows) {
    std::vector<std::string> line = {row.dtype};
    for (size_t stage = 0; stage < 3; ++stage) {
      if (!row.per_process) {
        line.push_back("N/A");
        continue;
      }
      const double bytes = (*row.per_process)[stage];
      line.push_back(format_bytes(bytes, std::floor(bytes) == bytes));  // whole bytes without ".0"
    }
    cells.push_back(line);
  }
  return "ZeRO model state per process on " + std::to_string(processes) +
         (processes == 1 ? " process" : " processes") +
         " (parameters + gradients + Adam states, no activations):\n" + render_box_table(cells) +
         "Stage 0: data parallel, nothing sharded; stage 1 shards Adam's states; stage 2 also the "
         "gradients. All in the weights' dtype.\n";
}

}  // namespace accelerate::cli
