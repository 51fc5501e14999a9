// The BPE and WordPiece models of tokenizer.json files, and GPT-2's byte map.
#include <array>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "text/tokenizer_json_parts.h"
#include "text/unicode.h"

namespace accelerate::detail {
namespace {

struct ByteMap {
  std::array<char32_t, 256> to_char{};
  std::unordered_map<char32_t, int> to_byte;
  ByteMap() {
    // Printable Latin-1 bytes stand for themselves; the others (controls,
    // space, soft hyphen...) take 256, 257, ... in byte order, so every byte
    // has a visible character.
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[b]] = b;
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

// The vocabulary both models share: token -> id and id -> token.
struct Vocabulary {
  std::unordered_map<std::string, int32_t> ids;
  std::vector<std::string> tokens;  // by id; gaps are empty

  void read(const nlohmann::json& vocab, const std::string& origin, const std::string& where) {
    if (!vocab.is_object()) tokenizer_json_error(origin, where + " vocab is not an object");
    for (const auto& [token, id] : vocab.items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 30)) {
        tokenizer_json_error(origin, where + " vocab id of '" + token + "' is not a valid id");
      }
      const auto value = id.get<int32_t>();
      ids[token] = value;
      if (tokens.size() <= static_cast<size_t>(value)) tokens.resize(value + 1);
      tokens[value] = token;
    }
  }
  std::optional<int32_t> find(const std::string& token) const {
    const auto it = ids.find(token);
    if (it == ids.end()) return std::nullopt;
    return it->second;
  }
  const std::string* token(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= tokens.size()) return nullptr;
    return &tokens[id];
  }
};

uint64_t merge_pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

class BpeModel : public Model {
 public:
  BpeModel(const nlohmann::json& spec, const std::string& origin) {
    const std::string where = "model BPE";
    vocab_.read(json_field(spec, "vocab", origin, where), origin, where);
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix", "dropout"}) {
      if (spec.contains(key) && !spec[key].is_null()) {
        tokenizer_json_error(origin, where + " setting '" + key + "' is not supported");
      }
    }
    fuse_unk_ = json_bool(spec, "fuse_unk", false, origin, where);
    byte_fallback_ = json_bool(spec, "byte_fallback", false, origin, where);
    ignore_merges_ = json_bool(spec, "ignore_merges", false, origin, where);
    if (spec.contains("unk_token") && !spec["unk_token"].is_null()) {
      unk_ = vocab_.find(json_string(spec, "unk_token", origin, where));
      if (!unk_) tokenizer_json_error(origin, where + " unk_token is not in the vocab");
    }
    const auto& merges = json_field(spec, "merges", origin, where);
    int32_t rank = 0;
    for (const auto& merge : merges) {
      // "a b" (older files) or ["a", "b"].
      std::string left, right;
      if (merge.is_string()) {
        const std::string text = merge.get<std::string>();
        const size_t space = text.find(' ', 1);
        if (space == std::string::npos) {
          tokenizer_json_error(origin, where + " merge '" + text + "' is not 'a b'");
        }
        left = text.substr(0, space), right = text.substr(space + 1);
      } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
                 merge[1].is_string()) {
        left = merge[0].get<std::string>(), right = merge[1].get<std::string>();
      } else {
        tokenizer_json_error(origin, where + " merge " + merge.dump() + " is not a pair");
      }
      const auto a = vocab_.find(left), b = vocab_.find(right), made = vocab_.find(left + right);
      if (!a || !b || !made) {
        tokenizer_json_error(origin, where + " merge '" + left + " " + right +
                                         "' uses or makes a token outside the vocab");
      }
      merges_.emplace(merge_pair_key(*a, *b), std::make_pair(rank++, *made));
    }
    for (int b = 0; b < 256 && byte_fallback_; ++b) {
      static const char* kHex = "0123456789ABCDEF";
      byte_ids_[b] = vocab_.find(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">");
    }
  }

  void encode_word(const std::u32string& word, std::vector<int32_t>& out) const override {
    const std::string text = u32_to_utf8(word);
    if (ignore_merges_) {
      if (auto id = vocab_.find(text)) {
        out.push_back(*id);
        return;
      }
    }
    {
      MutexLock lock(cache_mutex_);
      const auto hit = cache_.find(text);
      if (hit != cache_.end()) {
        out.insert(out.end(), hit->second.begin(), hit->second.end());
        return;
      }
    }
    std::vector<int32_t> ids = merge_word(word);
    out.insert(out.end(), ids.begin(), ids.end());
    if (text.size() > kCacheMaxWordBytes) return;
    MutexLock lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity) cache_.emplace(text, std::move(ids));
  }

  std::optional<int32_t> token_to_id(const std::string& token) const override {
    return vocab_.find(token);
  }
  const std::string* id_to_token(int32_t id) const override { return vocab_.token(id); }
  int32_t vocab_size() const override { return static_cast<int32_t>(vocab_.tokens.size()); }

 private:
  // Words seen before (bounded: a long stream of distinct words must not grow
  // memory without end).
  static constexpr size_t kCacheCapacity = 100000;
  // Longer "words" (whole lines, where no pre-tokenizer splits) rarely repeat.
  static constexpr size_t kCacheMaxWordBytes = 256;

  struct Symbol {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
    bool alive;
  };
  struct Candidate {
    int32_t rank, pos, made;
    // Lowest rank first, then leftmost: `tokenizers`' merge order.
    bool operator<(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };

  // The initial symbols: one per character, or its <0xNN> bytes, or unk.
  std::vector<int32_t> initial_symbols(const std::u32string& word) const {
    std::vector<int32_t> ids;
    bool last_unk = false;
    std::string text;
    for (char32_t c : word) {
      text.clear();
      append_utf8(c, text);
      if (auto id = vocab_.find(text)) {
        ids.push_back(*id), last_unk = false;
        continue;
      }
      if (byte_fallback_) {
        bool all = true;
        for (unsigned char b : text) all = all && byte_ids_[b].has_value();
        if (all) {
          for (unsigned char b : text) ids.push_back(*byte_ids_[b]);
          last_unk = false;
          continue;
        }
      }
      if (!unk_) continue;  // no unk token: the character is dropped
      if (!(fuse_unk_ && last_unk)) ids.push_back(*unk_);
      last_unk = true;
    }
    return ids;
  }

  std::vector<int32_t> merge_word(const std::u32string& word) const {
    const std::vector<int32_t> start = initial_symbols(word);
    const int32_t n = static_cast<int32_t>(start.size());
    std::vector<Symbol> symbols(n);
    for (int32_t i = 0; i < n; ++i) symbols[i] = {start[i], i - 1, i + 1 < n ? i + 1 : -1, true};
    std::priority_queue<Candidate> queue;
    const auto push = [&](int32_t pos) {
      const int32_t next = symbols[pos].next;
      if (next < 0) return;
      const auto it = merges_.find(merge_pair_key(symbols[pos].id, symbols[next].id));
      if (it != merges_.end()) queue.push({it->second.first, pos, it->second.second});
    };
    for (int32_t i = 0; i + 1 < n; ++i) push(i);
    while (!queue.empty()) {
      const Candidate top = queue.top();
      queue.pop();
      Symbol& left = symbols[top.pos];
      if (!left.alive || left.next < 0) continue;
      // Stale when either side changed since the candidate was queued.
      const auto it = merges_.find(merge_pair_key(left.id, symbols[left.next].id));
      if (it == merges_.end() || it->second.second != top.made) continue;
      Symbol& right = symbols[left.next];
      left.id = top.made;
      right.alive = false;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = top.pos;
      if (left.prev >= 0) push(left.prev);
      push(top.pos);
    }
    std::vector<int32_t> ids;
    for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
    return ids;
  }

  Vocabulary vocab_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // pair -> rank, made
  std::optional<int32_t> unk_;
  std::array<std::optional<int32_t>, 256> byte_ids_{};
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  mutable Mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_ GUARDED_BY(cache_mutex_);
};

