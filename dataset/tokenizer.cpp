#include "dataset/tokenizer.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <xxhash.h>

#include "core/atomic_file.h"
#include "core/errors.h"
#include "core/input_file.h"
#include "dataset/bpe_tokenizer.h"
#include "dataset/byte_tokenizer.h"

namespace inkstone {

nlohmann::json byte_level_bpe_document(nlohmann::json vocab, nlohmann::json merges,
                                       const std::vector<std::string>& specials, int64_t first_special_id,
                                       bool split_regex) {
  using nlohmann::json;
  json added = json::array();
  for (size_t k = 0; k < specials.size(); ++k) {
    added.push_back({{"id", first_special_id + static_cast<int64_t>(k)},
                     {"content", specials[k]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  const json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", split_regex}, {"use_regex", split_regex}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"post_processor", nullptr},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", std::move(vocab)},
            {"merges", std::move(merges)}}}};
}

std::optional<int32_t> Tokenizer::token_id(std::string_view content) const {
  for (const bool special_only : {true, false}) {
    for (int32_t id = 0; id < vocab_size(); ++id) {
      if ((!special_only || is_special(id)) && token_bytes(id) == content) return id;
    }
  }
  return std::nullopt;
}

std::string Tokenizer::fingerprint() const {
  // nlohmann::json keeps object keys sorted, so dump() is canonical for equal documents.
  const std::string text = to_json().dump();
  return fmt::format("{:016x}", XXH64(text.data(), text.size(), 0));
}

void Tokenizer::save(const std::filesystem::path& file) const { write_file_atomic(file, to_json().dump(2) + "\n"); }

std::unique_ptr<Tokenizer> tokenizer_from_json(const nlohmann::json& document, const std::string& origin) {
  if (ByteTokenizer::is_byte_tokenizer_document(document)) return std::make_unique<ByteTokenizer>();
  return std::make_unique<BpeTokenizer>(document, origin);
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec) {
  namespace fs = std::filesystem;
  if (spec == "byte") return std::make_unique<ByteTokenizer>();
  fs::path file = spec;
  if (fs::is_directory(file)) file /= "tokenizer.json";
  if (!fs::is_regular_file(file)) {
    throw InputError(fmt::format("tokenizer '{}' is neither \"byte\" nor a tokenizer.json file or a folder with one",
                                 spec));
  }
  const std::string text = read_input_file(file, "tokenizer");
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(fmt::format("tokenizer '{}' is not valid JSON: {}", file.string(), e.what()));
  }
  return tokenizer_from_json(document, file.string());
}

}  // namespace inkstone
