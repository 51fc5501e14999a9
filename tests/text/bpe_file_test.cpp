// BpeTokenizer::save and ::load: the text format and every load error.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "accelerate/common/errors.h"
#include "accelerate/text/bpe_tokenizer.h"
#include "support/error_message.h"
#include "text/bpe_test_support.h"

namespace accelerate {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

class BpeFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = fs::temp_directory_path() / ("accelerate-bpe-test-" + std::to_string(::getpid()));
    fs::create_directories(directory_);
  }
  void TearDown() override { fs::remove_all(directory_); }

  std::string path(const std::string& name) const { return (directory_ / name).string(); }

  std::string write(const std::string& name, const std::string& content) const {
    std::ofstream(path(name), std::ios::binary) << content;
    return path(name);
  }

  static std::string read(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  // What loading `content` throws, with the file's path replaced by "FILE".
  std::string load_error(const std::string& content) const {
    const std::string file = write("tokenizer.bpe", content);
    std::string message = error_of([&] { BpeTokenizer::load(file); });
    for (size_t at; (at = message.find(file)) != std::string::npos;) {
      message.replace(at, file.size(), "FILE");
    }
    return message;
  }

  fs::path directory_;
};

// The tokenizer of "aaabdaaabac" as a file.
const char kTextbookFile[] = "accelerate-bpe 1 vocab_size 260\n97 97\n97 98\n256 257\n";

// The processes of a job (here threads) may save one tokenizer to one path
// at the same time: every save succeeds and the file is whole. With one
// shared temporary name, one rename took away the file another was about to
// rename ("cannot rename ... No such file or directory").
TEST_F(BpeFileTest, ConcurrentSavesToOnePathAllSucceed) {
  const BpeTokenizer tokenizer = BpeTokenizer::train("aaabdaaabac", 1000);
  std::vector<std::string> failures(4);
  std::vector<std::thread> savers;
  for (std::size_t t = 0; t < failures.size(); ++t) {
    savers.emplace_back([&, t] {
      try {
        for (int i = 0; i < 200; ++i) tokenizer.save(path("shared.bpe"));
      } catch (const std::exception& e) {
        failures[t] = e.what();
      }
    });
  }
  for (auto& saver : savers) saver.join();
  for (const auto& failure : failures) EXPECT_EQ(failure, "");
  EXPECT_EQ(BpeTokenizer::load(path("shared.bpe")).merges(), tokenizer.merges());
}

TEST_F(BpeFileTest, WritesTheDocumentedFormat) {
  BpeTokenizer::train("aaabdaaabac", 1000).save(path("t.bpe"));
  EXPECT_EQ(read(path("t.bpe")), kTextbookFile);
  EXPECT_FALSE(fs::exists(path("t.bpe.tmp")));
}

TEST_F(BpeFileTest, LoadsWhatItSaved) {
  const auto tokenizer = BpeTokenizer::train(testing::generated_text(3, 20000), 800);
  tokenizer.save(path("t.bpe"));
  const auto loaded = BpeTokenizer::load(path("t.bpe"));
  EXPECT_EQ(loaded, tokenizer);
  EXPECT_EQ(loaded.vocab_size(), tokenizer.vocab_size());
  const std::string text = testing::generated_text(4, 3000);
  EXPECT_EQ(loaded.encode(text), tokenizer.encode(text));
  // Saving over an existing file replaces it.
  BpeTokenizer::train("aaabdaaabac", 1000).save(path("t.bpe"));
  EXPECT_EQ(BpeTokenizer::load(path("t.bpe")).vocab_size(), 260);
}

TEST_F(BpeFileTest, LoadsATokenizerWithoutMerges) {
  EXPECT_EQ(load_error("accelerate-bpe 1 vocab_size 257\n"), "(no error)");
}

TEST_F(BpeFileTest, NamesAMissingOrEmptyFile) {
  EXPECT_EQ(
      error_of([&] { BpeTokenizer::load(path("absent.bpe")); }),
      "BpeTokenizer::load: " + path("absent.bpe") + ": cannot open: No such file or directory");
  EXPECT_EQ(
      load_error(""),
      "BpeTokenizer::load: FILE: empty file (expected the header 'accelerate-bpe 1 vocab_size N')");
}

TEST_F(BpeFileTest, RefusesABadHeader) {
  EXPECT_EQ(load_error("{\"model\": \"bpe\"}\n"),
            "BpeTokenizer::load: FILE:1: not an accelerate-bpe header: '{\"model\": \"bpe\"}' "
            "(expected 'accelerate-bpe 1 vocab_size N')");
  EXPECT_EQ(load_error("accelerate-bpe 2 vocab_size 257\n"),
            "BpeTokenizer::load: FILE:1: unsupported format version '2' (this build reads 1)");
  EXPECT_EQ(
      load_error("accelerate-bpe 1 vocab_size 100\n"),
      "BpeTokenizer::load: FILE:1: vocab_size '100' is not a whole number in [257, 16777216]");
  EXPECT_EQ(
      load_error("accelerate-bpe 1 vocab_size 99999999999999999999\n"),
      "BpeTokenizer::load: FILE:1: vocab_size '99999999999999999999' is not a whole number in "
      "[257, 16777216]");
  EXPECT_EQ(
      load_error("accelerate-bpe 1 vocab_size 260\r\n97 97\r\n"),
      "BpeTokenizer::load: FILE:1: vocab_size '260?' is not a whole number in [257, 16777216]");
}

