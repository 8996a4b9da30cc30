#include "dataset/bpe_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <functional>

#include "core/errors.h"
#include "core/utf8.h"
#include "dataset/pretokenizer.h"
#include "dataset/tokenizer_decoder.h"
#include "dataset/tokenizer_json.h"

namespace inkstone {
namespace {

using nlohmann::json;

// Words longer than this are merged every time: long runs (digits, whitespace) are rare and would crowd out the
// short, frequent words that make the cache worth having.
constexpr size_t kMaxCachedWordBytes = 64;
// Cleared when full: a stream whose vocabulary drifts refills it with what is frequent now.
constexpr size_t kCacheEntries = 1 << 17;

bool empty_or_null(const json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty());
}

// The vocabulary text of a byte-fallback token, "<0xAB>" with upper-case hex as SentencePiece writes it.
std::string fallback_text(int byte) { return fmt::format("<0x{:02X}>", byte); }

class ByteSymbols final : public InitialSymbols {
 public:
  explicit ByteSymbols(const std::unordered_map<std::string, int32_t>& id_of_text) {
    for (int b = 0; b < 256; ++b) {
      auto it = id_of_text.find(byte_level_char(static_cast<uint8_t>(b)));
      if (it == id_of_text.end()) throw InputError(fmt::format("vocabulary lacks byte 0x{:02x}", b));
      id_of_byte_[b] = it->second;
    }
  }

  int64_t split(std::string_view word, std::vector<int32_t>& symbols) const override {
    for (char c : word) symbols.push_back(id_of_byte_[static_cast<uint8_t>(c)]);
    return 0;
  }

 private:
  std::array<int32_t, 256> id_of_byte_{};
};

class CharSymbols final : public InitialSymbols {
 public:
  CharSymbols(const json& model, const std::unordered_map<std::string, int32_t>& id_of_text)
      : byte_fallback_(json_flag(model, "byte_fallback", false)), fuse_unk_(json_flag(model, "fuse_unk", false)) {
    for (const auto& [text, id] : id_of_text) {
      const size_t length = utf8_sequence_length(text, 0);
      if (length == text.size()) id_of_char_.emplace(utf8_code_point(text, 0, length), id);
    }
    for (int b = 0; b < 256; ++b) {
      auto it = id_of_text.find(fallback_text(b));
      fallback_id_[b] = it == id_of_text.end() ? -1 : it->second;
    }
    if (!empty_or_null(model, "unk_token")) {
      unk_text_ = model.at("unk_token").get<std::string>();
      auto it = id_of_text.find(unk_text_);
      if (it != id_of_text.end()) unk_id_ = it->second;
    }
  }

  // Hugging Face's order, kept exactly: a pending unk is written before the next known character, so it follows
  // byte-fallback tokens that came between.
  int64_t split(std::string_view word, std::vector<int32_t>& symbols) const override {
    bool unk_pending = false;
    int64_t left_out = 0;
    for (size_t pos = 0; pos < word.size();) {
      const size_t valid_length = utf8_sequence_length(word, pos);
      const size_t length = valid_length > 0 ? valid_length : 1;
      const int32_t id = valid_length > 0 ? char_id(utf8_code_point(word, pos, length)) : -1;
      if (id >= 0) {
        if (unk_pending) symbols.push_back(unk_id_);
        unk_pending = false;
        symbols.push_back(id);
      } else if (!push_fallback_bytes(word.substr(pos, length), symbols) && !unk_text_.empty()) {
        if (unk_id_ < 0) throw InputError(fmt::format("unk_token '{}' is not in the vocabulary", unk_text_));
        if (unk_pending && !fuse_unk_) symbols.push_back(unk_id_);
        unk_pending = true;
      } else if (unk_text_.empty() && !(byte_fallback_ && fallback_covers(word.substr(pos, length)))) {
        left_out += static_cast<int64_t>(length);  // no id, no fallback, no unk: Hugging Face drops it too
      }
      pos += length;
    }
    if (unk_pending) symbols.push_back(unk_id_);
    return left_out;
  }

