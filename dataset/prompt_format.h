// How a prompt reaches the model: the start token, the chat turn markers a chat model was trained with, and the
// tokens that end its answer (docs/interop.md, "Chat formats"). Used by `sample`, RL rollouts and evaluation.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "dataset/tokenizer.h"

namespace inkstone {

// One message of a conversation: role is "system", "user" or "assistant".
struct ChatMessage {
  std::string role;
  std::string content;
};

// A piece of a rendered conversation; `response` marks what the assistant wrote (its content and its turn's end,
// up to the next turn), which fine-tuning trains on.
struct ChatSegment {
  std::string text;
  bool response = false;
};

// A conversation as token ids and a loss mask (1 on response tokens): the whole text encoded at once, a prompt's
// tokens exactly those `encode` gives it at sampling time (PromptFormat::encode_conversation).
struct EncodedConversation {
  std::vector<int32_t> ids;
  std::vector<uint8_t> trained;
  int64_t text_bytes = 0;  // bytes of rendered text the ids stand for (the start token adds none)
  int64_t trained_bytes = 0;  // of them, the bytes of the trained tokens' text
};

class PromptFormat {
 public:
  // Resolves chat.prompt_start and chat.stop_tokens against the tokenizer: an InputError names a stop token that
  // is not one token, or a start token the tokenizer lacks.
  PromptFormat(const ChatConfig& chat, const Tokenizer& tokenizer);

  // The user message in the chat format: raw returns it unchanged; chatml and llama3 wrap it in a user turn
  // (after the system turn, if any) and open the assistant's turn.
  std::string render(std::string_view user_message) const;
  // The start token (if any), then the rendered message encoded; special tokens in it become their ids.
  std::vector<int32_t> encode(std::string_view user_message) const;
  // A whole conversation in the chat format: system, user and assistant turns in order (a system message of the
  // conversation replaces chat.system). Everything up to an assistant's content renders as render() renders a
  // prompt, so a model fine-tuned on it is prompted as it was trained; raw concatenates the contents.
  std::vector<ChatSegment> render_conversation(const std::vector<ChatMessage>& messages) const;
  // The start token (if any, not trained), then every segment encoded; `train_on_all` trains on every token, else
  // the responses, all of them or (`earlier_responses_trained` false) the last one alone.
  EncodedConversation encode_conversation(const std::vector<ChatMessage>& messages, bool train_on_all,
                                          bool earlier_responses_trained = true) const;
  // The texts the format marks turns with (none for raw): a message holding one would forge a turn.
  std::vector<std::string_view> turn_markers() const;
  // eos and the stop tokens: a completion ends after drawing any of them.
  const std::vector<int32_t>& end_ids() const { return end_ids_; }

 private:
  ChatConfig chat_;
  const Tokenizer& tokenizer_;
  int32_t start_id_ = -1;
  std::vector<int32_t> end_ids_;
};

}  // namespace inkstone
