// The tokenizer side of a Hugging Face model folder: tokenizer.json, tokenizer_config.json (special tokens, bos
// policy, chat template) and generation_config.json (the ids that end a generation), into a run and back out.
#pragma once
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "dataset/tokenizer.h"

namespace inkstone {

struct ImportedTokenizer {
  // tokenizer.json plus "inkstone_special_roles" (bos / eos / pad / mask texts from tokenizer_config.json) and,
  // when the folder has one, "inkstone_chat_template" (the Jinja text, kept for export).
  nlohmann::json document;
  // format from the chat template (chatml, llama3, else raw), prompt_start from the bos policy, stop_tokens from
  // generation_config.json's eos ids.
  ChatConfig chat;
  std::string template_note;  // what was made of the chat template, for the import report
};

// Reads the folder's tokenizer files; tokenizer.json is required, the others optional. One-line InputErrors name
// the file and key (an eos id that is no token, a special token text that is not an added token).
ImportedTokenizer import_hf_tokenizer(const std::filesystem::path& folder);

struct ExportedTokenizer {
  nlohmann::json tokenizer;          // tokenizer.json without inkstone's own keys
  nlohmann::json tokenizer_config;   // special tokens, add_bos_token, chat_template
  nlohmann::json generation_config;  // bos / eos / pad ids
};

ExportedTokenizer export_hf_tokenizer(const Tokenizer& tokenizer, const ChatConfig& chat, int64_t max_length);

}  // namespace inkstone
