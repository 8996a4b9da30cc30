#include "core/bpe_tokenizer.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/errors.h"

namespace inkstone {
namespace {

using nlohmann::json;

// Pre-tokens longer than this are merged every time: long runs (digits, whitespace) are rare and would crowd
// out the short, frequent words that make the cache worth having.
constexpr size_t kMaxCachedPieceBytes = 64;
// Cleared when full: a stream whose vocabulary drifts refills it with what is frequent now.
constexpr size_t kCacheEntries = 1 << 17;

bool json_flag(const json& object, const char* key, bool fallback) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? fallback : it->get<bool>();
}

bool empty_or_null(const json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty());
}

}  // namespace

BpeTokenizer::BpeTokenizer(const json& document, const std::string& origin) : origin_(origin) {
  try {
    if (!document.is_object() || !document.contains("model")) throw InputError("no \"model\" object");
    parse_model(document.at("model"));
    parse_added_tokens(document.value("added_tokens", json::array()));
    parse_pre_tokenizer(document.value("pre_tokenizer", json()));
    const json normalizer = document.value("normalizer", json());
    if (!normalizer.is_null() && normalizer.value("type", "") != "NFC") {
      throw InputError(fmt::format("normalizer {} is not supported (only null or NFC)", normalizer.dump()));
    }
    const json decoder = document.value("decoder", json());
    if (!decoder.is_null() && decoder.value("type", "") != "ByteLevel") {
      throw InputError(fmt::format("decoder {} is not supported (only ByteLevel)", decoder.dump()));
    }
    reserve_specials();
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: malformed tokenizer.json: {}", origin, e.what()));
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", origin, e.what()));
  }
  document_ = document;
  document_["model"].erase("vocab");
  document_["model"].erase("merges");
  document_.erase("added_tokens");
}

void BpeTokenizer::parse_model(const json& model) {
  if (model.value("type", "BPE") != "BPE") {
    throw InputError(fmt::format("model type '{}' is not supported (only BPE)", model.value("type", "")));
  }
  if (json_flag(model, "byte_fallback", false) || !empty_or_null(model, "continuing_subword_prefix") ||
      !empty_or_null(model, "end_of_word_suffix")) {
    throw InputError("only byte-level BPE is supported (byte_fallback, continuing_subword_prefix or "
                     "end_of_word_suffix is set)");
  }
  ignore_merges_ = json_flag(model, "ignore_merges", false);

  const json& vocab = model.at("vocab");
  std::unordered_map<std::string, int32_t> id_of_text;
  id_of_text.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const auto id = it.value().get<int32_t>();
    if (id < 0) throw InputError(fmt::format("vocabulary id {} of '{}' is negative", id, it.key()));
    model_vocab_size_ = std::max(model_vocab_size_, id + 1);
    id_of_text.emplace(it.key(), id);
  }
  if (static_cast<size_t>(model_vocab_size_) != vocab.size()) {
    throw InputError(fmt::format("vocabulary ids are not 0..{} without gaps or repeats", vocab.size() - 1));
  }
  // Texts that are not byte-level (added tokens also in the vocabulary) are resolved by parse_added_tokens.
  tokens_.resize(model_vocab_size_);
  for (const auto& [text, id] : id_of_text) {
    if (auto bytes = from_byte_level(text)) tokens_[id] = std::move(*bytes);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = id_of_text.find(byte_level_char(static_cast<uint8_t>(b)));
    if (it == id_of_text.end()) throw InputError(fmt::format("vocabulary lacks byte 0x{:02x}", b));
    byte_id_[b] = it->second;
  }

  const json& merges = model.at("merges");
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
  if (ignore_merges_) {
    for (int32_t id = 0; id < model_vocab_size_; ++id) id_of_bytes_.emplace(tokens_[id], id);
  }
}

