// BpeTokenizer: training, encoding, decoding.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "accelerate/common/errors.h"
#include "accelerate/text/bpe_tokenizer.h"
#include "support/error_message.h"
#include "text/bpe_test_support.h"

namespace accelerate {
namespace {

using testing::error_of;
using testing::generated_text;
using Merges = std::vector<BpeTokenizer::Merge>;

BpeTokenizer tokenizer_for_round_trips() {
  return BpeTokenizer::train(generated_text(1, 20000), 600);
}

TEST(BpeTokenizerTraining, LearnsTheTextbookExample) {
  // "aaabdaaabac": aa (4 times) first; then ab and (aa)a tie at 2, and the
  // smaller pair (97, 98) wins; then (aa)(ab). Every pair left occurs once.
  const auto tokenizer = BpeTokenizer::train("aaabdaaabac", 1000);
  EXPECT_EQ(tokenizer.merges(), (Merges{{'a', 'a'}, {'a', 'b'}, {256, 257}}));
  EXPECT_EQ(tokenizer.vocab_size(), 256 + 3 + 1);
  EXPECT_EQ(tokenizer.token_bytes(258), "aaab");
  EXPECT_EQ(tokenizer.encode("aaabdaaabac"), (std::vector<int32_t>{258, 'd', 258, 'a', 'c'}));
}

TEST(BpeTokenizerTraining, StopsAtTheRequestedVocabSize) {
  const auto tokenizer = BpeTokenizer::train("aaabdaaabac", 258);
  EXPECT_EQ(tokenizer.merges(), (Merges{{'a', 'a'}}));
  EXPECT_EQ(tokenizer.vocab_size(), 258);
  EXPECT_EQ(tokenizer.end_of_text_id(), 257);
}

TEST(BpeTokenizerTraining, MinPairCountOneMergesUntilEachWordIsOneToken) {
  const auto tokenizer =
      BpeTokenizer::train("aaabdaaabac", 1000, BpeTrainOptions().min_pair_count(1));
  EXPECT_EQ(tokenizer.encode("aaabdaaabac").size(), 1u);
  EXPECT_EQ(tokenizer.merges().size(), 7u);  // 11 bytes -> 5 tokens after 3 merges -> 1
}

TEST(BpeTokenizerTraining, TiesGoToTheSmallestLeftThenRightId) {
  // Pieces "xy", " zw", " xy", " zw": (x,y), (' ',z) and (z,w) all occur twice.
  const auto tokenizer = BpeTokenizer::train("xy zw xy zw", 1000);
  EXPECT_EQ(tokenizer.merges(), (Merges{{' ', 'z'}, {'x', 'y'}, {256, 'w'}}));
}

TEST(BpeTokenizerTraining, MergesNeverCrossWordsOrTexts) {
  // "ab" pairs only occur across the space or across the two texts.
  const auto tokenizer = BpeTokenizer::train(std::vector<std::string>{"a", "b", "a", "b"}, 1000,
                                             BpeTrainOptions().min_pair_count(1));
  EXPECT_TRUE(tokenizer.merges().empty());
  const auto spaced = BpeTokenizer::train("xa bx xa bx", 1000);
  for (const auto& [left, right] : spaced.merges()) {
    EXPECT_FALSE(left == 'a' && right == ' ') << "merged across a word boundary";
  }
}

TEST(BpeTokenizerTraining, IsDeterministicAndIndependentOfTextOrder) {
  std::vector<std::string> texts;
  for (uint32_t seed = 0; seed < 8; ++seed) texts.push_back(generated_text(seed, 2000));
  const auto first = BpeTokenizer::train(texts, 700);
  EXPECT_EQ(BpeTokenizer::train(texts, 700), first);
  std::reverse(texts.begin(), texts.end());
  EXPECT_EQ(BpeTokenizer::train(texts, 700), first);
  EXPECT_GT(first.merges().size(), 100u);
}

TEST(BpeTokenizerTraining, GivesTheSameMergesOnEveryMachine) {
  // Pinned: a change here changes every trained tokenizer.
  const auto tokenizer = BpeTokenizer::train(generated_text(7, 5000), 267);
  EXPECT_EQ(tokenizer.merges(), (Merges{{'e', 'r'},
                                        {'t', 'h'},
                                        {' ', 256 + 1},  // " th"
                                        {' ', 'r'},
                                        {'d', 'o'},
                                        {'a', 'n'},
                                        {'n', 'n'},
                                        {'u', 256 + 6},  // "unn"
                                        {'i', 'n'},
                                        {256 + 8, 'g'}}));  // "ing"
}

TEST(BpeTokenizerTraining, IncrementalCountsMatchRecountingBeforeEachMerge) {
  for (uint32_t seed = 20; seed < 25; ++seed) {
    std::mt19937 generator(seed);
    const std::string text = generated_text(seed, 3000) + testing::random_bytes(generator, 500);
    const auto tokenizer = BpeTokenizer::train(text, 257 + 400);
    EXPECT_GT(tokenizer.merges().size(), 150u);  // the text runs out of pairs seen twice
    EXPECT_EQ(tokenizer.merges(), testing::reference_train(text, 400)) << "seed " << seed;
  }
}

TEST(BpeTokenizerTraining, EmptyTextGivesByteTokensOnly) {
  const auto tokenizer = BpeTokenizer::train("", 1000);
  EXPECT_EQ(tokenizer.vocab_size(), BpeTokenizer::kMinVocabSize);
  EXPECT_EQ(tokenizer.encode("hi"), (std::vector<int32_t>{'h', 'i'}));
}

TEST(BpeTokenizerTraining, RefusesVocabSizesOutsideItsBounds) {
  EXPECT_EQ(error_of([] { BpeTokenizer::train("text", 256); }),
            "BpeTokenizer::train: vocab_size 256 is below 257 (the 256 byte tokens and "
            "<|endoftext|>)");
  EXPECT_THROW(BpeTokenizer::train("text", -5), ConfigError);
  EXPECT_EQ(error_of([] { BpeTokenizer::train("text", BpeTokenizer::kMaxVocabSize + 1); }),
            "BpeTokenizer::train: vocab_size 16777217 is above the maximum 16777216");
  EXPECT_EQ(error_of([] { BpeTokenizer::train("text", 300, BpeTrainOptions().min_pair_count(0)); }),
            "BpeTokenizer::train: min_pair_count 0 must be at least 1");
  EXPECT_EQ(BpeTokenizer::train("text", 257).vocab_size(), 257);
}

TEST(BpeTokenizerEncoding, RoundTripsSpecialCases) {
  const auto tokenizer = tokenizer_for_round_trips();
  const std::vector<std::string> cases = {
      "",
      "the quick brown fox",
      std::string("nul\0byte\0", 9),
      "\xff\xfe\x80 invalid \xc3 utf-8 \xe2\x82",  // invalid UTF-8
      "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xd1\x82\xd0\xb5\xd0\xba \xe2\x82\xac",  // valid UTF-8
      std::string(BpeTokenizer::kEndOfText),
      "a<|endoftext|>b",
      std::string(5000, 'a'),
      std::string(3000, ' ') + "x" + std::string(3000, '\n'),
  };
  for (const std::string& text : cases) {
    EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), text) << "text: " << text.substr(0, 40);
  }
}

