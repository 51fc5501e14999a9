// The tokenizer on real text: the Brown Corpus from scripts/fetch-brown.sh.
// Skipped when the corpus has not been fetched.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "accelerate/text/bpe_tokenizer.h"

namespace accelerate {
namespace {

namespace fs = std::filesystem;

// ACCELERATE_BROWN_DIR, or data/brown in the source tree (the script's default).
fs::path brown_directory() {
  if (const char* dir = std::getenv("ACCELERATE_BROWN_DIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  return fs::path(ACCELERATE_SOURCE_DIR) / "data" / "brown";
}

std::string read_corpus_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(BrownCorpus, TokenizerTrainedOnASliceCompressesTheValidationText) {
  const fs::path directory = brown_directory();
  if (!fs::exists(directory / "train.txt") || !fs::exists(directory / "validation.txt")) {
    GTEST_SKIP() << "no Brown corpus in " << directory << ": run scripts/fetch-brown.sh";
  }
  const std::string train = read_corpus_file(directory / "train.txt");
  const std::string validation = read_corpus_file(directory / "validation.txt");
  ASSERT_GT(train.size(), 2'000'000u);
  ASSERT_GT(validation.size(), 100'000u);
  // A slice keeps the test quick; cut at a line so no word is split.
  const std::string slice = train.substr(0, train.find('\n', 2'000'000) + 1);

  const auto start = std::chrono::steady_clock::now();
  const auto tokenizer = BpeTokenizer::train(slice, 4096);
  const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(tokenizer.vocab_size(), 4096);

  const std::vector<int32_t> ids = tokenizer.encode(validation);
  const double bytes_per_token = static_cast<double>(validation.size()) / ids.size();
  std::cout << "[ info     ] trained vocab 4096 on " << slice.size() << " bytes in "
            << seconds.count() << " s; validation: " << bytes_per_token << " bytes/token\n";
  EXPECT_GT(bytes_per_token, 2.5);
  EXPECT_EQ(tokenizer.decode(ids), validation);
}

}  // namespace
}  // namespace accelerate
