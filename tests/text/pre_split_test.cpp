// The GPT-2 style pre-split that keeps BPE merges inside words.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "text/pre_split.h"

namespace accelerate::detail {
namespace {

std::vector<std::string> pieces_of(std::string_view text) {
  const std::vector<std::string_view> views = pre_split(text);
  return {views.begin(), views.end()};
}

using Pieces = std::vector<std::string>;

TEST(PreSplit, LeadingSpaceJoinsTheFollowingWord) {
  EXPECT_EQ(pieces_of("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(pieces_of(" the cat"), (Pieces{" the", " cat"}));
}

TEST(PreSplit, LettersDigitsAndPunctuationAreSeparateRuns) {
  EXPECT_EQ(pieces_of("abc123def"), (Pieces{"abc", "123", "def"}));
  EXPECT_EQ(pieces_of("x=42; y -- z!?"), (Pieces{"x", "=", "42", ";", " y", " --", " z", "!?"}));
  EXPECT_EQ(pieces_of("in 1961."), (Pieces{"in", " 1961", "."}));
}

TEST(PreSplit, ContractionsAreTheirOwnPieces) {
  EXPECT_EQ(pieces_of("don't"), (Pieces{"don", "'t"}));
  EXPECT_EQ(pieces_of("we'll they're I've"), (Pieces{"we", "'ll", " they", "'re", " I", "'ve"}));
  // A quote before a word is punctuation, not a contraction.
  EXPECT_EQ(pieces_of("'sun'"), (Pieces{"'", "sun", "'"}));
  EXPECT_EQ(pieces_of("it's."), (Pieces{"it", "'s", "."}));
}

TEST(PreSplit, WhitespaceRunsLeaveTheirLastSpaceToTheNextWord) {
  EXPECT_EQ(pieces_of("a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(pieces_of("a\n\nb"), (Pieces{"a", "\n\n", "b"}));
  EXPECT_EQ(pieces_of("a\n b"), (Pieces{"a", "\n", " b"}));
  EXPECT_EQ(pieces_of("a \nb"), (Pieces{"a", " \n", "b"}));
  EXPECT_EQ(pieces_of("end  "), (Pieces{"end", "  "}));
  EXPECT_EQ(pieces_of(" "), (Pieces{" "}));
}

TEST(PreSplit, NonAsciiBytesAreLetters) {
  // "café naïve" in UTF-8, and a lone invalid byte inside a word.
  EXPECT_EQ(pieces_of("caf\xc3\xa9 na\xc3\xafve"), (Pieces{"caf\xc3\xa9", " na\xc3\xafve"}));
  EXPECT_EQ(pieces_of("ab\xff"
                      "cd"),
            (Pieces{"ab\xff"
                    "cd"}));
}

TEST(PreSplit, EmptyTextHasNoPieces) { EXPECT_TRUE(pre_split("").empty()); }

TEST(PreSplit, PiecesConcatenateBackToAnyByteString) {
  std::mt19937 generator(20240611);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> length(0, 200);
  for (int trial = 0; trial < 500; ++trial) {
    std::string text(length(generator), '\0');
    for (char& c : text) c = static_cast<char>(byte(generator));
    std::string joined;
    for (std::string_view piece : pre_split(text)) {
      ASSERT_FALSE(piece.empty());
      joined += piece;
    }
    ASSERT_EQ(joined, text);
  }
}

}  // namespace
}  // namespace accelerate::detail
