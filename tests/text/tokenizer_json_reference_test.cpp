// tokenizer.json tokenizers against Hugging Face `tokenizers`: the script
// tests/text/tokenizer_reference.py, run under $ACCELERATE_REFERENCE_PYTHON,
// trains small GPT-2-, Llama 3-, BERT- and Llama 2/Mistral-like tokenizers on
// the Brown corpus and writes their ids and decodes for every corpus line and
// a set of hard strings; our ids and decodes must equal them exactly. And
// the other way: BpeTokenizer's tokenizer.json read by `tokenizers`. Without
// the interpreter or the corpus every test here reports itself skipped.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "accelerate/common/errors.h"
#include "accelerate/text/bpe_tokenizer.h"
#include "accelerate/text/tokenizer.h"

namespace accelerate {
namespace {

namespace fs = std::filesystem;

std::string reference_python() {
  const char* python = std::getenv("ACCELERATE_REFERENCE_PYTHON");
  return python && *python && fs::exists(python) ? python : "";
}

fs::path brown_folder() {
  if (const char* dir = std::getenv("ACCELERATE_BROWN_DIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  return fs::path(ACCELERATE_SOURCE_DIR) / "data" / "brown";
}

std::string slurp(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The reference outputs, made once per script version, interpreter and corpus
// and shared by the test processes: the first makes them under a lock, in a
// private folder renamed into place, while the others wait.
const std::string& reference_root() {
  static const std::string root = []() -> std::string {
    const std::string key = slurp(TOKENIZER_REFERENCE_SCRIPT) + reference_python() +
                            std::to_string(fs::file_size(brown_folder() / "train.txt"));
    const char* bin = std::getenv("ACCELERATE_TEST_BIN_DIR");
    const fs::path base =
        fs::path(bin ? bin : fs::temp_directory_path().string()) / "tokenizers-reference";
    const fs::path ready = base / std::to_string(std::hash<std::string>{}(key));
    fs::create_directories(base);
    const int lock = ::open((base / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock < 0 || ::flock(lock, LOCK_EX) != 0) return "";
    std::string made = ready.string();
    if (!fs::exists(ready / "pairs.json")) {
      const fs::path scratch = base / ("making-" + std::to_string(::getpid()));
      fs::remove_all(scratch);
      fs::create_directories(scratch);
      // Offline: the script trains its tokenizers, it downloads nothing.
      const std::string command =
          "HF_HUB_OFFLINE=1 " + shell_quote(reference_python()) + " " +
          shell_quote(TOKENIZER_REFERENCE_SCRIPT) + " make " + shell_quote(scratch.string()) + " " +
          shell_quote(brown_folder().string()) + " 2> " + shell_quote((base / "make.log").string());
      if (std::system(command.c_str()) != 0) {
        ADD_FAILURE() << "tokenizer_reference.py failed: " << slurp(base / "make.log");
        made.clear();
      } else {
        fs::remove_all(ready);
        fs::rename(scratch, ready);
        // Outputs of earlier script versions (about 100 MB each) are stale.
        for (const auto& entry : fs::directory_iterator(base)) {
          const std::string name = entry.path().filename().string();
          const bool finished = name.find_first_not_of("0123456789") == std::string::npos;
          if (entry.is_directory() && finished && entry.path() != ready) fs::remove_all(entry);
        }
      }
    }
    ::close(lock);
    return made;
  }();
  return root;
}

#define REQUIRE_TOKENIZER_REFERENCE()                                                          \
  if (reference_python().empty())                                                              \
    GTEST_SKIP() << "no Python reference: set ACCELERATE_REFERENCE_PYTHON to the interpreter " \
                    "scripts/install-reference-python.sh prints (scripts/test.sh does)";       \
  if (!fs::exists(brown_folder() / "train.txt"))                                               \
    GTEST_SKIP() << "no Brown corpus in " << brown_folder() << ": run scripts/fetch-brown.sh"; \
  ASSERT_FALSE(reference_root().empty())

std::vector<std::vector<int32_t>> read_id_lines(const fs::path& file) {
  std::vector<std::vector<int32_t>> lines;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    lines.emplace_back();
    for (int32_t id; fields >> id;) lines.back().push_back(id);
  }
  return lines;
}

std::string show_ids(const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < 40; ++i) out += (i ? " " : "") + std::to_string(ids[i]);
  return out + (ids.size() > 40 ? " ..." : "");
}

struct ReferenceInputs {
  size_t hard = 0;
  std::vector<std::string> texts;
  std::vector<std::pair<std::string, std::string>> pairs;
};

const ReferenceInputs& reference_inputs() {
  static const ReferenceInputs inputs = [] {
    ReferenceInputs read;
    const auto json = nlohmann::json::parse(slurp(fs::path(reference_root()) / "inputs.json"));
    read.hard = json["hard"].get<size_t>();
    read.texts = json["inputs"].get<std::vector<std::string>>();
    read.pairs = nlohmann::json::parse(slurp(fs::path(reference_root()) / "pairs.json"))
                     .get<std::vector<std::pair<std::string, std::string>>>();
    return read;
  }();
  return inputs;
}

// Counts the inputs where `ours` differs from the reference, showing a few.
template <typename Value, typename Ours>
size_t count_differences(const std::string& what, const std::vector<Value>& expected, size_t count,
                         Ours ours) {
  size_t differ = 0;
  for (size_t i = 0; i < count; ++i) {
    const Value got = ours(i);
    if (got == expected.at(i)) continue;
    if (++differ <= 5) {
      const auto& inputs = reference_inputs();
      const std::string input = i < inputs.texts.size() ? inputs.texts[i] : "";
      if constexpr (std::is_same_v<Value, std::string>) {
        ADD_FAILURE() << what << " #" << i << " of '" << input << "': ours '" << got
                      << "', tokenizers '" << expected[i] << "'";
      } else {
        ADD_FAILURE() << what << " #" << i << " of '" << input << "': ours [" << show_ids(got)
                      << "], tokenizers [" << show_ids(expected[i]) << "]";
      }
    }
  }
  return differ;
}

// Every truncation strategy and max_length of truncated.json, on the pairs
// and the hard strings: the same ids and type ids, and an Error exactly
// where `tokenizers` refuses.
void expect_truncation_as_tokenizers(const Tokenizer& tokenizer, const fs::path& folder) {
  const auto& inputs = reference_inputs();
  const auto expected = nlohmann::json::parse(slurp(folder / "truncated.json"));
  size_t compared = 0, refused = 0;
  for (const auto& [key, entry] : expected.items()) {
    const std::string name = key.substr(0, key.find(' '));
    TruncationOptions options;
    options.max_length(std::stoul(key.substr(key.find(' ') + 1)));
    for (auto strategy : {TruncationStrategy::kLongestFirst, TruncationStrategy::kOnlyFirst,
                          TruncationStrategy::kOnlySecond}) {
      if (name == to_string(strategy)) options.strategy(strategy);
    }
    ASSERT_EQ(name, to_string(options.strategy())) << key;
    const auto check = [&](const nlohmann::json& want, const std::function<Encoding()>& encode,
                           const std::string& what) {
      ++compared;
      if (want.is_null()) {
        ++refused;
        EXPECT_THROW(encode(), accelerate::Error) << key << " " << what;
        return;
      }
      Encoding got;
      ASSERT_NO_THROW(got = encode()) << key << " " << what;
      EXPECT_EQ(got.ids, want[0].get<std::vector<int32_t>>()) << key << " " << what;
      EXPECT_EQ(got.type_ids, want[1].get<std::vector<int32_t>>()) << key << " " << what;
    };
    if (entry.contains("pairs")) {
      for (size_t i = 0; i < inputs.pairs.size(); ++i) {
        const auto& [a, b] = inputs.pairs[i];
        check(
            entry["pairs"][i], [&] { return tokenizer.encode_pair(a, b, options); },
            "pair #" + std::to_string(i));
      }
    }
    if (entry.contains("texts")) {
      for (size_t i = 0; i < inputs.hard; ++i) {
        check(
            entry["texts"][i],
            [&] { return tokenizer.encode_with_types(inputs.texts[i], options); },
            "text #" + std::to_string(i));
      }
    }
  }
  EXPECT_GT(compared, refused) << folder;
  std::cout << "[ info     ] truncation: " << compared << " encodings compared, " << refused
            << " refused by both\n";
}

void expect_same_as_tokenizers(const std::string& variant) {
  const fs::path folder = fs::path(reference_root()) / variant;
  const auto& inputs = reference_inputs();
  const Tokenizer tokenizer = Tokenizer::from_file(folder.string());  // the folder form
  const auto ids = read_id_lines(folder / "ids.txt");
  ASSERT_EQ(ids.size(), inputs.texts.size());
  std::vector<std::vector<int32_t>> ours(inputs.texts.size());
  for (size_t i = 0; i < inputs.texts.size(); ++i) ours[i] = tokenizer.encode(inputs.texts[i]);
  EXPECT_EQ(count_differences("ids", ids, ids.size(), [&](size_t i) { return ours[i]; }), 0u)
      << variant << ": of " << ids.size() << " texts";

  const auto plain = read_id_lines(folder / "plain_ids.txt");
  EXPECT_EQ(count_differences("ids without special tokens", plain, inputs.hard,
                              [&](size_t i) { return tokenizer.encode(inputs.texts[i], false); }),
            0u)
      << variant;

  const auto decoded = nlohmann::json::parse(slurp(folder / "decoded.json"));
  const auto skip = decoded["skip"].get<std::vector<std::string>>();
  const auto keep = decoded["keep"].get<std::vector<std::string>>();
  EXPECT_EQ(count_differences("decode", skip, skip.size(),
                              [&](size_t i) { return tokenizer.decode(ids[i]); }),
            0u)
      << variant;
  EXPECT_EQ(count_differences("decode keeping special tokens", keep, keep.size(),
                              [&](size_t i) { return tokenizer.decode(ids[i], false); }),
            0u)
      << variant;

  const auto pair_ids = read_id_lines(folder / "pair_ids.txt");
  const auto pair_types = read_id_lines(folder / "pair_types.txt");
  ASSERT_EQ(pair_ids.size(), inputs.pairs.size());
  std::vector<Encoding> pairs;
  for (const auto& [a, b] : inputs.pairs) pairs.push_back(tokenizer.encode_pair(a, b));
  EXPECT_EQ(count_differences("pair ids", pair_ids, pair_ids.size(),
                              [&](size_t i) { return pairs[i].ids; }),
            0u)
      << variant;
  EXPECT_EQ(count_differences("pair type ids", pair_types, pair_types.size(),
                              [&](size_t i) { return pairs[i].type_ids; }),
            0u)
      << variant;
  expect_truncation_as_tokenizers(tokenizer, folder);
  std::cout << "[ info     ] " << variant << ": " << inputs.texts.size() << " texts ("
            << inputs.hard << " hard strings), " << pairs.size() << " pairs compared\n";
}

TEST(TokenizerJsonReference, Gpt2ByteLevelBpeWithStringMerges) {
  REQUIRE_TOKENIZER_REFERENCE();
  expect_same_as_tokenizers("gpt2");
}

TEST(TokenizerJsonReference, Gpt2PrefixSpaceAndStrippedAddedTokens) {
  REQUIRE_TOKENIZER_REFERENCE();
  expect_same_as_tokenizers("gpt2_prefix");
}

TEST(TokenizerJsonReference, Llama3SplitRegexIgnoreMergesAndBos) {
  REQUIRE_TOKENIZER_REFERENCE();
  expect_same_as_tokenizers("llama3");
}

TEST(TokenizerJsonReference, BertUncasedWordPieceWithPairs) {
  REQUIRE_TOKENIZER_REFERENCE();
  expect_same_as_tokenizers("bert");
}

TEST(TokenizerJsonReference, BertCasedWithBertProcessing) {
  REQUIRE_TOKENIZER_REFERENCE();
  expect_same_as_tokenizers("bert_cased");
}

TEST(TokenizerJsonReference, Llama2ByteFallbackPrependReplace) {
  REQUIRE_TOKENIZER_REFERENCE();
  expect_same_as_tokenizers("llama2");
}

TEST(TokenizerJsonReference, MistralMetaspaceWithFusedUnknowns) {
  REQUIRE_TOKENIZER_REFERENCE();
  expect_same_as_tokenizers("mistral");
}

// BpeTokenizer's own tokenizer.json (save_tokenizer_json): a tokenizer
// trained here on the corpus, written out and read by `tokenizers`, gives
// the ids encode() gives on every input (the hard strings, every corpus line,
// the paragraphs), decodes them back to the text, and reads back into
// accelerate::Tokenizer with the same ids too.
TEST(TokenizerJsonReference, BpeTokenizerFileReadsInTokenizersWithOurIds) {
  REQUIRE_TOKENIZER_REFERENCE();
  const auto& inputs = reference_inputs();
  std::vector<std::string> training;
  std::istringstream corpus(slurp(brown_folder() / "train.txt"));
  for (std::string line; std::getline(corpus, line);)
    if (!line.empty()) training.push_back(line);
  // The hard strings too, so merges cover runs of spaces, tabs and newlines.
  for (int copy = 0; copy < 50; ++copy)
    training.insert(training.end(), inputs.texts.begin(), inputs.texts.begin() + inputs.hard);
  const BpeTokenizer bpe = BpeTokenizer::train(training, 3000);
  const fs::path folder =
      fs::path(reference_root()).parent_path() / ("bpe-json-" + std::to_string(::getpid()));
  fs::create_directories(folder);
  const fs::path file = folder / "tokenizer.json";
  bpe.save_tokenizer_json(file.string());
  const std::string command =
      "HF_HUB_OFFLINE=1 " + shell_quote(reference_python()) + " " +
      shell_quote(TOKENIZER_REFERENCE_SCRIPT) + " encode " + shell_quote(file.string()) + " " +
      shell_quote((fs::path(reference_root()) / "inputs.json").string()) + " " +
      shell_quote(folder.string()) + " 2> " + shell_quote((folder / "encode.log").string());
  ASSERT_EQ(std::system(command.c_str()), 0) << slurp(folder / "encode.log");
  const auto ids = read_id_lines(folder / "ids.txt");
  ASSERT_EQ(ids.size(), inputs.texts.size());
  auto expected = ids;
  // The one difference, by design: `tokenizers` matches the special token's
  // text in the input (as GPT-2's tokenizer does), encode() never makes it.
  size_t with_special_text = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (inputs.texts[i].find(BpeTokenizer::kEndOfText) == std::string::npos) continue;
    ++with_special_text;
    EXPECT_NE(std::find(ids[i].begin(), ids[i].end(), bpe.end_of_text_id()), ids[i].end()) << i;
    expected[i] = bpe.encode(inputs.texts[i]);
  }
  EXPECT_GT(with_special_text, 0u);
  EXPECT_EQ(count_differences("BpeTokenizer ids", expected, expected.size(),
                              [&](size_t i) { return bpe.encode(inputs.texts[i]); }),
            0u);
  const auto decoded = nlohmann::json::parse(slurp(folder / "decoded.json"));
  EXPECT_EQ(count_differences("tokenizers' decode", inputs.texts, inputs.texts.size(),
                              [&](size_t i) { return decoded.at(i).get<std::string>(); }),
            0u);
  const Tokenizer read = Tokenizer::from_file(file.string());
  EXPECT_EQ(count_differences("accelerate::Tokenizer ids", ids, ids.size(),
                              [&](size_t i) { return read.encode(inputs.texts[i], false); }),
            0u);
  EXPECT_EQ(read.token_to_id(std::string(BpeTokenizer::kEndOfText)), bpe.end_of_text_id());
  std::cout << "[ info     ] BpeTokenizer's tokenizer.json: " << inputs.texts.size()
            << " texts compared, vocab " << bpe.vocab_size() << "\n";
  fs::remove_all(folder);
}

}  // namespace
}  // namespace accelerate