// Greedy longest-match-first subwords; a word with any unmatched part, or
// longer than max_input_chars_per_word characters, is one unk.
class WordPieceModel : public Model {
 public:
  WordPieceModel(const nlohmann::json& spec, const std::string& origin) {
    const std::string where = "model WordPiece";
    vocab_.read(json_field(spec, "vocab", origin, where), origin, where);
    unk_ = vocab_.find(json_string(spec, "unk_token", origin, where));
    if (!unk_) tokenizer_json_error(origin, where + " unk_token is not in the vocab");
    prefix_ = spec.contains("continuing_subword_prefix")
                  ? json_string(spec, "continuing_subword_prefix", origin, where)
                  : "##";
    const auto& limit = spec.contains("max_input_chars_per_word") ? spec["max_input_chars_per_word"]
                                                                  : nlohmann::json(100);
    if (!limit.is_number_unsigned()) {
      tokenizer_json_error(origin, where + " max_input_chars_per_word is not a count");
    }
    max_chars_ = limit.get<size_t>();
  }

  void encode_word(const std::u32string& word, std::vector<int32_t>& out) const override {
    if (word.size() > max_chars_) {
      out.push_back(*unk_);
      return;
    }
    const size_t first = out.size();
    std::string piece;
    for (size_t start = 0; start < word.size();) {
      size_t end = word.size();
      std::optional<int32_t> found;
      for (; end > start; --end) {
        piece = start > 0 ? prefix_ : std::string();
        piece += u32_to_utf8(std::u32string_view(word).substr(start, end - start));
        if ((found = vocab_.find(piece))) break;
      }
      if (!found) {
        out.resize(first);
        out.push_back(*unk_);
        return;
      }
      out.push_back(*found);
      start = end;
    }
  }

  std::optional<int32_t> token_to_id(const std::string& token) const override {
    return vocab_.find(token);
  }
  const std::string* id_to_token(int32_t id) const override { return vocab_.token(id); }
  int32_t vocab_size() const override { return static_cast<int32_t>(vocab_.tokens.size()); }

 private:
  Vocabulary vocab_;
  std::optional<int32_t> unk_;
  std::string prefix_;
  size_t max_chars_ = 100;
};

}  // namespace

char32_t byte_to_char(unsigned char byte) { return byte_map().to_char[byte]; }

int char_to_byte(char32_t c) {
  const auto& map = byte_map().to_byte;
  const auto it = map.find(c);
  return it == map.end() ? -1 : it->second;
}

std::unique_ptr<Model> make_model(const nlohmann::json& spec, const std::string& origin) {
  if (!spec.is_object()) tokenizer_json_error(origin, "model is missing");
  // Older files leave out the type of a BPE model.
  const std::string type =
      spec.contains("type") ? json_string(spec, "type", origin, "model") : "BPE";
  if (type == "BPE") return std::make_unique<BpeModel>(spec, origin);
  if (type == "WordPiece") return std::make_unique<WordPieceModel>(spec, origin);
  tokenizer_json_error(origin, "unsupported model type '" + type + "'");
}

}  // namespace accelerate::detail
