#include "dataset/bpe_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>

#include "core/errors.h"
#include "core/json_error.h"
#include "dataset/tokenizer_json.h"

namespace inkstone {
namespace {

using nlohmann::json;

constexpr const char* kSpecialRolesKey = "inkstone_special_roles";

json special_entry(int32_t id, const std::string& content) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

// Cuts `text` at the matches of `matcher`: each non-empty text between goes to on_gap(gap, gap_starts_text) and
// each match's id to `ids`, in order.
template <typename OnGap>
void split_at_matches(const AddedTokenMatcher& matcher, std::string_view text, std::vector<int32_t>& ids,
                      OnGap&& on_gap) {
  size_t gap_start = 0;
  for (const AddedTokenMatcher::Match& match : matcher.find_all(text)) {
    if (match.start > gap_start) on_gap(text.substr(gap_start, match.start - gap_start), gap_start == 0);
    ids.push_back(match.id);
    gap_start = match.end;
  }
  if (gap_start < text.size()) on_gap(text.substr(gap_start), gap_start == 0);
}

}  // namespace

void AddedTokenMatcher::add(const std::string& text, int32_t id) {
  auto shorter = std::find_if(longest_first_.begin(), longest_first_.end(),
                              [&](const auto& entry) { return entry.first.size() < text.size(); });
  longest_first_.insert(shorter, {text, id});
  starts_match_[static_cast<uint8_t>(text[0])] = true;
}

std::vector<AddedTokenMatcher::Match> AddedTokenMatcher::find_all(std::string_view text) const {
  std::vector<Match> matches;
  for (size_t pos = 0; pos < text.size(); ++pos) {
    if (!starts_match_[static_cast<uint8_t>(text[pos])]) continue;
    // Longest first, so the first hit at the leftmost position is the longest there.
    for (const auto& [content, id] : longest_first_) {
      if (text.compare(pos, content.size(), content) != 0) continue;
      matches.push_back({pos, pos + content.size(), id});
      pos += content.size() - 1;
      break;
    }
  }
  return matches;
}

BpeTokenizer::BpeTokenizer(const json& document, const std::string& origin) {
  try {
    if (!document.is_object() || !document.contains("model")) throw InputError("no \"model\" object");
    normalizer_ = std::make_unique<Normalizer>(json_member(document, "normalizer", json_null()));
    pre_tokenizer_ = std::make_unique<PreTokenizerPipeline>(json_member(document, "pre_tokenizer", json_null()));
    model_ = std::make_unique<BpeModel>(document.at("model"), pre_tokenizer_->byte_level());
    decoder_ = std::make_unique<TokenizerDecoder>(json_member(document, "decoder", json_null()));
    parse_added_tokens(json_member(document, "added_tokens", json_empty_array()));
    const json& roles = json_member(document, kSpecialRolesKey, json_null());
    if (roles.is_null()) {
      find_specials_by_name();
    } else {
      assign_special_roles(roles);
    }
    index_added_tokens();
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: malformed tokenizer.json: {}", origin, describe_json_error(e)));
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", origin, e.what()));
  }
  document_ = document;
  document_["model"].erase("vocab");
  document_["model"].erase("merges");
  document_.erase("added_tokens");
}

BpeTokenizer::~BpeTokenizer() = default;

int64_t BpeTokenizer::unrepresented_bytes() const { return model_->unrepresented_bytes(); }

void BpeTokenizer::parse_added_tokens(const json& added) {
  int32_t size = model_->size();
  // Ids past the model's vocabulary must all be added tokens, so none can exceed it by more than their count;
  // checked before the index is sized by the largest id.
  const int64_t largest_possible = static_cast<int64_t>(model_->size()) + static_cast<int64_t>(added.size()) - 1;
  for (const json& entry : added) {
    const auto id = static_cast<int64_t>(json_token_id(entry.at("id"), "added token id"));
    if (id > largest_possible)
      throw InputError(fmt::format("added token id {} is beyond the vocabulary of {} ids and {} added tokens", id,
                                   model_->size(), added.size()));
    size = std::max(size, static_cast<int32_t>(id) + 1);
  }
  added_index_.assign(size, -1);
  for (const json& entry : added) {
    const auto id = json_token_id(entry.at("id"), "added token id");
    const auto content = entry.at("content").get<std::string>();
    if (content.empty()) throw InputError(fmt::format("added token {} has empty content", id));
    if (added_index_[id] >= 0) throw InputError(fmt::format("added token id {} repeats", id));
    const bool special = json_flag(entry, "special", false);
    add_token({id, content, special, json_flag(entry, "normalized", !special), entry});
  }
  for (int32_t id = model_->size(); id < size; ++id) {
    if (added_index_[id] < 0) {
      throw InputError(fmt::format("id {} is neither in the vocabulary nor an added token", id));
    }
  }
}

void BpeTokenizer::add_token(AddedToken token) {
  if (token.id >= static_cast<int32_t>(added_index_.size())) added_index_.resize(token.id + 1, -1);
  added_index_[token.id] = static_cast<int32_t>(added_.size());
  added_.push_back(std::move(token));
}

void BpeTokenizer::assign_special_roles(const json& roles) {
  if (!roles.is_object()) throw InputError(fmt::format("{} is not an object", kSpecialRolesKey));
  const std::pair<const char*, int32_t*> slots[] = {
      {"bos", &specials_.bos}, {"eos", &specials_.eos}, {"pad", &specials_.pad}, {"mask", &specials_.mask}};
  for (auto it = roles.begin(); it != roles.end(); ++it) {
    auto slot = std::find_if(std::begin(slots), std::end(slots), [&](const auto& s) { return it.key() == s.first; });
    if (slot == std::end(slots)) {
      throw InputError(fmt::format("{}: unknown role '{}' (bos, eos, pad or mask)", kSpecialRolesKey, it.key()));
    }
    if (it->is_null()) continue;
    const auto content = it->get<std::string>();
    auto token = std::find_if(added_.begin(), added_.end(), [&](const AddedToken& t) { return t.content == content; });
    if (token == added_.end()) {
      throw InputError(fmt::format("{}: {} '{}' is not an added token", kSpecialRolesKey, it.key(), content));
    }
    *slot->second = token->id;
  }
}

void BpeTokenizer::find_specials_by_name() {
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
    add_token({id, content, /*special=*/true, /*normalized=*/false, special_entry(id, content)});
  };
  append(specials_.bos, names.bos);
  append(specials_.eos, names.eos);
  append(specials_.pad, names.pad);
  append(specials_.mask, names.mask);
}

