#include "text_data.h"

#include <accelerate/tracking/python_number.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>

namespace nlp {
namespace {

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> fields;
  size_t start = 0;
  while (true) {
    const size_t tab = line.find('\t', start);
    fields.push_back(
        line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) return fields;
    start = tab + 1;
  }
}

// The index of the first of `names` among the header's columns, or -1.
int column_of(const std::vector<std::string>& header, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const auto found = std::find(header.begin(), header.end(), name);
    if (found != header.end()) return static_cast<int>(found - header.begin());
  }
  return -1;
}

}  // namespace

accelerate::Tokenizer load_tokenizer(const std::string& path) {
  const std::string file = std::filesystem::is_directory(path) ? path + "/tokenizer.json" : path;
  if (!std::filesystem::exists(file))
    throw std::runtime_error(file + ": cannot open (scripts/fetch-minilm.sh fetches MiniLM)");
  // MiniLM's file carries truncation and padding sections; the example pads
  // and truncates each batch itself, as transformers' tokenizers do.
  return accelerate::Tokenizer::from_file(file, accelerate::SavedEncodingSettings::kIgnore);
}

std::vector<LabelledText> read_labelled_tsv(const std::string& path, size_t max_samples) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error(
        path + ": cannot open (scripts/fetch-brown-genre.sh writes the default data)");
  }
  std::string line;
  if (!std::getline(in, line)) throw std::runtime_error(path + ": empty file (no header line)");
  if (!line.empty() && line.back() == '\r') line.pop_back();
  const std::vector<std::string> header = split_tabs(line);
  const int label_column = column_of(header, {"label"});
  const int first_column = column_of(header, {"sentence1", "sentence"});
  const int second_column = column_of(header, {"sentence2"});
  if (label_column < 0 || first_column < 0) {
    throw std::runtime_error(path + ":1: the header needs the columns 'label' and 'sentence' (or " +
                             "'sentence1', with 'sentence2' for pairs), separated by tabs");
  }
  const size_t needed =
      static_cast<size_t>(std::max({label_column, first_column, second_column})) + 1;
  std::vector<LabelledText> rows;
  for (size_t number = 2; (max_samples == 0 || rows.size() < max_samples) && std::getline(in, line);
       ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::vector<std::string> fields = split_tabs(line);
    const std::string where = path + ":" + std::to_string(number) + ": ";
    if (fields.size() < needed) {
      throw std::runtime_error(where + std::to_string(fields.size()) + " fields, the header has " +
                               std::to_string(header.size()));
    }
    const std::string& label = fields[static_cast<size_t>(label_column)];
    if (label != "0" && label != "1") {
      throw std::runtime_error(where + "label '" + label + "' is not 0 or 1");
    }
    LabelledText row;
    row.label = label == "1" ? 1 : 0;
    row.sentence1 = fields[static_cast<size_t>(first_column)];
    if (second_column >= 0) row.sentence2 = fields[static_cast<size_t>(second_column)];
    rows.push_back(std::move(row));
  }
  if (rows.empty()) throw std::runtime_error(path + ": no examples after the header");
  return rows;
}

std::vector<Encoded> tokenize(const accelerate::Tokenizer& tokenizer,
                              const std::vector<LabelledText>& rows, int64_t max_length) {
  if (max_length < 2) {
    throw std::invalid_argument("max_length must be at least 2, not " + std::to_string(max_length));
  }
  std::vector<Encoded> encoded;
  encoded.reserve(rows.size());
  // transformers' truncation=True: longest_first, special tokens kept.
  const auto truncation =
      accelerate::TruncationOptions().max_length(static_cast<size_t>(max_length));
  for (const LabelledText& row : rows) {
    const accelerate::Encoding encoding =
        row.sentence2.empty() ? tokenizer.encode_with_types(row.sentence1, truncation)
                              : tokenizer.encode_pair(row.sentence1, row.sentence2, truncation);
    Encoded out;
    out.input_ids.assign(encoding.ids.begin(), encoding.ids.end());
    out.token_type_ids.assign(encoding.type_ids.begin(), encoding.type_ids.end());
    out.label = row.label;
    encoded.push_back(std::move(out));
  }
  return encoded;
}

TextBatch PadCollate::operator()(const std::vector<Encoded>& examples) const {
  const auto rows = static_cast<int64_t>(examples.size());
  int64_t longest = 0;
  for (const Encoded& example : examples) {
    longest = std::max(longest, static_cast<int64_t>(example.input_ids.size()));
  }
  const int64_t multiple = std::max<int64_t>(pad_to_multiple_of, 1);
  const int64_t tokens = (longest + multiple - 1) / multiple * multiple;
  TextBatch batch;
  batch.input_ids = torch::full({rows, tokens}, pad_id, torch::kLong);
  batch.attention_mask = torch::zeros({rows, tokens}, torch::kLong);
  batch.token_type_ids = torch::zeros({rows, tokens}, torch::kLong);
  batch.labels = torch::empty({rows}, torch::kLong);
  auto ids = batch.input_ids.accessor<int64_t, 2>();
  auto mask = batch.attention_mask.accessor<int64_t, 2>();
  auto types = batch.token_type_ids.accessor<int64_t, 2>();
  auto labels = batch.labels.accessor<int64_t, 1>();
  for (int64_t row = 0; row < rows; ++row) {
    const Encoded& example = examples[static_cast<size_t>(row)];
    for (size_t t = 0; t < example.input_ids.size(); ++t) {
      ids[row][static_cast<int64_t>(t)] = example.input_ids[t];
      mask[row][static_cast<int64_t>(t)] = 1;
      types[row][static_cast<int64_t>(t)] = example.token_type_ids[t];
    }
    labels[row] = example.label;
  }
  return batch;
}

void BinaryCounts::add(const at::Tensor& predictions, const at::Tensor& labels) {
  const at::Tensor predicted = predictions.to(torch::kCPU, torch::kLong).flatten();
  const at::Tensor actual = labels.to(torch::kCPU, torch::kLong).flatten();
  if (predicted.numel() != actual.numel()) {
    throw std::invalid_argument("BinaryCounts::add: " + std::to_string(predicted.numel()) +
                                " predictions but " + std::to_string(actual.numel()) + " labels");
  }
  const at::Tensor positive = predicted.eq(1), truly = actual.eq(1);
  true_positives += (positive & truly).sum().item<int64_t>();
  false_positives += (positive & ~truly).sum().item<int64_t>();
  false_negatives += (~positive & truly).sum().item<int64_t>();
  true_negatives += (~positive & ~truly).sum().item<int64_t>();
}

double BinaryCounts::accuracy() const {
  return total() == 0
             ? 0.0
             : static_cast<double>(true_positives + true_negatives) / static_cast<double>(total());
}

double BinaryCounts::f1() const {
  const int64_t denominator = 2 * true_positives + false_positives + false_negatives;
  return denominator == 0
             ? 0.0
             : 2.0 * static_cast<double>(true_positives) / static_cast<double>(denominator);
}

std::string metrics_line(int64_t epoch, double accuracy, double f1) {
  return "epoch " + std::to_string(epoch) +
         ": {'accuracy': " + accelerate::python_float_repr(accuracy) +
         ", 'f1': " + accelerate::python_float_repr(f1) + "}";
}

}  // namespace nlp
