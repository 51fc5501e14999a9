// The NLP example's data and metrics (examples/nlp, docs/nlp.md): labelled
// sentences (or sentence pairs) from a TSV file, tokenized once up front,
// padded per batch to the batch's longest sequence (transformers'
// DataCollatorWithPadding / tokenizer.pad(padding="longest")), and the
// accuracy and binary F1 of predictions (the `evaluate` package's "glue",
// "mrpc" metric). A library of its own so that its tests use the same code
// as the program.
#pragma once

#include <torch/torch.h>

#include <accelerate/data/data_transfer.h>
#include <accelerate/text/tokenizer.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace nlp {

// The tokenizer of a model folder (or a tokenizer.json file), ignoring the
// file's "truncation" and "padding" sections (SavedEncodingSettings::kIgnore):
// transformers' fast tokenizers replace them on every call with the call's
// own settings (here: tokenize() truncates, PadCollate pads).
// all-MiniLM-L6-v2's file has both (truncation to 128, padding to 128).
accelerate::Tokenizer load_tokenizer(const std::string& path);

// One line of the TSV file. sentence2 is empty for single sentences.
struct LabelledText {
  int64_t label = 0;
  std::string sentence1, sentence2;
};

// Reads a tab-separated file whose first line names the columns: `label`
// (0 or 1), `sentence` or `sentence1`, and optionally `sentence2` (a pair, as
// GLUE MRPC's); other columns are ignored. Keeps the first `max_samples`
// rows (0: all). Throws std::runtime_error with one line naming the file,
// the line and the problem (a missing column, a label other than 0 or 1, a
// row with too few fields, an empty file).
std::vector<LabelledText> read_labelled_tsv(const std::string& path, size_t max_samples = 0);

// A tokenized example: ids and token type ids of [CLS] A [SEP] (B [SEP]).
struct Encoded {
  std::vector<int64_t> input_ids, token_type_ids;
  int64_t label = 0;
};

// Tokenizes every row with the tokenizer's post-processor (special tokens
// added), truncated to max_length ids as transformers' truncation=True does
// (TruncationStrategy::kLongestFirst: a pair's longer sentence loses its end
// first). max_length >= 2.
std::vector<Encoded> tokenize(const accelerate::Tokenizer& tokenizer,
                              const std::vector<LabelledText>& rows, int64_t max_length);

// A map-style dataset over encoded rows (shared, so copies are cheap).
class EncodedDataset {
 public:
  explicit EncodedDataset(std::vector<Encoded> rows)
      : rows_(std::make_shared<const std::vector<Encoded>>(std::move(rows))) {}
  size_t size() const { return rows_->size(); }
  Encoded get(size_t index) const { return (*rows_)[index]; }

 private:
  std::shared_ptr<const std::vector<Encoded>> rows_;
};

// A padded batch, the tensors a BERT classifier takes ([batch, tokens],
// int64; labels [batch]).
struct TextBatch {
  at::Tensor input_ids, attention_mask, token_type_ids, labels;
};

// Pads to the longest sequence of the batch, rounded up to a multiple of
// pad_to_multiple_of (1: none; transformers uses 8 under mixed precision):
// input_ids with pad_id, attention_mask 1 for real tokens and 0 for
// padding, token_type_ids with 0.
struct PadCollate {
  int64_t pad_id = 0;
  int64_t pad_to_multiple_of = 1;
  TextBatch operator()(const std::vector<Encoded>& examples) const;
};

// Confusion counts of binary predictions; label 1 is the positive class.
struct BinaryCounts {
  int64_t true_positives = 0, false_positives = 0, false_negatives = 0, true_negatives = 0;

  // predictions, labels: [n] integer tensors of 0 and 1.
  void add(const at::Tensor& predictions, const at::Tensor& labels);
  int64_t total() const {
    return true_positives + false_positives + false_negatives + true_negatives;
  }
  double accuracy() const;
  // 2 tp / (2 tp + fp + fn); 0 when there is no positive label or prediction
  // (scikit-learn's zero_division default).
  double f1() const;
};

// "epoch N: {'accuracy': A, 'f1': F}", the numbers as Python's repr writes
// them (accelerate::python_float_repr).
std::string metrics_line(int64_t epoch, double accuracy, double f1);

}  // namespace nlp

// So the loader can pin a batch and move it to the accelerator's device.
template <>
struct accelerate::TensorTree<nlp::TextBatch> {
  template <class F>
  static nlp::TextBatch map(const nlp::TextBatch& batch, const F& fn) {
    return {fn(batch.input_ids), fn(batch.attention_mask), fn(batch.token_type_ids),
            fn(batch.labels)};
  }
};