void BpeTokenizer::parse_added_tokens(const json& added) {
  int32_t size = model_vocab_size_;
  for (const json& entry : added) size = std::max(size, entry.at("id").get<int32_t>() + 1);
  tokens_.resize(size);
  special_.assign(size, false);
  std::vector<bool> covered(size, false);
  std::fill(covered.begin(), covered.begin() + model_vocab_size_, true);
  for (const json& entry : added) {
    const auto id = entry.at("id").get<int32_t>();
    const auto content = entry.at("content").get<std::string>();
    if (id < 0) throw InputError(fmt::format("added token '{}' has negative id {}", content, id));
    if (content.empty()) throw InputError(fmt::format("added token {} has empty content", id));
    if (id >= model_vocab_size_ && covered[id]) throw InputError(fmt::format("added token id {} repeats", id));
    covered[id] = true;
    tokens_[id] = content;
    special_[id] = json_flag(entry, "special", false);
    added_.push_back({id, content, special_[id]});
    added_entries_.push_back(entry);
  }
  for (int32_t id = 0; id < size; ++id) {
    if (!covered[id]) throw InputError(fmt::format("id {} is neither in the vocabulary nor an added token", id));
  }
  for (int32_t id = 0; id < model_vocab_size_; ++id) {
    if (tokens_[id].empty()) throw InputError(fmt::format("vocabulary entry {} is not byte-level text", id));
  }
}

void BpeTokenizer::parse_pre_tokenizer(const json& pre_tokenizer) {
  std::vector<json> steps;
  if (pre_tokenizer.value("type", "") == "Sequence") {
    for (const json& step : pre_tokenizer.at("pretokenizers")) steps.push_back(step);
  } else if (!pre_tokenizer.is_null()) {
    steps.push_back(pre_tokenizer);
  }
  bool byte_level = false;
  for (size_t k = 0; k < steps.size(); ++k) {
    const json& step = steps[k];
    const std::string type = step.value("type", "");
    if (type == "ByteLevel") {
      byte_level = true;
      if (json_flag(step, "add_prefix_space", false)) {
        // Hugging Face prefixes every piece the steps before produced; only the first-step case is common.
        if (k != 0) throw InputError("ByteLevel add_prefix_space is only supported as the first pre-tokenizer");
        add_prefix_space_ = true;
      }
      if (json_flag(step, "use_regex", true)) splits_.push_back(std::make_unique<PreTokenizer>(kGpt2SplitPattern));
    } else if (type == "Split") {
      if (step.value("behavior", "") != "Isolated" || json_flag(step, "invert", false) ||
          !step.at("pattern").contains("Regex")) {
        throw InputError(fmt::format("pre-tokenizer {} is not supported (Split needs a Regex pattern, behavior "
                                     "Isolated, invert false)",
                                     step.dump()));
      }
      splits_.push_back(std::make_unique<PreTokenizer>(step.at("pattern").at("Regex").get<std::string>()));
    } else {
      throw InputError(fmt::format("pre-tokenizer type '{}' is not supported", type));
    }
  }
  if (!byte_level) throw InputError("pre_tokenizer has no ByteLevel step (only byte-level BPE is supported)");
}

void BpeTokenizer::reserve_specials() {
  const SpecialTokenNames names;
  auto find = [&](std::initializer_list<std::string> candidates) {
    for (const std::string& text : candidates) {
      for (const AddedToken& token : added_) {
        if (token.special && token.content == text) return token.id;
      }
    }
    return -1;
  };
  specials_.bos = find({names.bos, "<|begin_of_text|>", "<s>", "<|endoftext|>"});
  specials_.eos = find({names.eos, "<|end_of_text|>", "</s>", "<|endoftext|>"});
  specials_.pad = find({names.pad, "<pad>"});
  specials_.mask = find({names.mask, "<mask>"});
  auto append = [&](int32_t& id, const std::string& content) {
    if (id >= 0) return;
    id = vocab_size();
    tokens_.push_back(content);
    special_.push_back(true);
    added_.push_back({id, content, true});
    added_entries_.push_back({{"id", id},
                              {"content", content},
                              {"single_word", false},
                              {"lstrip", false},
                              {"rstrip", false},
                              {"normalized", false},
                              {"special", true}});
  };
  append(specials_.bos, names.bos);
  append(specials_.eos, names.eos);
  append(specials_.pad, names.pad);
  append(specials_.mask, names.mask);
  std::stable_sort(added_.begin(), added_.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  for (const AddedToken& token : added_) starts_added_token_[static_cast<uint8_t>(token.content[0])] = true;
}

bool BpeTokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && special_[id];
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  size_t segment_start = 0;
  for (size_t pos = 0; pos < text.size(); ++pos) {
    if (!starts_added_token_[static_cast<uint8_t>(text[pos])]) continue;
    // added_ is longest first, so the first hit at the leftmost position is the longest there.
    for (const AddedToken& token : added_) {
      if (text.compare(pos, token.content.size(), token.content) != 0) continue;
      encode_segment(text.substr(segment_start, pos - segment_start), ids);
      ids.push_back(token.id);
      segment_start = pos + token.content.size();
      pos = segment_start - 1;
      break;
    }
  }
  encode_segment(text.substr(segment_start), ids);
  return ids;
}

