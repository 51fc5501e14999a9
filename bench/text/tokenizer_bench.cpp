// tokenizer_bench: encode throughput of accelerate::Tokenizer against Hugging
// Face `tokenizers` on the Brown corpus, one thread each, per tokenizer.json
// (docs/tokenizers.md, "Speed"). bench/text/run_tokenizer_bench.sh makes the
// tokenizers (tests/text/tokenizer_reference.py configs) and runs this.
//
//   tokenizer_bench DIR BROWN_DIR [PYTHON]
//
// DIR holds one folder per tokenizer (DIR/<name>/tokenizer.json). Every line
// of BROWN_DIR/train.txt and validation.txt is encoded, best of 3 runs; with
// PYTHON (or $ACCELERATE_REFERENCE_PYTHON) `tokenizers` encodes the same lines
// (encode_batch, RAYON_NUM_THREADS=1) and the ratio is printed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "accelerate/text/tokenizer.h"

namespace fs = std::filesystem;

namespace {

constexpr int kRepeats = 3;

std::vector<std::string> read_lines(const std::vector<fs::path>& files) {
  std::vector<std::string> lines;
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + file.string());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  return lines;
}

struct Timing {
  double seconds = 0;
  size_t tokens = 0;
  double seconds_with_offsets = 0;  // tokenizers' encode_batch
};

Timing time_ours(const accelerate::Tokenizer& tokenizer, const std::vector<std::string>& lines) {
  Timing best{1e300, 0};
  for (int run = 0; run < kRepeats; ++run) {
    size_t tokens = 0;
    const auto start = std::chrono::steady_clock::now();
    for (const std::string& line : lines) tokens += tokenizer.encode(line).size();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    best = {std::min(best.seconds, took.count()), tokens};
  }
  return best;
}

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// `tokenizers`' timings by folder, from bench/text/tokenizer_bench.py.
std::map<std::string, Timing> time_reference(const std::string& python, const fs::path& corpus,
                                             const std::vector<fs::path>& folders) {
  std::string command = "RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false " + shell_quote(python) +
                        " " + shell_quote(TOKENIZER_BENCH_SCRIPT) + " " +
                        shell_quote(corpus.string()) + " " + std::to_string(kRepeats);
  for (const auto& folder : folders) command += " " + shell_quote(folder.string());
  std::map<std::string, Timing> timings;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return timings;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe)) {
    std::istringstream fields(buffer);
    std::string folder;
    Timing timing;
    if (fields >> folder >> timing.seconds >> timing.seconds_with_offsets >> timing.tokens) {
      timings[folder] = timing;
    }
  }
  if (::pclose(pipe) != 0) std::cerr << "tokenizer_bench.py failed\n";
  return timings;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: tokenizer_bench DIR BROWN_DIR [PYTHON]\n";
    return 2;
  }
  const fs::path dir = argv[1], brown = argv[2];
  const char* env_python = std::getenv("ACCELERATE_REFERENCE_PYTHON");
  const std::string python = argc > 3 ? argv[3] : env_python ? env_python : "";
  const std::vector<std::string> lines =
      read_lines({brown / "train.txt", brown / "validation.txt"});
  size_t bytes = 0;
  for (const auto& line : lines) bytes += line.size() + 1;
  // The same lines for Python, in one file.
  const fs::path corpus = dir / "bench-corpus.txt";
  {
    std::ofstream out(corpus, std::ios::binary);
    for (size_t i = 0; i < lines.size(); ++i) out << lines[i] << (i + 1 < lines.size() ? "\n" : "");
  }
  std::vector<fs::path> folders;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (fs::exists(entry.path() / "tokenizer.json")) folders.push_back(entry.path());
  }
  std::sort(folders.begin(), folders.end());
  const auto reference =
      python.empty() ? std::map<std::string, Timing>() : time_reference(python, corpus, folders);
  std::printf("Brown corpus: %zu lines, %.2f MB; one thread; best of %d\n", lines.size(),
              bytes / 1e6, kRepeats);
  std::printf("%-12s %10s %12s %12s %14s %8s\n", "tokenizer", "tokens", "ours MB/s", "ours Mtok/s",
              "tokenizers MB/s", "ratio");
  for (const auto& folder : folders) {
    const auto tokenizer = accelerate::Tokenizer::from_file(folder.string());
    const Timing ours = time_ours(tokenizer, lines);
    const auto theirs = reference.find(folder.string());
    std::printf("%-12s %9zu %10.2f %11.3f", folder.filename().c_str(), ours.tokens,
                bytes / ours.seconds / 1e6, ours.tokens / ours.seconds / 1e6);
    if (theirs != reference.end()) {
      // ratio > 1: we are faster. Token counts must agree (same ids).
      const Timing& t = theirs->second;
      std::printf(" %10.2f / %8.2f %6.2fx / %5.2fx%s\n", bytes / t.seconds / 1e6,
                  bytes / t.seconds_with_offsets / 1e6, t.seconds / ours.seconds,
                  t.seconds_with_offsets / ours.seconds,
                  t.tokens == ours.tokens ? "" : "  (token counts differ!)");
    } else {
      std::printf(" %21s %14s\n", "-", "-");
    }
  }
  return 0;
}