void BpeTokenizer::index_added_tokens() {
  std::unordered_set<std::string> special_texts;
  for (const AddedToken& token : added_) {
    if (token.special) special_texts.insert(token.content);
    if (!token.normalized) {
      raw_matcher_.add(token.content, token.id);
    } else if (const std::string text = normalizer_->normalize(token.content); !text.empty()) {
      normalized_matcher_.add(text, token.id);
    }
  }
  dropped_unless_kept_.resize(vocab_size());
  for (int32_t id = 0; id < vocab_size(); ++id) dropped_unless_kept_[id] = special_texts.count(decode_text(id)) > 0;
}

const BpeTokenizer::AddedToken* BpeTokenizer::added_token(int32_t id) const {
  return added_index_[id] < 0 ? nullptr : &added_[added_index_[id]];
}

void BpeTokenizer::check_id(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw InputError(fmt::format("token id {} is out of range for vocabulary of {}", id, vocab_size()));
  }
}

bool BpeTokenizer::is_special(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return false;
  const AddedToken* token = added_token(id);
  return token && token->special;
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  std::deque<std::string> storage;  // Rewritten text of the segment being encoded.
  split_at_matches(raw_matcher_, text, ids, [&](std::string_view segment, bool at_text_start) {
    if (normalizer_->is_identity()) {
      encode_normalized(segment, at_text_start, ids, storage);
    } else {
      encode_normalized(storage.emplace_back(normalizer_->normalize(segment)), at_text_start, ids, storage);
    }
    storage.clear();
  });
  return ids;
}

void BpeTokenizer::encode_normalized(std::string_view segment, bool at_text_start, std::vector<int32_t>& ids,
                                     std::deque<std::string>& storage) const {
  split_at_matches(normalized_matcher_, segment, ids, [&](std::string_view gap, bool gap_starts_segment) {
    encode_pretokenized(gap, at_text_start && gap_starts_segment, ids, storage);
  });
}

void BpeTokenizer::encode_pretokenized(std::string_view segment, bool at_text_start, std::vector<int32_t>& ids,
                                       std::deque<std::string>& storage) const {
  std::vector<std::string_view> pieces;
  pre_tokenizer_->split(segment, at_text_start, pieces, storage);
  for (std::string_view piece : pieces) model_->encode_word(piece, ids);
}

std::string BpeTokenizer::decode_text(int32_t id) const {
  const AddedToken* token = added_token(id);
  if (!token) return model_->text(id);
  return token->normalized ? normalizer_->normalize(token->content) : token->content;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids, bool keep_special) const {
  std::vector<std::string> texts;
  texts.reserve(ids.size());
  for (int32_t id : ids) {
    check_id(id);
    if (keep_special || !dropped_unless_kept_[id]) texts.push_back(decode_text(id));
  }
  return decoder_->decode(std::move(texts));
}

std::string BpeTokenizer::token_bytes(int32_t id) const {
  check_id(id);
  const AddedToken* token = added_token(id);
  return token ? token->content : model_->bytes(id);
}

std::optional<int32_t> BpeTokenizer::token_id(std::string_view content) const {
  for (const bool special_only : {true, false}) {
    for (const AddedToken& token : added_) {
      if ((!special_only || token.special) && token.content == content) return token.id;
    }
  }
  return Tokenizer::token_id(content);
}

json BpeTokenizer::to_json() const {
  json document = document_;
  model_->write_vocab_and_merges(document["model"]);
  json added = json::array();
  for (const AddedToken& token : added_) added.push_back(token.entry);
  document["added_tokens"] = std::move(added);
  return document;
}

}  // namespace inkstone
