// tokenizer.json reading without the Python reference: the errors a user sees
// for files this reader cannot follow, and small hand-written files whose
// ids can be worked out by hand. (tokenizer_json_reference_test.cpp checks
// real files against `tokenizers`.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "accelerate/common/errors.h"
#include "accelerate/text/tokenizer.h"
#include "text/unicode.h"

namespace accelerate {
namespace {

// A WordPiece tokenizer: [UNK]=0 [CLS]=1 [SEP]=2 un=3 ##aff=4 ##able=5 a=6 ##b=7.
std::string small_wordpiece(const std::string& extra = "") {
  return R"({"added_tokens": [
      {"id": 0, "content": "[UNK]", "special": true},
      {"id": 1, "content": "[CLS]", "special": true},
      {"id": 2, "content": "[SEP]", "special": true}],
    "normalizer": {"type": "BertNormalizer", "lowercase": true},
    "pre_tokenizer": {"type": "BertPreTokenizer"},
    "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]},
    "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "max_input_chars_per_word": 9,
      "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "un": 3, "##aff": 4, "##able": 5,
                "a": 6, "##b": 7}})" +
         extra + "}";
}

// The message of the accelerate::Error `make` throws ("" when none).
template <typename Make>
std::string error_of(Make make) {
  try {
    make();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TokenizerJson, WordPieceTakesLongestPiecesAndAddsClsSep) {
  const auto tokenizer = Tokenizer::from_json(small_wordpiece(), "small");
  // "UNAFFABLE" lowercases, then un ##aff ##able; "abx" has no ##x piece.
  EXPECT_EQ(tokenizer.encode("UNAFFABLE ab abx"), (std::vector<int32_t>{1, 3, 4, 5, 6, 7, 0, 2}));
  EXPECT_EQ(tokenizer.encode("unaffable", false), (std::vector<int32_t>{3, 4, 5}));
  // Longer than max_input_chars_per_word (9): one [UNK], not pieces.
  EXPECT_EQ(tokenizer.encode("ababababab", false), (std::vector<int32_t>{0}));
  const Encoding pair = tokenizer.encode_pair("un", "a");
  EXPECT_EQ(pair.ids, (std::vector<int32_t>{1, 3, 2, 6, 2}));
  EXPECT_EQ(pair.type_ids, (std::vector<int32_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ(tokenizer.decode({1, 3, 4, 5, 6, 7, 2}), "unaffable ab");
  EXPECT_EQ(tokenizer.decode({1, 3, 2}, false), "[CLS] un [SEP]");
  EXPECT_EQ(tokenizer.vocab_size(), 8);
  EXPECT_EQ(tokenizer.token_to_id("##able"), 5);
  EXPECT_EQ(tokenizer.id_to_token(4), "##aff");
}

// Truncation by hand (the reference test compares every strategy with
// `tokenizers` on real files): "unaffable" is 3 tokens, "a a a a a" 5, and
// [CLS] A [SEP] B [SEP] adds 3; what tokenizers refuses is an Error naming
// the strategy.
TEST(TokenizerJson, TruncationCutsTheTextsNotTheSpecialTokens) {
  const auto tokenizer = Tokenizer::from_json(small_wordpiece(), "small");
  const auto options = [](size_t length, TruncationStrategy strategy) {
    return TruncationOptions().max_length(length).strategy(strategy);
  };
  const auto longest = TruncationStrategy::kLongestFirst;
  // 10 = 3 specials + 7: the shorter text (3) fits in half, the longer
  // gets the other 4.
  EXPECT_EQ(tokenizer.encode_pair("unaffable", "a a a a a", options(10, longest)).ids,
            (std::vector<int32_t>{1, 3, 4, 5, 2, 6, 6, 6, 6, 2}));
  // 8 = 3 + 5: the shorter would take more than half: halves, the odd one
  // to the longer text.
  EXPECT_EQ(tokenizer.encode_pair("unaffable", "a a a a a", options(8, longest)).ids,
            (std::vector<int32_t>{1, 3, 4, 2, 6, 6, 6, 2}));
  // 6 = 3 + 3: each keeps half (1 and 2).
  const Encoding halves = tokenizer.encode_pair("unaffable", "a a a a a", options(6, longest));
  EXPECT_EQ(halves.ids, (std::vector<int32_t>{1, 3, 2, 6, 6, 2}));
  EXPECT_EQ(halves.type_ids, (std::vector<int32_t>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(tokenizer.encode_with_types("a a a a a", options(4, longest)).ids,
            (std::vector<int32_t>{1, 6, 6, 2}));
  // Short enough: untouched; without special tokens the whole room is text.
  EXPECT_EQ(tokenizer.encode_pair("un", "a", options(5, longest)).ids,
            (std::vector<int32_t>{1, 3, 2, 6, 2}));
  EXPECT_EQ(tokenizer.encode_with_types("a a a a a", options(2, longest), false).ids,
            (std::vector<int32_t>{6, 6}));
  EXPECT_EQ(
      tokenizer.encode_pair("unaffable", "a a a a a", options(7, TruncationStrategy::kOnlySecond))
          .ids,
      (std::vector<int32_t>{1, 3, 4, 5, 2, 6, 2}));
  EXPECT_EQ(error_of([&] {
              tokenizer.encode_pair("unaffable", "a", options(4, TruncationStrategy::kOnlyFirst));
            }),
            "truncation only_first: the first sequence's 3 tokens cannot lose the 3 that "
            "max_length 4 requires");
  EXPECT_EQ(error_of([&] {
              tokenizer.encode_with_types("a a a", options(3, TruncationStrategy::kOnlySecond));
            }),
            "truncation only_second: there is no second sequence to truncate");
  EXPECT_EQ(error_of([&] { tokenizer.encode_pair("un", "a", options(2, longest)); }),
            "truncation longest_first: max_length 2 leaves no room for the 3 special tokens "
            "the post-processor adds");
}

// Llama 2's layout, tiny: <unk>=0, the bytes of the euro sign (E2 82 AC) =1-3,
// "▁"=4, "a"=5, "▁a"=6 (one merge).
const char* kSmallByteFallback = R"({
  "added_tokens": [{"id": 0, "content": "<unk>", "special": true}],
  "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
    {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
  "decoder": {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
    {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
  "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
    "vocab": {"<unk>": 0, "<0xE2>": 1, "<0x82>": 2, "<0xAC>": 3, "▁": 4, "a": 5, "▁a": 6},
    "merges": [["▁", "a"]]}})";

TEST(TokenizerJson, ByteFallbackUsesByteTokensOnlyWhenAllBytesExist) {
  const auto tokenizer = Tokenizer::from_json(kSmallByteFallback, "small");
  // The euro sign's three bytes are tokens; u-umlaut's (C3 BC) are not: <unk>.
  EXPECT_EQ(tokenizer.encode("a \u20ACa \u00FC"), (std::vector<int32_t>{6, 4, 1, 2, 3, 5, 4, 0}));
  EXPECT_EQ(tokenizer.decode({6, 1, 2, 3, 5}), "a\u20ACa");
  // Bytes that are not whole UTF-8 become one U+FFFD each.
  EXPECT_EQ(tokenizer.decode({6, 1, 2}), "a\uFFFD\uFFFD");
  // Strip takes one leading space only.
  EXPECT_EQ(tokenizer.decode({4, 4, 5}), " a");
}

TEST(TokenizerJson, UnknownComponentTypeIsOneLineNamingTypeAndFile) {
  std::string text = small_wordpiece();
  text.replace(text.find("BertPreTokenizer"), 16, "UnigramSplitter");
  const std::string message =
      error_of([&] { Tokenizer::from_json(text, "/models/x/tokenizer.json"); });
  EXPECT_NE(message.find("unsupported pre_tokenizer type 'UnigramSplitter'"), std::string::npos)
      << message;
  EXPECT_NE(message.find("/models/x/tokenizer.json"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;

  std::string model = small_wordpiece();
  model.replace(model.find("\"type\": \"WordPiece\", \"unk"), 21, "\"type\": \"Unigram\",   ");
  EXPECT_NE(error_of([&] {
              Tokenizer::from_json(model, "m.json");
            }).find("unsupported model type 'Unigram'"),
            std::string::npos);
}

TEST(TokenizerJson, UnsupportedSplitPatternAndSettingsAreRefused) {
  std::string text = small_wordpiece();
  text.replace(text.find("{\"type\": \"BertPreTokenizer\"}"), 28,
               R"({"type": "Split", "pattern": {"Regex": "\\d+"}, "behavior": "Isolated",
                   "invert": false})");
  EXPECT_NE(error_of([&] { Tokenizer::from_json(text, "t.json"); }).find("is not supported"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              Tokenizer::from_json(small_wordpiece(R"(, "padding": {"x": 1})"), "p");
            }).find("padding settings are not supported"),
            std::string::npos);
}

// transformers' way with a file's truncation and padding sections: a
// program that pads and truncates per call ignores them, and encodes as
// from the file without them.
TEST(TokenizerJson, SavedTruncationAndPaddingCanBeIgnored) {
  const std::string with_settings =
      small_wordpiece(R"(, "truncation": {"max_length": 2}, "padding": {"length": 8})");
  const Tokenizer ignoring =
      Tokenizer::from_json(with_settings, "t.json", accelerate::SavedEncodingSettings::kIgnore);
  const Tokenizer plain = Tokenizer::from_json(small_wordpiece(), "t.json");
  const std::vector<int32_t> ids = ignoring.encode("UNAFFABLE ab abx");
  EXPECT_EQ(ids, plain.encode("UNAFFABLE ab abx"));
  EXPECT_EQ(ids.size(), 8u) << "truncated to 2 ids had the settings applied";
  EXPECT_NE(error_of([&] {
              Tokenizer::from_json(with_settings, "t.json");
            }).find("truncation settings are not supported"),
            std::string::npos);
}

TEST(TokenizerJson, FileErrorsNameTheFile) {
  const std::string missing = error_of([] { Tokenizer::from_file("/nonexistent/tok.json"); });
  EXPECT_NE(missing.find("/nonexistent/tok.json: cannot be read"), std::string::npos) << missing;
  const std::string invalid = error_of([] { Tokenizer::from_json("{\"model\": ", "broken.json"); });
  EXPECT_NE(invalid.find("broken.json: not valid JSON"), std::string::npos) << invalid;
  const auto tokenizer = Tokenizer::from_json(small_wordpiece(), "small");
  EXPECT_NE(error_of([&] { tokenizer.decode({8}); }).find("id 8 is not in the vocabulary"),
            std::string::npos);
}

TEST(TokenizerJson, FromFileAcceptsAModelFolder) {
  const auto folder =
      std::filesystem::temp_directory_path() /
      ("tokenizer-json-test-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  std::filesystem::create_directories(folder);
  std::ofstream(folder / "tokenizer.json") << small_wordpiece();
  EXPECT_EQ(Tokenizer::from_file(folder.string()).encode("un", false), (std::vector<int32_t>{3}));
  std::filesystem::remove_all(folder);
}

TEST(TokenizerJsonUnicode, LossyUtf8ReplacesEachMaximalInvalidPart) {
  // A truncated 3-byte sequence is one U+FFFD; a lone continuation byte one more.
  EXPECT_EQ(detail::utf8_lossy("a\xE2\x82"
                               "b\x80"
                               "c"),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD"
            "c");
  EXPECT_EQ(detail::utf8_lossy("\xE2\x82\xAC"), "\xE2\x82\xAC");  // the euro sign
  EXPECT_FALSE(detail::valid_utf8("\xED\xA0\x80"));               // a surrogate
}

TEST(TokenizerJsonUnicode, NfdOrdersCombiningMarks) {
  // U+1E69 (s with dot below and dot above) is s + U+0323 + U+0307; an
  // out-of-order pair of marks is put in canonical order (220 before 230).
  EXPECT_EQ(detail::nfd(U"\u1E69"), std::u32string(U"s\u0323\u0307"));
  EXPECT_EQ(detail::nfd(U"s\u0307\u0323"), std::u32string(U"s\u0323\u0307"));
  EXPECT_EQ(detail::nfd(U"\uD55C"), std::u32string(U"\u1112\u1161\u11AB"));  // Hangul
}

}  // namespace
}  // namespace accelerate