 private:
  int32_t char_id(char32_t code_point) const {
    auto it = id_of_char_.find(code_point);
    return it == id_of_char_.end() ? -1 : it->second;
  }

  bool fallback_covers(std::string_view character) const {
    return std::all_of(character.begin(), character.end(),
                       [&](char c) { return fallback_id_[static_cast<uint8_t>(c)] >= 0; });
  }

  bool push_fallback_bytes(std::string_view character, std::vector<int32_t>& symbols) const {
    if (!byte_fallback_ || !fallback_covers(character)) return false;
    for (char c : character) symbols.push_back(fallback_id_[static_cast<uint8_t>(c)]);
    return true;
  }

  bool byte_fallback_;
  bool fuse_unk_;
  std::unordered_map<char32_t, int32_t> id_of_char_;
  std::array<int32_t, 256> fallback_id_{};
  std::string unk_text_;
  int32_t unk_id_ = -1;
};

}  // namespace

BpeModel::BpeModel(const json& model, bool byte_level) : byte_level_(byte_level) {
  if (model.value("type", "BPE") != "BPE") {
    throw InputError(fmt::format("model type '{}' is not supported (only BPE)", model.value("type", "")));
  }
  if (!empty_or_null(model, "continuing_subword_prefix") || !empty_or_null(model, "end_of_word_suffix")) {
    throw InputError("BPE with continuing_subword_prefix or end_of_word_suffix is not supported");
  }
  const auto id_of_text = parse_vocab(model.at("vocab"));
  parse_merges(model.at("merges"), id_of_text);
  if (byte_level_) {
    initial_symbols_ = std::make_unique<ByteSymbols>(id_of_text);
  } else {
    initial_symbols_ = std::make_unique<CharSymbols>(model, id_of_text);
  }
  if (json_flag(model, "ignore_merges", false)) index_whole_words();
}

BpeModel::~BpeModel() = default;

std::unordered_map<std::string, int32_t> BpeModel::parse_vocab(const json& vocab) {
  std::unordered_map<std::string, int32_t> id_of_text;
  id_of_text.reserve(vocab.size());
  int32_t size = 0;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int32_t id = json_token_id(it.value(), fmt::format("vocabulary id of '{}'", it.key()));
    size = std::max(size, id + 1);
    id_of_text.emplace(it.key(), id);
  }
  if (static_cast<size_t>(size) != vocab.size()) {
    throw InputError(fmt::format("vocabulary ids are not 0..{} without gaps or repeats", vocab.size() - 1));
  }
  // As many ids as entries and none beyond: a repeat would leave a gap, but name the repeat itself.
  texts_.resize(size);
  std::vector<bool> seen(static_cast<size_t>(size), false);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const auto id = static_cast<size_t>(it.value().get<int32_t>());
    if (seen[id])
      throw InputError(fmt::format("vocabulary id {} is given to '{}' and to '{}'", id, texts_[id], it.key()));
    seen[id] = true;
    texts_[id] = it.key();
  }
  return id_of_text;
}

void BpeModel::parse_merges(const json& merges, const std::unordered_map<std::string, int32_t>& id_of_text) {
  merges_.reserve(merges.size());
  merge_of_pair_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& entry = merges[rank];
    std::string left, right;
    if (entry.is_string()) {
      const auto text = entry.get<std::string>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        throw InputError(fmt::format("merge {} '{}' is not two tokens separated by one space", rank, text));
      }
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else {
      left = entry.at(0).get<std::string>();
      right = entry.at(1).get<std::string>();
    }
    auto find = [&](const std::string& text) {
      auto it = id_of_text.find(text);
      if (it == id_of_text.end()) {
        throw InputError(fmt::format("merge {} '{} {}' uses '{}', which is not in the vocabulary", rank, left,
                                     right, text));
      }
      return it->second;
    };
    const int32_t left_id = find(left), right_id = find(right), merged_id = find(left + right);
    merges_.emplace_back(left_id, right_id);
    merge_of_pair_.emplace(pair_key(left_id, right_id), Merge{static_cast<int32_t>(rank), merged_id});
  }
}

