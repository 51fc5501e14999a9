// examples/nlp's data and metrics (examples/nlp/text_data.h): the TSV
// reader and its one-line errors, tokenization with truncation, padding per
// batch, the accuracy / F1 counts and the Python-style metrics line.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "text_data.h"

namespace {

using ::testing::HasSubstr;

class NlpDataFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("nlp-data-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const auto path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::string error_of(const std::string& text) {
    const std::string path = write("t.tsv", text);
    try {
      nlp::read_labelled_tsv(path);
    } catch (const std::runtime_error& error) {
      return error.what();
    }
    return "no error";
  }
  std::filesystem::path dir_;
};

// A WordPiece tokenizer.json in BERT's form, with the truncation and
// padding sections that all-MiniLM-L6-v2's file has.
const char* kTinyBertTokenizer = R"({
  "version": "1.0",
  "truncation": {"max_length": 4, "strategy": "LongestFirst", "stride": 0},
  "padding": {"strategy": {"Fixed": 4}, "direction": "Right", "pad_to_multiple_of": null,
              "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"},
  "added_tokens": [],
  "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                 "strip_accents": null, "lowercase": true},
  "pre_tokenizer": {"type": "BertPreTokenizer"},
  "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]},
  "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
  "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
            "max_input_chars_per_word": 100,
            "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "the": 4, "cat": 5,
                      "sat": 6, "a": 7, "dog": 8, ".": 9}}
})";

TEST_F(NlpDataFiles, ReadsSingleSentencesAndPairsByColumnName) {
  const auto single = nlp::read_labelled_tsv(
      write("single.tsv", "document\tlabel\tsentence\nca01\t0\tThe cat sat.\r\nck01\t1\tA dog.\n"));
  ASSERT_EQ(single.size(), 2u);
  EXPECT_EQ(single[0].label, 0);
  EXPECT_EQ(single[0].sentence1, "The cat sat.");
  EXPECT_EQ(single[0].sentence2, "");
  EXPECT_EQ(single[1].label, 1);
  EXPECT_EQ(single[1].sentence1, "A dog.");

  const auto pairs = nlp::read_labelled_tsv(
      write("pairs.tsv", "sentence1\tsentence2\tlabel\nthe cat\ta dog\t1\n\nx\ty\t0\nz\tw\t1\n"),
      2);
  ASSERT_EQ(pairs.size(), 2u);  // max_samples; the blank line is skipped
  EXPECT_EQ(pairs[0].sentence2, "a dog");
  EXPECT_EQ(pairs[1].label, 0);
}

