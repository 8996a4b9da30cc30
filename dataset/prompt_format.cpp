#include "dataset/prompt_format.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/errors.h"

namespace inkstone {
namespace {

std::string chatml_turn(std::string_view role, std::string_view content) {
  return fmt::format("<|im_start|>{}\n{}<|im_end|>\n", role, content);
}

std::string llama3_header(std::string_view role) {
  return fmt::format("<|start_header_id|>{}<|end_header_id|>\n\n", role);
}

int32_t start_token(PromptStart start, const Tokenizer& tokenizer) {
  if (start == PromptStart::none) return -1;
  const int32_t id = start == PromptStart::bos ? tokenizer.specials().bos : tokenizer.specials().eos;
  if (id < 0)
    throw InputError(fmt::format("chat.prompt_start = \"{}\" but the tokenizer has no {} token", choice_name(start),
                                 choice_name(start)));
  return id;
}

}  // namespace

PromptFormat::PromptFormat(const ChatConfig& chat, const Tokenizer& tokenizer)
    : chat_(chat), tokenizer_(tokenizer), start_id_(start_token(chat.prompt_start, tokenizer)) {
  if (tokenizer.specials().eos >= 0) end_ids_.push_back(tokenizer.specials().eos);
  for (const std::string& text : chat.stop_tokens) {
    const auto ids = tokenizer.encode(text);
    if (ids.size() != 1)
      throw InputError(fmt::format("chat.stop_tokens: '{}' is {} tokens for this tokenizer, not one", text, ids.size()));
    if (std::find(end_ids_.begin(), end_ids_.end(), ids[0]) == end_ids_.end()) end_ids_.push_back(ids[0]);
  }
}

std::string PromptFormat::render(std::string_view user_message) const {
  if (chat_.format == ChatFormat::chatml) {
    const std::string system = chat_.system.empty() ? std::string() : chatml_turn("system", chat_.system);
    return system + chatml_turn("user", user_message) + "<|im_start|>assistant\n";
  }
  if (chat_.format == ChatFormat::llama3) {
    const std::string system =
        chat_.system.empty() ? std::string() : llama3_header("system") + chat_.system + "<|eot_id|>";
    return system + llama3_header("user") + std::string(user_message) + "<|eot_id|>" + llama3_header("assistant");
  }
  return std::string(user_message);
}

std::vector<ChatSegment> PromptFormat::render_conversation(const std::vector<ChatMessage>& messages) const {
  std::vector<ChatSegment> segments;
  const auto context = [&](std::string text) { segments.push_back({std::move(text), false}); };
  const auto response = [&](std::string text) { segments.push_back({std::move(text), true}); };
  const bool own_system = std::any_of(messages.begin(), messages.end(), [](const ChatMessage& m) {
    return m.role == "system";
  });
  std::vector<ChatMessage> turns;
  if (!own_system && !chat_.system.empty() && chat_.format != ChatFormat::raw)
    turns.push_back({"system", chat_.system});
  turns.insert(turns.end(), messages.begin(), messages.end());
  for (const ChatMessage& m : turns) {
    const bool assistant = m.role == "assistant";
    switch (chat_.format) {
      case ChatFormat::chatml:
        if (!assistant) {
          context(chatml_turn(m.role, m.content));
          break;
        }
        context("<|im_start|>assistant\n");
        response(m.content + "<|im_end|>");
        context("\n");
        break;
      case ChatFormat::llama3:
        context(llama3_header(m.role));
        if (assistant) response(m.content + "<|eot_id|>");
        else context(m.content + "<|eot_id|>");
        break;
      case ChatFormat::raw:
        if (assistant) response(m.content);
        else context(m.content);
        break;
    }
  }
  return segments;
}

EncodedConversation PromptFormat::encode_conversation(const std::vector<ChatMessage>& messages,
                                                      bool train_on_all) const {
  EncodedConversation out;
  if (start_id_ >= 0) {
    out.ids.push_back(start_id_);
    out.trained.push_back(train_on_all);
  }
  for (const ChatSegment& segment : render_conversation(messages)) {
    if (segment.text.empty()) continue;
    const auto ids = tokenizer_.encode(segment.text);
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.trained.insert(out.trained.end(), ids.size(), static_cast<uint8_t>(train_on_all || segment.response));
    out.text_bytes += static_cast<int64_t>(segment.text.size());
  }
  return out;
}

std::vector<int32_t> PromptFormat::encode(std::string_view user_message) const {
  std::vector<int32_t> ids;
  if (start_id_ >= 0) ids.push_back(start_id_);
  const auto body = tokenizer_.encode(render(user_message));
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

}  // namespace inkstone
