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
