// Prompt formats: the exact chat turn texts, the start token, special tokens encoded as their ids, and stop tokens
// resolved to single ids (or refused by name).
#include <gtest/gtest.h>

#include <fstream>

#include "core/errors.h"
#include "dataset/prompt_format.h"
#include "tests/test_paths.h"

namespace inkstone {
namespace {

// The fixtures' tiny Qwen-style tokenizer with the roles an import gives it: eos <|im_end|>, pad <|endoftext|>.
std::unique_ptr<Tokenizer> chat_tokenizer() {
  nlohmann::json document;
  std::ifstream(testing::source_dir() / "tests" / "interop" / "fixtures" / "tiny_tokenizer" / "tokenizer.json") >>
      document;
  document["inkstone_special_roles"] = {{"bos", nullptr}, {"eos", "<|im_end|>"}, {"pad", "<|endoftext|>"},
                                        {"mask", nullptr}};
  return tokenizer_from_json(document, "tiny_tokenizer");
}

ChatConfig chat(const std::string& format, const std::string& start, std::vector<std::string> stops = {}) {
  ChatConfig c = default_config().chat;
  c.format = *choice_named<ChatFormat>(format);
  c.prompt_start = *choice_named<PromptStart>(start);
  c.stop_tokens = std::move(stops);
  return c;
}

TEST(PromptFormat, ChatmlTurnsAndSpecialIds) {
  const auto tokenizer = chat_tokenizer();
  ChatConfig c = chat("chatml", "none", {"<|endoftext|>"});
  c.system = "Be brief.";
  const PromptFormat format(c, *tokenizer);
  EXPECT_EQ(format.render("2+2?"),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
  const auto ids = format.encode("2+2?");
  EXPECT_EQ(ids, tokenizer->encode(format.render("2+2?")));
  EXPECT_EQ(ids.front(), *tokenizer->token_id("<|im_start|>"));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *tokenizer->token_id("<|im_end|>")), 2);
  EXPECT_EQ(format.end_ids(), (std::vector<int32_t>{*tokenizer->token_id("<|im_end|>"),
                                                    *tokenizer->token_id("<|endoftext|>")}));
}

TEST(PromptFormat, Llama3TurnsAndRaw) {
  const auto tokenizer = chat_tokenizer();
  EXPECT_EQ(PromptFormat(chat("llama3", "none"), *tokenizer).render("hi"),
            "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(PromptFormat(chat("raw", "none"), *tokenizer).render("hi"), "hi");
}

TEST(PromptFormat, StartTokens) {
  const auto tokenizer = chat_tokenizer();
  const auto body = tokenizer->encode("hi");
  EXPECT_EQ(PromptFormat(chat("raw", "none"), *tokenizer).encode("hi"), body);
  const auto after_eos = PromptFormat(chat("raw", "eos"), *tokenizer).encode("hi");
  EXPECT_EQ(after_eos.front(), tokenizer->specials().eos);
  EXPECT_EQ(std::vector<int32_t>(after_eos.begin() + 1, after_eos.end()), body);
  try {
    PromptFormat(chat("raw", "bos"), *tokenizer);
    ADD_FAILURE() << "a bos start without a bos token was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("chat.prompt_start"), std::string::npos) << e.what();
  }
}

// Training renders a conversation so that everything before an assistant's content is the prompt `render` gives at
// sampling time; the response segments are the content and its turn's end marker (chatml: and the newline closing
// the turn, which as clean context would tell a diffusion model where the response ends).
TEST(PromptFormat, AConversationRendersItsPromptsAsSamplingDoes) {
  const auto tokenizer = chat_tokenizer();
  const std::vector<ChatMessage> messages = {{"user", "2+2?"}, {"assistant", "4"}};
  for (const char* name : {"raw", "chatml", "llama3"}) {
    ChatConfig c = chat(name, "none");
    c.system = "Be brief.";
    const PromptFormat format(c, *tokenizer);
    const auto segments = format.render_conversation(messages);
    std::string prompt, response;
    for (const auto& segment : segments) {
      if (segment.response) response += segment.text;
      else if (response.empty()) prompt += segment.text;
    }
    EXPECT_EQ(prompt, format.render("2+2?")) << name;
    const std::string end =
        std::string(name) == "chatml" ? "<|im_end|>\n" : std::string(name) == "llama3" ? "<|eot_id|>" : "";
    EXPECT_EQ(response, "4" + end) << name;
  }
}

TEST(PromptFormat, AnEncodedConversationMasksEverythingButTheResponses) {
  const auto tokenizer = chat_tokenizer();
  const PromptFormat format(chat("chatml", "eos"), *tokenizer);
  const std::vector<ChatMessage> messages = {
      {"system", "Count."}, {"user", "one"}, {"assistant", "two"}, {"user", "three"}, {"assistant", "four"}};
  const EncodedConversation encoded = format.encode_conversation(messages, /*train_on_all=*/false);
  ASSERT_EQ(encoded.ids.size(), encoded.trained.size());
  EXPECT_EQ(encoded.ids.front(), tokenizer->specials().eos);  // the start token, not trained
  EXPECT_EQ(encoded.trained.front(), 0);
  std::vector<int32_t> trained_ids, expected;
  for (size_t i = 0; i < encoded.ids.size(); ++i)
    if (encoded.trained[i]) trained_ids.push_back(encoded.ids[i]);
  for (const char* text : {"two<|im_end|>\n", "four<|im_end|>\n"}) {
    const auto ids = tokenizer->encode(text);
    expected.insert(expected.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(trained_ids, expected);
  // The conversation's own system message replaces none (chat.system is empty) and renders as a turn.
  EXPECT_EQ(format.render_conversation(messages).front().text, "<|im_start|>system\nCount.<|im_end|>\n");
  const auto all = format.encode_conversation(messages, /*train_on_all=*/true);
  EXPECT_EQ(all.ids, encoded.ids);
  EXPECT_TRUE(std::all_of(all.trained.begin(), all.trained.end(), [](uint8_t v) { return v == 1; }));
}

// The whole conversation is encoded at once, as Hugging Face's tokenizers encode a rendered chat: after "the cat\n"
// a Metaspace tokenizer (prepend scheme "first") reads "sat" as the text going on ("s", "at"), not as a new text's
// first word ("▁s", "at"). The ids are Hugging Face's: tokenizers.Tokenizer.from_file(
// "tests/dataset/fixtures/tiny_metaspace_prepend_tokenizer.json").encode("the cat\nsat").ids (tokenizers 0.23.1).
TEST(PromptFormat, AConversationIsEncodedAsOneTextWhosePromptIsWhatSamplingEncodes) {
  nlohmann::json document;
  std::ifstream(testing::source_dir() / "tests" / "dataset" / "fixtures" / "tiny_metaspace_prepend_tokenizer.json") >>
      document;
  const auto tokenizer = tokenizer_from_json(document, "tiny_metaspace_prepend");
  const PromptFormat format(chat("raw", "none"), *tokenizer);
  const auto encoded = format.encode_conversation({{"user", "the cat\n"}, {"assistant", "sat"}}, false);
  EXPECT_EQ(encoded.ids, (std::vector<int32_t>{329, 471, 401, 13, 315, 401}));
  EXPECT_EQ(encoded.trained, (std::vector<uint8_t>{0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(format.encode("the cat\n"), std::vector<int32_t>(encoded.ids.begin(), encoded.ids.begin() + 4));
  // Where a token spans the prompt and the response ("the ca" | "t": the whole text ends in "at"), each part is
  // encoded alone, so the prompt keeps the ids sampling gives it: "▁the", "▁c", "a" | "▁t".
  const auto split = format.encode_conversation({{"user", "the ca"}, {"assistant", "t"}}, false);
  EXPECT_EQ(split.ids, (std::vector<int32_t>{329, 471, 297, 324}));
  EXPECT_EQ(split.trained, (std::vector<uint8_t>{0, 0, 0, 1}));
}

TEST(PromptFormat, RefusesAStopTokenThatIsSeveralTokens) {
  const auto tokenizer = chat_tokenizer();
  try {
    PromptFormat(chat("chatml", "none", {"The End"}), *tokenizer);
    ADD_FAILURE() << "a multi-token stop was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'The End'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace inkstone
