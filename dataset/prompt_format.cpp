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
        // The newline closing the turn is part of the response: as clean context it would show a diffusion model
        // where a noised response ends.
        context("<|im_start|>assistant\n");
        response(m.content + "<|im_end|>\n");
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

namespace {

// A conversation's text in runs of one loss-mask value.
struct MaskRun {
  std::string text;
  bool trained = false;
};

std::vector<MaskRun> mask_runs(const std::vector<ChatSegment>& segments, bool train_on_all,
                               bool earlier_responses_trained) {
  // The last response is the trailing run of response segments.
  size_t last_response = segments.size();
  while (last_response > 0 && segments[last_response - 1].response) --last_response;
  std::vector<MaskRun> runs;
  for (size_t i = 0; i < segments.size(); ++i) {
    const bool trained =
        train_on_all || (segments[i].response && (earlier_responses_trained || i >= last_response));
    if (segments[i].text.empty()) continue;
    if (runs.empty() || runs.back().trained != trained) runs.push_back({"", trained});
    runs.back().text += segments[i].text;
  }
  return runs;
}

// Where each run ends in the ids of the whole text, when every run's prefix encodes to a prefix of them (no token
// spans two runs); empty otherwise.
std::vector<size_t> run_ends_in(const std::vector<int32_t>& whole, const std::vector<MaskRun>& runs,
                                const Tokenizer& tokenizer) {
  std::vector<size_t> ends;
  std::string prefix;
  for (size_t r = 0; r + 1 < runs.size(); ++r) {
    prefix += runs[r].text;
    const auto ids = tokenizer.encode(prefix);
    if (ids.size() > whole.size() || !std::equal(ids.begin(), ids.end(), whole.begin())) return {};
    ends.push_back(ids.size());
  }
  ends.push_back(whole.size());
  return ends;
}

}  // namespace

// The whole text is encoded at once, as a chat template's output is, so a response's tokens are those it has in
// context (a Metaspace tokenizer, for one, marks a word start only at the text's beginning). Each prompt's own
// encoding is then the prefix of those ids, as `encode` gives it at sampling time; where a token spans a prompt and
// its response, the runs are encoded one by one instead, which keeps the prompts as sampling sees them.
EncodedConversation PromptFormat::encode_conversation(const std::vector<ChatMessage>& messages, bool train_on_all,
                                                      bool earlier_responses_trained) const {
  EncodedConversation out;
  if (start_id_ >= 0) {
    out.ids.push_back(start_id_);
    out.trained.push_back(train_on_all);
  }
  const auto runs = mask_runs(render_conversation(messages), train_on_all, earlier_responses_trained);
  std::string text;
  for (const MaskRun& run : runs) text += run.text;
  const auto whole = tokenizer_.encode(text);
  const auto ends = run_ends_in(whole, runs, tokenizer_);
  size_t begin = 0;
  for (size_t r = 0; r < runs.size(); ++r) {
    const auto ids = ends.empty() ? tokenizer_.encode(runs[r].text)
                                  : std::vector<int32_t>(whole.begin() + static_cast<std::ptrdiff_t>(begin),
                                                         whole.begin() + static_cast<std::ptrdiff_t>(ends[r]));
    if (!ends.empty()) begin = ends[r];
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.trained.insert(out.trained.end(), ids.size(), static_cast<uint8_t>(runs[r].trained));
    const auto bytes = static_cast<int64_t>(runs[r].text.size());
    out.text_bytes += bytes;
    if (runs[r].trained) out.trained_bytes += bytes;
  }
  return out;
}

std::vector<std::string_view> PromptFormat::turn_markers() const {
  switch (chat_.format) {
    case ChatFormat::chatml: return {"<|im_start|>", "<|im_end|>"};
    case ChatFormat::llama3: return {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
    case ChatFormat::raw: return {};
  }
  return {};
}

std::vector<int32_t> PromptFormat::encode(std::string_view user_message) const {
  std::vector<int32_t> ids;
  if (start_id_ >= 0) ids.push_back(start_id_);
  const auto body = tokenizer_.encode(render(user_message));
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

}  // namespace inkstone
