#include "dataset/byte_tokenizer.h"

#include <fmt/format.h>

#include "core/errors.h"
#include "dataset/pretokenizer.h"

namespace inkstone {

ByteTokenizer::ByteTokenizer() {
  const SpecialTokenNames names;
  special_names_ = {names.bos, names.eos, names.pad, names.mask};
  specials_ = {256, 257, 258, 259};
}

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<uint8_t>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids, bool keep_special) const {
  std::string out;
  out.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      throw InputError(fmt::format("token id {} is out of range for the byte tokenizer's vocabulary of {}", id,
                                   vocab_size()));
    }
    if (id < 256) {
      out.push_back(static_cast<char>(id));
    } else if (keep_special) {
      out += special_names_[id - 256];
    }
  }
  return out;
}

std::string ByteTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw InputError(fmt::format("token id {} is out of range for the byte tokenizer's vocabulary of {}", id,
                                 vocab_size()));
  }
  return id < 256 ? std::string(1, static_cast<char>(id)) : special_names_[id - 256];
}

nlohmann::json ByteTokenizer::to_json() const {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_char(static_cast<uint8_t>(b))] = b;
  const std::vector<std::string> specials(special_names_.begin(), special_names_.end());
  return byte_level_bpe_document(std::move(vocab), nlohmann::json::array(), specials, 256, /*split_regex=*/false);
}

bool ByteTokenizer::is_byte_tokenizer_document(const nlohmann::json& document) {
  return document == ByteTokenizer().to_json();
}

}  // namespace inkstone
