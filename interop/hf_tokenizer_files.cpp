#include "interop/hf_tokenizer_files.h"

#include <fstream>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/input_file.h"
#include "core/json_error.h"
#include "dataset/prompt_format.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Jinja templates written on export when the run carries none of its own: they render what PromptFormat renders.
constexpr const char* kChatmlTemplate =
    R"({% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }})"
    R"({% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";
constexpr const char* kLlama3Template =
    R"({{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n')"
    R"( + message['content'] + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %})"
    R"({{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %})";

json read_json_or_null(const fs::path& path) {
  if (!fs::exists(path)) return json();
  std::ifstream in = open_input_file(path, "tokenizer file");
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    throw InputError(fmt::format("{}: not valid JSON (error at byte {})", path.string(), e.byte));
  }
}

// tokenizer_config.json writes a special token as a string or as {"content": text, ...}.
json special_text(const json& config, const char* key, const fs::path& file) {
  if (!config.is_object() || !config.contains(key) || config[key].is_null()) return json();
  const json& value = config[key];
  if (value.is_string()) return value;
  if (value.is_object() && value.contains("content") && value["content"].is_string()) return value["content"];
  throw InputError(fmt::format("{}: '{}' = {} is neither a token text nor an object with \"content\"",
                               file.string(), key, value.dump()));
}

// The text of an added token by id, from tokenizer.json's added_tokens.
std::string added_token_text(const json& tokenizer, int64_t id, const std::string& what) {
  for (const json& entry : json_member(tokenizer, "added_tokens", json_empty_array()))
    if (entry.value("id", int64_t{-1}) == id) return entry.at("content").get<std::string>();
  throw InputError(fmt::format("{} = {} is not an added token of tokenizer.json", what, id));
}

std::vector<int64_t> id_list(const json& value, const std::string& what) {
  if (value.is_null()) return {};
  if (value.is_number_integer()) return {value.get<int64_t>()};
  if (value.is_array()) {
    std::vector<int64_t> ids;
    for (const json& id : value) {
      if (!id.is_number_integer()) throw InputError(fmt::format("{} = {} holds a non-integer", what, value.dump()));
      ids.push_back(id.get<int64_t>());
    }
    return ids;
  }
  throw InputError(fmt::format("{} = {} is neither an id nor a list of ids", what, value.dump()));
}

// A post_processor that puts bos before every sequence (Llama 3's TemplateProcessing) asks for a bos prompt start.
bool post_processor_adds(const json& tokenizer, const std::string& text) {
  const json& processor = json_member(tokenizer, "post_processor", json_null());
  return !processor.is_null() && processor.dump().find("\"" + text + "\"") != std::string::npos;
}

ChatFormat detect_format(const std::string& chat_template) {
  if (chat_template.find("<|im_start|>") != std::string::npos) return ChatFormat::chatml;
  if (chat_template.find("<|start_header_id|>") != std::string::npos) return ChatFormat::llama3;
  return ChatFormat::raw;
}

std::string role_text(const Tokenizer& tokenizer, int32_t id) { return id >= 0 ? tokenizer.token_bytes(id) : ""; }

}  // namespace

ImportedTokenizer import_hf_tokenizer(const fs::path& folder) {
  const fs::path tokenizer_file = folder / "tokenizer.json";
  if (!fs::exists(tokenizer_file))
    throw InputError(fmt::format("{}: missing (only tokenizer.json tokenizers are read)", tokenizer_file.string()));
  ImportedTokenizer out;
  out.document = read_json_or_null(tokenizer_file);
  const fs::path config_file = folder / "tokenizer_config.json";
  const fs::path generation_file = folder / "generation_config.json";
  const json config = read_json_or_null(config_file);
  const json generation = read_json_or_null(generation_file);

  // Ids generation stops at: generation_config.json's, else tokenizer_config.json's eos token.
  std::vector<std::string> end_texts;
  const std::string generation_eos = generation_file.string() + ": eos_token_id";
  if (generation.is_object())
    for (int64_t id : id_list(json_member(generation, "eos_token_id", json_null()), generation_eos))
      end_texts.push_back(added_token_text(out.document, id, generation_eos));
  json eos = special_text(config, "eos_token", config_file);
  if (eos.is_null() && !end_texts.empty()) eos = end_texts.front();
  const json bos = special_text(config, "bos_token", config_file);
  json pad = special_text(config, "pad_token", config_file);
  if (pad.is_null()) pad = eos;  // batches need a pad id; it is never attended or scored
  out.document["inkstone_special_roles"] = {{"bos", bos}, {"eos", eos}, {"pad", pad}, {"mask", nullptr}};

  for (const std::string& text : end_texts)
    if (text != eos && std::find(out.chat.stop_tokens.begin(), out.chat.stop_tokens.end(), text) ==
                           out.chat.stop_tokens.end())
      out.chat.stop_tokens.push_back(text);
  const bool add_bos = config.is_object() && config.value("add_bos_token", false);
  out.chat.prompt_start =
      !bos.is_null() && (add_bos || post_processor_adds(out.document, bos.get<std::string>())) ? PromptStart::bos
                                                                                               : PromptStart::none;
  out.chat.system = "";
  const json& chat_template = config.is_object() ? json_member(config, "chat_template", json_null()) : json_null();
  if (chat_template.is_string()) {
    out.document["inkstone_chat_template"] = chat_template;
    out.chat.format = detect_format(chat_template.get<std::string>());
    out.template_note = out.chat.format == ChatFormat::raw
                            ? "chat template not one of the built-in formats (chatml, llama3): chat.format = raw"
                            : fmt::format("chat template recognised as {}", choice_name(out.chat.format));
  } else {
    out.chat.format = ChatFormat::raw;
    out.template_note = "no chat template: chat.format = raw";
  }
  return out;
}

ExportedTokenizer export_hf_tokenizer(const Tokenizer& tokenizer, const ChatConfig& chat, int64_t max_length) {
  ExportedTokenizer out;
  out.tokenizer = tokenizer.to_json();
  json chat_template = out.tokenizer.value("inkstone_chat_template", json());
  out.tokenizer.erase("inkstone_special_roles");
  out.tokenizer.erase("inkstone_chat_template");
  if (chat_template.is_null() && chat.format == ChatFormat::chatml) chat_template = kChatmlTemplate;
  if (chat_template.is_null() && chat.format == ChatFormat::llama3) chat_template = kLlama3Template;

  const SpecialTokens& s = tokenizer.specials();
  const auto text_or_null = [&](int32_t id) { return id >= 0 ? json(role_text(tokenizer, id)) : json(); };
  out.tokenizer_config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                          {"bos_token", text_or_null(s.bos)},
                          {"eos_token", text_or_null(s.eos)},
                          {"pad_token", text_or_null(s.pad)},
                          {"add_bos_token", chat.prompt_start == PromptStart::bos},
                          {"add_eos_token", false},
                          {"clean_up_tokenization_spaces", false},
                          {"model_max_length", max_length}};
  if (s.mask >= 0) out.tokenizer_config["mask_token"] = role_text(tokenizer, s.mask);
  if (!chat_template.is_null()) out.tokenizer_config["chat_template"] = chat_template;

  const PromptFormat format(chat, tokenizer);
  const auto id_or_null = [](int32_t id) { return id >= 0 ? json(id) : json(); };
  out.generation_config = {{"bos_token_id", id_or_null(s.bos)},
                           {"eos_token_id", format.end_ids().size() == 1 ? json(format.end_ids()[0])
                                                                         : json(format.end_ids())},
                           {"pad_token_id", id_or_null(s.pad)}};
  return out;
}

}  // namespace inkstone