TEST(BpeTokenizerEncoding, RoundTripsRandomBytes) {
  const auto tokenizer = tokenizer_for_round_trips();
  std::mt19937 generator(12345);
  for (int trial = 0; trial < 300; ++trial) {
    const std::string bytes = testing::random_bytes(generator, generator() % 400);
    ASSERT_EQ(tokenizer.decode(tokenizer.encode(bytes)), bytes);
  }
}

TEST(BpeTokenizerEncoding, MatchesApplyingEachMergeInOrder) {
  const auto tokenizer = tokenizer_for_round_trips();
  std::mt19937 generator(99);
  for (uint32_t seed = 100; seed < 130; ++seed) {
    // Mixed: text like the training text, with random bytes spliced in.
    std::string text = generated_text(seed, 200);
    text.insert(generator() % text.size(), testing::random_bytes(generator, 20));
    ASSERT_EQ(tokenizer.encode(text), testing::reference_encode(tokenizer, text))
        << "seed " << seed;
  }
  const std::string runs = "aaaaaaa  bbbb aaaa aaa theethe";
  EXPECT_EQ(tokenizer.encode(runs), testing::reference_encode(tokenizer, runs));
}

TEST(BpeTokenizerEncoding, CompressesTextLikeItsTrainingText) {
  const auto tokenizer = tokenizer_for_round_trips();
  const std::string text = generated_text(2, 5000);
  EXPECT_LT(tokenizer.encode(text).size() * 3, text.size());
}

TEST(BpeTokenizerEncoding, EndOfTextIsTheLastIdAndOnlyComesFromTheCaller) {
  const auto tokenizer = tokenizer_for_round_trips();
  EXPECT_EQ(tokenizer.end_of_text_id(), tokenizer.vocab_size() - 1);
  EXPECT_EQ(tokenizer.decode({tokenizer.end_of_text_id()}), "<|endoftext|>");
  const std::vector<int32_t> ids = tokenizer.encode("one<|endoftext|>two");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tokenizer.end_of_text_id()), 0);
  std::vector<int32_t> documents = tokenizer.encode("one");
  documents.push_back(tokenizer.end_of_text_id());
  const std::vector<int32_t> two = tokenizer.encode("two");
  documents.insert(documents.end(), two.begin(), two.end());
  EXPECT_EQ(tokenizer.decode(documents), "one<|endoftext|>two");
}

TEST(BpeTokenizerEncoding, DecodeRefusesUnknownIds) {
  const auto tokenizer = BpeTokenizer::train("aaabdaaabac", 1000);
  EXPECT_EQ(error_of([&] {
              tokenizer.decode({'a', 260});
            }),
            "BpeTokenizer: token id 260 is outside [0, 260)");
  EXPECT_EQ(error_of([&] { tokenizer.decode({-1}); }),
            "BpeTokenizer: token id -1 is outside [0, 260)");
  EXPECT_EQ(error_of([&] { tokenizer.token_bytes(999); }),
            "BpeTokenizer: token id 999 is outside [0, 260)");
}

}  // namespace
}  // namespace accelerate
