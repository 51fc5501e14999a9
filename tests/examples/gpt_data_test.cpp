// The GPT example's data (examples/gpt/token_data.h): the token file format
// and every way a file can be bad, the windows TokenChunks serves, the
// tokenization cache (reuse, invalidation, concurrent writers).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "accelerate/common/errors.h"
#include "accelerate/data/data_loader.h"
#include "accelerate/text/bpe_tokenizer.h"
#include "support/temp_dir.h"
#include "token_data.h"

namespace gpt_data_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using ScratchDir = accelerate::testing::TempDir;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// The message of the accelerate::Error `f` throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const accelerate::Error& error) {
    return error.what();
  }
  return "";
}

void expect_open_error(const std::string& path, const std::string& problem) {
  const std::string message = error_of([&] { gpt::TokenFile::open(path); });
  EXPECT_THAT(message, HasSubstr("TokenFile: " + path + ": "));
  EXPECT_THAT(message, HasSubstr(problem));
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

std::vector<int64_t> as_vector(const at::Tensor& tensor) {
  const auto t = tensor.to(torch::kLong).contiguous();
  return {t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel()};
}

// ---- the token file ----

TEST(TokenFile, RoundTripsTwoByteTokens) {
  ScratchDir dir;
  const std::vector<int32_t> tokens = {0, 1, 999, 500, 255, 256, 998};
  gpt::write_token_file(dir.file("a.tokens"), tokens, 1000);
  EXPECT_EQ(fs::file_size(dir.file("a.tokens")), 32u + 2 * tokens.size());
  const auto file = gpt::TokenFile::open(dir.file("a.tokens"));
  EXPECT_EQ(file->size(), tokens.size());
  EXPECT_EQ(file->vocab_size(), 1000);
  EXPECT_EQ(file->token_width(), 2u);
  EXPECT_EQ(file->to_vector(), tokens);
  EXPECT_EQ(file->at(2), 999);
  EXPECT_EQ(as_vector(file->tensor(1, 3)), (std::vector<int64_t>{1, 999, 500}));
  EXPECT_EQ(file->tensor(0, 2).dtype(), torch::kLong);
  EXPECT_THROW(file->at(7), std::out_of_range);
  EXPECT_THROW(file->tensor(5, 3), std::out_of_range);
  // 65536 is the largest vocab that still fits two bytes.
  gpt::write_token_file(dir.file("b.tokens"), {65535, 0, 40000}, 65536);
  const auto full = gpt::TokenFile::open(dir.file("b.tokens"));
  EXPECT_EQ(full->token_width(), 2u);
  EXPECT_EQ(full->to_vector(), (std::vector<int32_t>{65535, 0, 40000}));
}

TEST(TokenFile, RoundTripsFourByteTokens) {
  ScratchDir dir;
  const std::vector<int32_t> tokens = {65535, 65536, 69999, 0, 53456};
  gpt::write_token_file(dir.file("a.tokens"), tokens, 70000);
  EXPECT_EQ(fs::file_size(dir.file("a.tokens")), 32u + 4 * tokens.size());
  const auto file = gpt::TokenFile::open(dir.file("a.tokens"));
  EXPECT_EQ(file->token_width(), 4u);
  EXPECT_EQ(file->vocab_size(), 70000);
  EXPECT_EQ(file->to_vector(), tokens);
  EXPECT_EQ(as_vector(file->tensor(0, 3)), (std::vector<int64_t>{65535, 65536, 69999}));
  EXPECT_EQ(gpt::token_width_for(65537), 4u);
  // No tokens at all is a valid (header-only) file.
  gpt::write_token_file(dir.file("empty.tokens"), {}, 70000);
  EXPECT_EQ(gpt::TokenFile::open(dir.file("empty.tokens"))->size(), 0u);
}

TEST(TokenFile, HeaderIsTheDocumentedLayout) {
  ScratchDir dir;
  gpt::write_token_file(dir.file("a.tokens"), {0x0102, 7}, 1000);
  const std::string bytes = read_bytes(dir.file("a.tokens"));
  const std::string expected(
      "ACCTOKEN"            // magic
      "\x01\0\0\0"          // version 1
      "\x02\0\0\0"          // token width 2
      "\x02\0\0\0\0\0\0\0"  // 2 tokens
      "\xe8\x03\0\0"        // vocab 1000
      "\0\0\0\0"            // reserved
      "\x02\x01\x07\0",     // tokens, little-endian
      36);
  EXPECT_EQ(bytes, expected);
}

TEST(TokenFile, WriteRefusesBadTokensAndLeavesNothingBehind) {
  ScratchDir dir;
  const std::string path = dir.file("a.tokens");
  EXPECT_THAT(error_of([&] {
                gpt::write_token_file(path, {1, 1000}, 1000);
              }),
              HasSubstr("token 1000 at index 1 is not in [0, 1000)"));
  EXPECT_THAT(error_of([&] { gpt::write_token_file(path, {-1}, 1000); }),
              HasSubstr("token -1 at index 0"));
  EXPECT_THAT(error_of([&] { gpt::write_token_file(path, {}, 0); }),
              HasSubstr("vocab size 0 is not positive"));
  EXPECT_THAT(error_of([&] { gpt::write_token_file(dir.file("no/such/dir.tokens"), {1}, 10); }),
              HasSubstr("cannot create a temporary file"));
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(TokenFile, ReplacingAFileLeavesOpenReadersOnTheOldOne) {
  ScratchDir dir;
  const std::string path = dir.file("a.tokens");
  gpt::write_token_file(path, {1, 2, 3}, 10);
  const auto old_file = gpt::TokenFile::open(path);
  gpt::write_token_file(path, {4, 5}, 10);  // renamed over it: a new inode
  EXPECT_EQ(old_file->to_vector(), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(gpt::TokenFile::open(path)->to_vector(), (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(TokenFile, EveryBadFileIsAOneLineErrorNamingTheProblem) {
  ScratchDir dir;
  gpt::write_token_file(dir.file("good.tokens"), {1, 2, 3, 4, 5}, 1000);
  const std::string good = read_bytes(dir.file("good.tokens"));
  const auto variant = [&](const std::string& name, size_t offset, const std::string& bytes) {
    std::string changed = good;
    changed.replace(offset, bytes.size(), bytes);
    write_bytes(dir.file(name), changed);
    return dir.file(name);
  };
  expect_open_error(dir.file("missing.tokens"), "cannot open: No such file or directory");
  expect_open_error(dir.path(), "not a regular file");
  expect_open_error(variant("magic", 0, "GPT2TOKS"), "not a token file (bad magic)");
  expect_open_error(variant("version", 8, std::string("\x02", 1)),
                    "unsupported format version 2 (this build reads 1)");
  expect_open_error(variant("width3", 12, std::string("\x03", 1)),
                    "token width 3 does not match vocab size 1000 (expected 2)");
  expect_open_error(variant("width4", 12, std::string("\x04", 1)),
                    "token width 4 does not match vocab size 1000 (expected 2)");
  expect_open_error(variant("vocab0", 24, std::string("\0\0", 2)), "vocab size 0 is out of range");
  expect_open_error(variant("reserved", 31, "x"), "reserved header bytes are not zero");
  expect_open_error(variant("count", 16, std::string("\x06", 1)),
                    "the header says 6 tokens of 2 bytes but 10 bytes follow (truncated?)");
  expect_open_error(variant("huge", 23, std::string("\x7f", 1)), "(truncated?)");
  write_bytes(dir.file("extra"), good + "x");
  expect_open_error(dir.file("extra"),
                    "the header says 5 tokens of 2 bytes but 11 bytes follow (expected 10)");
  // Token 3 (bytes 38-39) set to 1000: found by the check, allowed without it.
  const std::string bad_token = variant("token", 38, std::string("\xe8\x03", 2));
  expect_open_error(bad_token, "token 1000 at index 3 is not below vocab size 1000");
  EXPECT_EQ(gpt::TokenFile::open(bad_token, /*check_tokens=*/false)->at(3), 1000);
}

TEST(TokenFile, EveryTruncationIsAOneLineError) {
  ScratchDir dir;
  for (int32_t vocab : {1000, 100000}) {
    gpt::write_token_file(dir.file("good.tokens"), {1, 2, 3, 4, 5, 6, 7}, vocab);
    const std::string good = read_bytes(dir.file("good.tokens"));
    for (size_t length = 0; length < good.size(); ++length) {
      write_bytes(dir.file("cut.tokens"), good.substr(0, length));
      const std::string message = error_of([&] { gpt::TokenFile::open(dir.file("cut.tokens")); });
      EXPECT_THAT(message, HasSubstr("TokenFile: " + dir.file("cut.tokens") + ": "))
          << "vocab " << vocab << ", " << length << " bytes";
      EXPECT_THAT(message, HasSubstr(length < 32 ? "truncated header" : "(truncated?)"));
      EXPECT_EQ(message.find('\n'), std::string::npos);
    }
  }
}

TEST(TokenFile, AnyHeaderByteChangedGivesAnErrorOrAValidFile) {
  ScratchDir dir;
  gpt::write_token_file(dir.file("good.tokens"), {1, 2, 3, 999}, 1000);
  const std::string good = read_bytes(dir.file("good.tokens"));
  int errors = 0;
  for (size_t at = 0; at < gpt::kTokenFileHeaderBytes; ++at) {
    for (int flip : {0x01, 0x80, 0xff}) {
      std::string changed = good;
      changed[at] = static_cast<char>(changed[at] ^ flip);
      write_bytes(dir.file("changed.tokens"), changed);
      try {
        const auto file = gpt::TokenFile::open(dir.file("changed.tokens"));
        for (size_t i = 0; i < file->size(); ++i) EXPECT_LT(file->at(i), file->vocab_size());
      } catch (const accelerate::Error& error) {
        EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos);
        ++errors;
      }
    }
  }
  EXPECT_GT(errors, 80);  // only some vocab-size changes keep every token valid
}

// ---- chunks ----

std::shared_ptr<const gpt::TokenFile> counting_file(const ScratchDir& dir, int32_t count) {
  std::vector<int32_t> tokens(count);
  for (int32_t i = 0; i < count; ++i) tokens[i] = i;
  const std::string path = dir.file("count" + std::to_string(count) + ".tokens");
  gpt::write_token_file(path, tokens, std::max(count, 1));
  return gpt::TokenFile::open(path);
}

TEST(TokenChunks, WindowsDoNotOverlapAndTargetsAreShiftedByOne) {
  ScratchDir dir;
  const gpt::TokenChunks chunks(counting_file(dir, 23), 5);
  ASSERT_EQ(chunks.size(), 4u);  // (23 - 1) / 5
  for (int64_t i = 0; i < 4; ++i) {
    const auto example = chunks.get(static_cast<size_t>(i));
    EXPECT_EQ(example.data.dtype(), torch::kLong);
    EXPECT_EQ(example.data.sizes(), (std::vector<int64_t>{5}));
    EXPECT_TRUE(torch::equal(example.data, torch::arange(5 * i, 5 * i + 5, torch::kLong)));
    EXPECT_TRUE(torch::equal(example.target, torch::arange(5 * i + 1, 5 * i + 6, torch::kLong)));
  }
  EXPECT_THROW(chunks.get(4), std::out_of_range);
}

TEST(TokenChunks, SizeIsCountMinusOneOverTheBlockSize) {
  ScratchDir dir;
  for (int32_t count = 0; count <= 13; ++count) {
    const auto file = counting_file(dir, count);
    for (int64_t block = 1; block <= 5; ++block) {
      const gpt::TokenChunks chunks(file, block);
      const size_t expected = count == 0 ? 0 : (count - 1) / block;
      EXPECT_EQ(chunks.size(), expected) << count << " tokens, block " << block;
      if (expected > 0) {  // the last target is a token of the file
        EXPECT_LT(chunks.get(expected - 1).target[-1].item<int64_t>(), count);
      }
    }
  }
  const auto file = counting_file(dir, 10);
  EXPECT_THROW(gpt::TokenChunks(file, 0), std::invalid_argument);
  EXPECT_THROW(gpt::TokenChunks(file, -3), std::invalid_argument);
  EXPECT_THROW(gpt::TokenChunks(nullptr, 4), std::invalid_argument);
}

TEST(TokenChunks, ServesEveryWindowOnceToAShufflingLoaderWithWorkers) {
  ScratchDir dir;
  const gpt::TokenChunks chunks(counting_file(dir, 1001), 10);
  ASSERT_EQ(chunks.size(), 100u);
  accelerate::DataLoader loader(
      chunks, accelerate::DataLoaderOptions(8).shuffle(true).num_workers(3).seed(7));
  std::multiset<int64_t> starts;
  for (auto& batch : loader) {
    EXPECT_EQ(batch.data.size(1), 10);
    EXPECT_TRUE(torch::equal(batch.target, batch.data + 1));
    for (int64_t row = 0; row < batch.data.size(0); ++row) {
      starts.insert(batch.data[row][0].item<int64_t>());
    }
  }
  std::multiset<int64_t> expected;
  for (int64_t i = 0; i < 100; ++i) expected.insert(10 * i);
  EXPECT_EQ(starts, expected);
}

TEST(TokenChunks, GetFromManyThreadsAtOnce) {
  ScratchDir dir;
  const gpt::TokenChunks chunks(counting_file(dir, 4001), 8);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t k = 0; k < chunks.size(); ++k) {
        const size_t i = (k * 7 + t * 13) % chunks.size();
        const auto example = chunks.get(i);
        if (example.data[0].item<int64_t>() != static_cast<int64_t>(8 * i) ||
            example.target[7].item<int64_t>() != static_cast<int64_t>(8 * i + 8)) {
          ++wrong;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
}

// ---- tokenization and the cache ----

const char* const kCorpus =
    "The cat sat on the mat.\nThe dog sat on the log.\n\n"
    "A cat and a dog met on the mat.\nThey sat.\n\n"
    "The end of the story is near, the cat said to the dog.\n\n";

accelerate::BpeTokenizer corpus_tokenizer(int32_t vocab) {
  return accelerate::BpeTokenizer::train(std::string(kCorpus), vocab);
}

TEST(TokenizeDocuments, ParagraphsAreDocumentsEachEndedByEndOfText) {
  const auto tokenizer = corpus_tokenizer(300);
  const int32_t eot = tokenizer.end_of_text_id();
  std::vector<int32_t> expected;
  for (const char* document : {" a b\nc\n", " d e\n", "last"}) {
    const auto ids = tokenizer.encode(document);
    expected.insert(expected.end(), ids.begin(), ids.end());
    expected.push_back(eot);
  }
  // Blank means empty or whitespace-only; runs of them are one separator.
  EXPECT_EQ(gpt::tokenize_documents("\n a b\nc\n\n\n d e\n \t\r\nlast", tokenizer), expected);
  EXPECT_TRUE(gpt::tokenize_documents("", tokenizer).empty());
  EXPECT_TRUE(gpt::tokenize_documents("\n\n  \n", tokenizer).empty());
  EXPECT_EQ(gpt::tokenize_documents("x", tokenizer),
            (std::vector<int32_t>{tokenizer.encode("x")[0], eot}));
}

struct FileIdentity {
  explicit FileIdentity(const std::string& path) {
    struct stat info {};
    EXPECT_EQ(::stat(path.c_str(), &info), 0) << path;
    inode = info.st_ino;
    seconds = info.st_mtim.tv_sec, nanoseconds = info.st_mtim.tv_nsec;
  }
  bool operator==(const FileIdentity& o) const {
    return inode == o.inode && seconds == o.seconds && nanoseconds == o.nanoseconds;
  }
  ino_t inode;
  time_t seconds;
  long nanoseconds;
};

TEST(TokenCache, TokenizesOnceThenReturnsTheSameFile) {
  ScratchDir dir;
  const std::string text_path = dir.file("corpus.txt");
  write_bytes(text_path, kCorpus);
  const auto tokenizer = corpus_tokenizer(300);
  const std::string cache = dir.file("cache");
  const std::string path = gpt::tokenize_to_cache(text_path, tokenizer, cache);
  EXPECT_EQ(fs::path(path).parent_path(), fs::path(cache));
  EXPECT_EQ(fs::path(path).filename().string().rfind(
                "corpus.txt-" + std::to_string(std::strlen(kCorpus)) + "-", 0),
            0u)
      << path;  // the text's name and size, then its mtime and the tokenizer's hash
  const auto file = gpt::TokenFile::open(path);
  EXPECT_EQ(file->vocab_size(), tokenizer.vocab_size());
  EXPECT_EQ(file->to_vector(), gpt::tokenize_documents(kCorpus, tokenizer));
  const FileIdentity before(path);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a rewrite would show in mtime
  EXPECT_EQ(gpt::tokenize_to_cache(text_path, tokenizer, cache), path);
  EXPECT_TRUE(FileIdentity(path) == before) << "the second call rewrote the cache file";
  EXPECT_EQ(std::distance(fs::directory_iterator(cache), fs::directory_iterator()), 1);
}

TEST(TokenCache, ANewTokenizerOrAChangedTextTokenizesAgain) {
  ScratchDir dir;
  const std::string text_path = dir.file("corpus.txt"), cache = dir.file("cache");
  write_bytes(text_path, kCorpus);
  const auto first = corpus_tokenizer(300), second = corpus_tokenizer(270);
  ASSERT_NE(first, second);
  const std::string a = gpt::tokenize_to_cache(text_path, first, cache);
  const std::string b = gpt::tokenize_to_cache(text_path, second, cache);
  EXPECT_NE(a, b);
  EXPECT_EQ(gpt::TokenFile::open(b)->to_vector(), gpt::tokenize_documents(kCorpus, second));
  EXPECT_EQ(gpt::TokenFile::open(a)->to_vector(), gpt::tokenize_documents(kCorpus, first));
  // Same size, other bytes, a later mtime.
  std::string edited = kCorpus;
  edited[4] = 'b';
  write_bytes(text_path, edited);
  fs::last_write_time(text_path, fs::last_write_time(text_path) + std::chrono::seconds(1));
  const std::string c = gpt::tokenize_to_cache(text_path, first, cache);
  EXPECT_NE(c, a);
  EXPECT_EQ(gpt::TokenFile::open(c)->to_vector(), gpt::tokenize_documents(edited, first));
  // Longer text.
  write_bytes(text_path, edited + "More text.\n");
  EXPECT_NE(gpt::tokenize_to_cache(text_path, first, cache), c);
}

TEST(TokenCache, ADamagedCacheFileIsRebuilt) {
  ScratchDir dir;
  write_bytes(dir.file("corpus.txt"), kCorpus);
  const auto tokenizer = corpus_tokenizer(300);
  const std::string path = gpt::tokenize_to_cache(dir.file("corpus.txt"), tokenizer, dir.path());
  write_bytes(path, read_bytes(path).substr(0, 40));
  EXPECT_EQ(gpt::tokenize_to_cache(dir.file("corpus.txt"), tokenizer, dir.path()), path);
  EXPECT_EQ(gpt::TokenFile::open(path)->to_vector(), gpt::tokenize_documents(kCorpus, tokenizer));
}

TEST(TokenCache, TwoCallersAtOnceBothGetTheSameCompleteFile) {
  ScratchDir dir;
  std::string text;
  for (int i = 0; i < 400; ++i) text += kCorpus;  // long enough for the calls to overlap
  write_bytes(dir.file("corpus.txt"), text);
  const auto tokenizer = corpus_tokenizer(300);
  const auto expected = gpt::tokenize_documents(text, tokenizer);
  for (int round = 0; round < 3; ++round) {
    const std::string cache = dir.file("cache" + std::to_string(round));
    std::atomic<int> ready{0};
    std::string paths[2];
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        ++ready;
        while (ready.load() < 2) std::this_thread::yield();
        paths[t] = gpt::tokenize_to_cache(dir.file("corpus.txt"), tokenizer, cache);
      });
    }
    for (auto& thread : threads) thread.join();
    ASSERT_EQ(paths[0], paths[1]);
    EXPECT_EQ(gpt::TokenFile::open(paths[0])->to_vector(), expected);
    // Only the cache file: no temporary file left behind.
    EXPECT_EQ(std::distance(fs::directory_iterator(cache), fs::directory_iterator()), 1);
  }
}

TEST(TokenCache, AMissingTextFileIsAOneLineError) {
  ScratchDir dir;
  const std::string missing = dir.file("missing.txt");
  const std::string message =
      error_of([&] { gpt::tokenize_to_cache(missing, corpus_tokenizer(260), dir.path()); });
  EXPECT_THAT(message, HasSubstr("tokenize_to_cache: " + missing + ": "));
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

// The Brown corpus from scripts/fetch-brown.sh: ACCELERATE_BROWN_DIR or data/brown.
fs::path brown_directory() {
  if (const char* dir = std::getenv("ACCELERATE_BROWN_DIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  return fs::path(ACCELERATE_SOURCE_DIR) / "data" / "brown";
}

TEST(TokenCache, BrownValidationSplitBecomesTheExpectedChunks) {
  const fs::path brown = brown_directory();
  if (!fs::exists(brown / "train.txt") || !fs::exists(brown / "validation.txt")) {
    GTEST_SKIP() << "no Brown corpus in " << brown << ": run scripts/fetch-brown.sh";
  }
  const std::string train = read_bytes(brown / "train.txt");
  const std::string validation = read_bytes(brown / "validation.txt");
  const auto tokenizer =
      accelerate::BpeTokenizer::train(train.substr(0, train.find('\n', 1'000'000) + 1), 2048);
  ScratchDir dir;
  const auto start = std::chrono::steady_clock::now();
  const std::string path = gpt::tokenize_to_cache(brown / "validation.txt", tokenizer, dir.path());
  const std::chrono::duration<double> first = std::chrono::steady_clock::now() - start;
  const auto file = gpt::TokenFile::open(path);
  const auto tokens = file->to_vector();
  // Brown ends every paragraph with one blank line: one <|endoftext|> each,
  // and putting "\n" back for each gives the text byte for byte.
  size_t paragraphs = 0;
  for (size_t at = validation.find("\n\n"); at != std::string::npos;
       at = validation.find("\n\n", at + 2)) {
    ++paragraphs;
  }
  const int32_t eot = tokenizer.end_of_text_id();
  EXPECT_EQ(static_cast<size_t>(std::count(tokens.begin(), tokens.end(), eot)), paragraphs);
  std::string decoded;
  for (int32_t token : tokens) decoded += token == eot ? "\n" : tokenizer.token_bytes(token);
  EXPECT_EQ(decoded, validation);
  const double bytes_per_token = static_cast<double>(validation.size()) / tokens.size();
  EXPECT_GT(bytes_per_token, 2.5);
  const gpt::TokenChunks chunks(file, 128);
  EXPECT_EQ(chunks.size(), (tokens.size() - 1) / 128);
  EXPECT_GT(chunks.size(), 500u);
  const auto again = std::chrono::steady_clock::now();
  EXPECT_EQ(gpt::tokenize_to_cache(brown / "validation.txt", tokenizer, dir.path()), path);
  const std::chrono::duration<double> second = std::chrono::steady_clock::now() - again;
  std::cout << "[ info     ] validation: " << tokens.size() << " tokens (" << bytes_per_token
            << " bytes/token), " << paragraphs << " paragraphs, " << chunks.size()
            << " chunks of 128; tokenized in " << first.count() << " s, cached call "
            << second.count() << " s\n";
}

}  // namespace gpt_data_test