TEST_F(BpeFileTest, RefusesATruncatedFile) {
  EXPECT_EQ(load_error("accelerate-bpe 1 vocab_size 260\n97 97\n97 98\n"),
            "BpeTokenizer::load: FILE:4: truncated: vocab_size 260 needs 3 merges, the file ends "
            "after 2");
  EXPECT_EQ(
      load_error("accelerate-bpe 1 vocab_size 260\n97 97\n97 98\n256 25"),
      "BpeTokenizer::load: FILE:4: the last line does not end with a newline (truncated file?)");
  EXPECT_EQ(load_error("accelerate-bpe 1 vocab_size 26"),
            "BpeTokenizer::load: FILE:1: vocab_size '26' is not a whole number in [257, 16777216]");
}

TEST_F(BpeFileTest, EveryCutOfAFileIsAnErrorNeverACrash) {
  const std::string whole = kTextbookFile;
  for (size_t size = 0; size < whole.size(); ++size) {
    const std::string message = load_error(whole.substr(0, size));
    EXPECT_EQ(message.rfind("BpeTokenizer::load: FILE", 0), 0u) << size << ": " << message;
  }
}

TEST_F(BpeFileTest, RefusesExtraLines) {
  EXPECT_EQ(load_error(std::string(kTextbookFile) + "258 258\n"),
            "BpeTokenizer::load: FILE:5: more merges than vocab_size 260 allows (3)");
  EXPECT_EQ(load_error(std::string(kTextbookFile) + "\n"),
            "BpeTokenizer::load: FILE:5: more merges than vocab_size 260 allows (3)");
}

TEST_F(BpeFileTest, RefusesMalformedMerges) {
  const std::string header = "accelerate-bpe 1 vocab_size 258\n";
  for (const std::string line :
       {"97,97", "97  97", "97", "97 97 97", "a b", "97 0x61", " 97 97", ""}) {
    EXPECT_EQ(load_error(header + line + "\n"),
              "BpeTokenizer::load: FILE:2: expected two token ids separated by one space, got '" +
                  line + "'");
  }
}

TEST_F(BpeFileTest, RefusesIdsOutOfRange) {
  EXPECT_EQ(load_error("accelerate-bpe 1 vocab_size 260\n97 97\n256 257\n97 98\n"),
            "BpeTokenizer::load: FILE:3: token id 257 is out of range: this merge makes token 257, "
            "so its ids must be in [0, 257)");
  EXPECT_EQ(load_error("accelerate-bpe 1 vocab_size 258\n-1 97\n"),
            "BpeTokenizer::load: FILE:2: token id -1 is out of range: this merge makes token 256, "
            "so its ids must be in [0, 256)");
  EXPECT_EQ(load_error("accelerate-bpe 1 vocab_size 258\n97 99999999999\n"),
            "BpeTokenizer::load: FILE:2: token id 99999999999 is out of range: this merge makes "
            "token 256, so its ids must be in [0, 256)");
}

TEST_F(BpeFileTest, RefusesDuplicateMerges) {
  EXPECT_EQ(load_error("accelerate-bpe 1 vocab_size 260\n97 97\n97 98\n97 97\n"),
            "BpeTokenizer::load: FILE:4: merge 97 97 repeats line 2");
}

TEST_F(BpeFileTest, CorruptedFilesLoadOrFailWithOneLineErrors) {
  BpeTokenizer::train(testing::generated_text(5, 3000), 300).save(path("good.bpe"));
  const std::string good = read(path("good.bpe"));
  std::mt19937 generator(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::string bad = good;
    for (int flips = 1 + generator() % 3; flips > 0; --flips) {
      bad[generator() % bad.size()] = "0123456789 \n-x"[generator() % 14];
    }
    const std::string message = load_error(bad);
    EXPECT_TRUE(message == "(no error)" || message.rfind("BpeTokenizer::load: FILE", 0) == 0)
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST_F(BpeFileTest, SaveNamesAFileItCannotWrite) {
  const auto tokenizer = BpeTokenizer::train("aaabdaaabac", 1000);
  const std::string file = path("no-such-dir/t.bpe");
  EXPECT_EQ(error_of([&] { tokenizer.save(file); }),
            "BpeTokenizer::save: cannot write " + file + ": No such file or directory");
}

}  // namespace
}  // namespace accelerate