TEST_F(NlpDataFiles, BadFilesAreOneLineErrorsNamingFileAndLine) {
  EXPECT_THAT(error_of(""), HasSubstr("empty file"));
  EXPECT_THAT(error_of("label\ttext\n0\tx\n"), HasSubstr("t.tsv:1: the header needs"));
  EXPECT_THAT(error_of("label\tsentence\n0\tok\n2\tbad\n"),
              HasSubstr("t.tsv:3: label '2' is not 0 or 1"));
  EXPECT_THAT(error_of("label\tsentence\n1\n"), HasSubstr("t.tsv:2: 1 fields, the header has 2"));
  EXPECT_THAT(error_of("label\tsentence\n"), HasSubstr("no examples"));
  for (const auto& message : {error_of(""), error_of("label\tsentence\n2\tx\n")}) {
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  EXPECT_THROW(nlp::read_labelled_tsv((dir_ / "missing.tsv").string()), std::runtime_error);
}

TEST_F(NlpDataFiles, TokenizerFileWithTruncationAndPaddingLoadsAndTruncationIsOurs) {
  // accelerate::Tokenizer refuses these sections; load_tokenizer drops them.
  const std::string path = write("tokenizer.json", kTinyBertTokenizer);
  EXPECT_THROW(accelerate::Tokenizer::from_file(path), std::exception);
  const auto tokenizer = nlp::load_tokenizer(dir_.string());

  const auto encoded =
      nlp::tokenize(tokenizer, {{1, "The cat sat.", ""}, {0, "the dog", "a cat"}, {1, "a", ""}}, 5);
  ASSERT_EQ(encoded.size(), 3u);
  // [CLS] the cat sat . [SEP] is 6 tokens: the 5th becomes the closing [SEP].
  EXPECT_EQ(encoded[0].input_ids, (std::vector<int64_t>{2, 4, 5, 6, 3}));
  EXPECT_EQ(encoded[0].token_type_ids, (std::vector<int64_t>{0, 0, 0, 0, 0}));
  EXPECT_EQ(encoded[0].label, 1);
  // A pair: [CLS] the dog [SEP] a cat [SEP], truncated longest-first as
  // transformers' truncation=True: 2 places for 4 tokens, one each.
  EXPECT_EQ(encoded[1].input_ids, (std::vector<int64_t>{2, 4, 3, 7, 3}));
  EXPECT_EQ(encoded[1].token_type_ids, (std::vector<int64_t>{0, 0, 0, 1, 1}));
  // Short ones are not padded here (the collate pads per batch).
  EXPECT_EQ(encoded[2].input_ids, (std::vector<int64_t>{2, 7, 3}));
  EXPECT_THROW(nlp::tokenize(tokenizer, {{0, "a", ""}}, 1), std::invalid_argument);
}

TEST(NlpCollate, PadsToTheBatchsLongestRoundedToTheMultiple) {
  std::vector<nlp::Encoded> examples(2);
  examples[0].input_ids = {2, 4, 5, 3};
  examples[0].token_type_ids = {0, 0, 0, 0};
  examples[0].label = 1;
  examples[1].input_ids = {2, 7, 3, 8, 3};
  examples[1].token_type_ids = {0, 0, 0, 1, 1};
  examples[1].label = 0;

  const nlp::TextBatch plain = nlp::PadCollate{0, 1}(examples);
  ASSERT_EQ(plain.input_ids.sizes(), (std::vector<int64_t>{2, 5}));
  EXPECT_TRUE(plain.input_ids.equal(torch::tensor({{2, 4, 5, 3, 0}, {2, 7, 3, 8, 3}})));
  EXPECT_TRUE(plain.attention_mask.equal(torch::tensor({{1, 1, 1, 1, 0}, {1, 1, 1, 1, 1}})));
  EXPECT_TRUE(plain.token_type_ids.equal(torch::tensor({{0, 0, 0, 0, 0}, {0, 0, 0, 1, 1}})));
  EXPECT_TRUE(plain.labels.equal(torch::tensor({1, 0})));

  // Only the first example: the batch is as long as it, not as the dataset.
  const nlp::TextBatch one = nlp::PadCollate{0, 1}({examples[0]});
  EXPECT_EQ(one.input_ids.size(1), 4);

  // Mixed precision's multiple of 8, with another pad id.
  const nlp::TextBatch eight = nlp::PadCollate{9, 8}(examples);
  EXPECT_EQ(eight.input_ids.size(1), 8);
  EXPECT_EQ(eight.input_ids[0][7].item<int64_t>(), 9);
  EXPECT_EQ(eight.attention_mask.sum().item<int64_t>(), 9);
}

TEST(NlpMetrics, CountsGiveAccuracyAndBinaryF1) {
  nlp::BinaryCounts counts;
  // predictions 1 1 0 0 1 0, labels 1 0 0 1 1 0: tp 2, fp 1, fn 1, tn 2.
  counts.add(torch::tensor({1, 1, 0}), torch::tensor({1, 0, 0}));
  counts.add(torch::tensor({0, 1, 0}), torch::tensor({1, 1, 0}));
  EXPECT_EQ(counts.total(), 6);
  EXPECT_EQ(counts.true_positives, 2);
  EXPECT_EQ(counts.false_positives, 1);
  EXPECT_EQ(counts.false_negatives, 1);
  EXPECT_EQ(counts.true_negatives, 2);
  EXPECT_DOUBLE_EQ(counts.accuracy(), 4.0 / 6.0);
  EXPECT_DOUBLE_EQ(counts.f1(), 2.0 / 3.0);  // 2*2 / (2*2 + 1 + 1)

  nlp::BinaryCounts negatives;  // no positive label or prediction: F1 0, as scikit-learn
  negatives.add(torch::tensor({0, 0}), torch::tensor({0, 0}));
  EXPECT_DOUBLE_EQ(negatives.accuracy(), 1.0);
  EXPECT_DOUBLE_EQ(negatives.f1(), 0.0);
  EXPECT_THROW(negatives.add(torch::tensor({0}), torch::tensor({0, 1})), std::invalid_argument);
}

TEST(NlpMetrics, LineIsPythonsDictRepr) {
  // What `print(f"epoch {epoch}:", {'accuracy': a, 'f1': f})` prints in Python.
  EXPECT_EQ(nlp::metrics_line(0, 0.686, 2.0 * 118 / (2.0 * 118 + 31 + 23)),
            "epoch 0: {'accuracy': 0.686, 'f1': 0.8137931034482758}");
  EXPECT_EQ(nlp::metrics_line(2, 1.0, 0.0), "epoch 2: {'accuracy': 1.0, 'f1': 0.0}");
  EXPECT_EQ(nlp::metrics_line(1, 0.1 + 0.2, 1e-05),
            "epoch 1: {'accuracy': 0.30000000000000004, 'f1': 1e-05}");
}

}  // namespace
