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
  // eos and the stop tokens: a completion ends after drawing any of them.
  const std::vector<int32_t>& end_ids() const { return end_ids_; }

 private:
  ChatConfig chat_;
  const Tokenizer& tokenizer_;
  int32_t start_id_ = -1;
  std::vector<int32_t> end_ids_;
};

}  // namespace inkstone