void BpeTokenizer::encode_segment(std::string_view segment, std::vector<int32_t>& out) const {
  if (segment.empty()) return;
  std::string prefixed;
  if (add_prefix_space_ && segment[0] != ' ') {
    prefixed = " " + std::string(segment);
    segment = prefixed;
  }
  std::vector<std::string_view> pieces{segment};
  std::vector<std::string_view> next;
  for (const auto& split : splits_) {
    next.clear();
    for (std::string_view piece : pieces) split->split(piece, next);
    pieces.swap(next);
  }
  for (std::string_view piece : pieces) encode_piece(piece, out);
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_id_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (ignore_merges_) {
    auto it = id_of_bytes_.find(std::string(piece));
    if (it != id_of_bytes_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() > kMaxCachedPieceBytes) {
    merge_piece(piece, out);
    return;
  }
  std::string key(piece);
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  merge_piece(piece, out);
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kCacheEntries) cache_.clear();
  cache_.emplace(std::move(key), std::vector<int32_t>(out.begin() + first, out.end()));
}

// Applies merges lowest rank first, leftmost first among equal ranks, as the Hugging Face BPE model does:
// symbols form a linked list over the piece's bytes, candidate pairs wait in a min-heap, and a candidate whose
// symbols have changed since it was pushed is skipped when popped. O(n log n) in the piece length.
void BpeTokenizer::merge_piece(std::string_view piece, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id, prev, next;
  };
  struct Candidate {
    int32_t rank, pos, left_id, right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const auto n = static_cast<int32_t>(piece.size());
  std::vector<Symbol> symbols(n);
  for (int32_t i = 0; i < n; ++i) symbols[i] = {byte_id_[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
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

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids, bool keep_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      throw InputError(fmt::format("token id {} is out of range for vocabulary of {}", id, vocab_size()));
    }
    if (!special_[id] || keep_special) out += tokens_[id];
  }
  return out;
}

std::string BpeTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw InputError(fmt::format("token id {} is out of range for vocabulary of {}", id, vocab_size()));
  }
  return tokens_[id];
}

json BpeTokenizer::to_json() const {
  json document = document_;
  std::vector<bool> added(vocab_size(), false);
  for (const AddedToken& token : added_) added[token.id] = true;
  // An added token that is also in the vocabulary is listed there by its text, not byte-level encoded.
  auto vocab_text = [&](int32_t id) { return added[id] ? tokens_[id] : to_byte_level(tokens_[id]); };
  json vocab = json::object();
  for (int32_t id = 0; id < model_vocab_size_; ++id) vocab[vocab_text(id)] = id;
  // The "a b" form: byte-level text has no spaces, and every Hugging Face version reads it.
  json merges = json::array();
  for (const auto& [left, right] : merges_) merges.push_back(vocab_text(left) + " " + vocab_text(right));
  document["model"]["vocab"] = std::move(vocab);
  document["model"]["merges"] = std::move(merges);
  document["added_tokens"] = added_entries_;
  return document;
}

}  // namespace inkstone