// A word that is a vocabulary entry is that one id, as Hugging Face's ignore_merges does. Byte-level words arrive as
// raw bytes, so byte-level texts are indexed by their bytes.
void BpeModel::index_whole_words() {
  for (int32_t id = 0; id < size(); ++id) {
    if (!byte_level_) {
      id_of_word_.emplace(texts_[id], id);
    } else if (auto raw = from_byte_level(texts_[id])) {
      id_of_word_.emplace(std::move(*raw), id);
    }
  }
}

std::string BpeModel::bytes(int32_t id) const {
  const std::string& text = texts_[id];
  if (byte_level_) {
    auto raw = from_byte_level(text);
    return raw ? *raw : text;
  }
  const int byte = byte_fallback_value(text);
  return byte >= 0 ? std::string(1, static_cast<char>(byte)) : text;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() <= 1) {  // One symbol or none: no merge applies.
    unrepresented_bytes_ += initial_symbols_->split(word, out);
    return;
  }
  if (!id_of_word_.empty()) {
    auto it = id_of_word_.find(std::string(word));
    if (it != id_of_word_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> symbols;
  if (word.size() > kMaxCachedWordBytes) {
    unrepresented_bytes_ += initial_symbols_->split(word, symbols);
    merge_symbols(symbols, out);
    return;
  }
  std::string key(word);
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  const int64_t left_out = initial_symbols_->split(word, symbols);
  merge_symbols(symbols, out);
  if (left_out > 0) {
    unrepresented_bytes_ += left_out;
    return;
  }
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kCacheEntries) cache_.clear();
  cache_.emplace(std::move(key), std::vector<int32_t>(out.begin() + first, out.end()));
}

// Applies merges lowest rank first, leftmost first among equal ranks, as the Hugging Face BPE model does:
// symbols form a linked list, candidate pairs wait in a min-heap, and a candidate whose symbols have changed
// since it was pushed is skipped when popped. O(n log n) in the number of symbols.
void BpeModel::merge_symbols(const std::vector<int32_t>& initial, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id, prev, next;
  };
  struct Candidate {
    int32_t rank, pos, left_id, right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const auto n = static_cast<int32_t>(initial.size());
  if (n == 0) return;
  std::vector<Symbol> symbols(n);
  for (int32_t i = 0; i < n; ++i) symbols[i] = {initial[i], i - 1, i + 1 < n ? i + 1 : -1};
  std::vector<Candidate> heap;
  auto push = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    auto it = merge_of_pair_.find(pair_key(symbols[pos].id, symbols[next].id));
    if (it == merge_of_pair_.end()) return;
    heap.push_back({it->second.rank, pos, symbols[pos].id, symbols[next].id});
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = symbols[c.pos];
    if (left.id != c.left_id || left.next < 0 || symbols[left.next].id != c.right_id) continue;
    const int32_t right = left.next;
    left.id = merge_of_pair_.at(pair_key(c.left_id, c.right_id)).merged_id;
    left.next = symbols[right].next;
    if (left.next >= 0) symbols[left.next].prev = c.pos;
    symbols[right].id = -1;  // Dead: no candidate can name it again.
    if (left.prev >= 0) push(left.prev);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

void BpeModel::write_vocab_and_merges(json& model) const {
  json vocab = json::object();
  for (int32_t id = 0; id < size(); ++id) vocab[texts_[id]] = id;
  // The "a b" form every Hugging Face version reads, unless a text holds a space: then [a, b] lists.
  const bool spaced = std::any_of(merges_.begin(), merges_.end(), [&](const auto& merge) {
    return texts_[merge.first].find(' ') != std::string::npos || texts_[merge.second].find(' ') != std::string::npos;
  });
  json merges = json::array();
  for (const auto& [left, right] : merges_) {
    if (spaced) {
      merges.push_back({texts_[left], texts_[right]});
    } else {
      merges.push_back(texts_[left] + " " + texts_[right]);
    }
  }
  model["vocab"] = std::move(vocab);
  model["merges"] = std::move(merges);
}

}  // namespace inkstone
