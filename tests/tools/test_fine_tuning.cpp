// Fine-tuning on conversations end to end (docs/training.md, "Fine-tuning on conversations"): `data prepare
// --format chat` reports what the loss mask trains on; AR and masked diffusion runs train on such a folder; a run
// whose [chat] renders prompts otherwise than the folder, packed windows that would let conversations see each
// other, and chat flags without --format chat are refused by name.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/cli_run.h"
#include "tests/fixtures.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

class FineTuning : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(testing::temp_dir("fine_tuning"));
    std::ofstream chat(*dir_ / "sums.jsonl");
    for (int a = 0; a < 12; ++a)
      for (int b = 0; b < 12; ++b)
        chat << "{\"prompt\": \"" << a << "+" << b << "=\", \"response\": \"" << a + b << "\"}\n";
    chat.close();
    prepared_ = new testing::CliResult(run_cli({"data", "prepare", "--input", (*dir_ / "sums.jsonl").string(),
                                                "--format", "chat", "--tokenizer", "byte", "--out",
                                                data().string(), "--val-fraction", "0.1"}));
    std::ofstream(*dir_ / "sft.toml") << "[run]\nthreads = 1\ndevice = \"cpu\"\n"
                                      << "[model]\nd_model = 32\nn_layers = 2\nn_heads = 2\nn_kv_heads = 1\n"
                                      << "max_seq_len = 32\n"
                                      << "[data]\npath = \"" << data().string() << "\"\nseq_len = 16\n"
                                      << "mode = \"pad\"\n"
                                      << "[train]\nsteps = 3\nbatch_size = 4\neval_interval = 3\n"
                                      << "eval_batches = 2\n";
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete prepared_;
  }
  static fs::path data() { return *dir_ / "sums"; }
  static std::string config() { return (*dir_ / "sft.toml").string(); }
  static fs::path* dir_;
  static testing::CliResult* prepared_;
};
fs::path* FineTuning::dir_ = nullptr;
testing::CliResult* FineTuning::prepared_ = nullptr;

TEST_F(FineTuning, PrepareReportsTheTrainedTokens) {
  ASSERT_EQ(prepared_->exit_code, 0) << prepared_->output;
  EXPECT_NE(prepared_->output.find("trained on "), std::string::npos) << prepared_->output;
  EXPECT_NE(prepared_->output.find("the loss mask"), std::string::npos) << prepared_->output;
}

TEST_F(FineTuning, ArAndMaskedDiffusionRunsTrainOnTheResponses) {
  ASSERT_EQ(prepared_->exit_code, 0) << prepared_->output;
  const auto ar = run_cli({"train", config(), "--run-dir", (*dir_ / "ar").string()});
  ASSERT_EQ(ar.exit_code, 0) << ar.output;
  EXPECT_NE(ar.output.find("val loss_nats"), std::string::npos) << ar.output;
  const auto mdlm = run_cli({"train", config(), "--run-dir", (*dir_ / "mdlm").string(), "--set",
                             "objective.name=\"masked_diffusion\""});
  ASSERT_EQ(mdlm.exit_code, 0) << mdlm.output;
  // Packed windows keep conversations apart with the document mask.
  const auto packed = run_cli({"train", config(), "--run-dir", (*dir_ / "packed").string(), "--set",
                               "data.mode=\"pack\"", "--set", "data.document_mask=true"});
  EXPECT_EQ(packed.exit_code, 0) << packed.output;
}

TEST_F(FineTuning, MismatchedChatSettingsAndUnmaskedPackingAreRefusedByName) {
  ASSERT_EQ(prepared_->exit_code, 0) << prepared_->output;
  const auto chatml = run_cli({"train", config(), "--run-dir", (*dir_ / "chatml").string(), "--set",
                               "chat.format=\"chatml\""});
  EXPECT_EQ(chatml.exit_code, 2) << chatml.output;
  EXPECT_NE(chatml.output.find("renders conversations with chat.format = 'raw' but this run has 'chatml'"),
            std::string::npos)
      << chatml.output;
  const auto packed = run_cli({"train", config(), "--run-dir", (*dir_ / "leaky").string(), "--set",
                               "data.mode=\"pack\""});
  EXPECT_EQ(packed.exit_code, 2) << packed.output;
  EXPECT_NE(packed.output.find("set data.document_mask = true"), std::string::npos) << packed.output;
  // [rl] is checked under any objective: a window run keeps it for `inkstone eval --task`.
  const auto reward = run_cli({"train", config(), "--run-dir", (*dir_ / "reward").string(), "--set",
                               "rl.rewards=[\"correct\", \"bogus=2\"]"});
  EXPECT_EQ(reward.exit_code, 2) << reward.output;
  EXPECT_NE(reward.output.find("rl.rewards entry 'bogus=2': unknown reward 'bogus'"), std::string::npos)
      << reward.output;
  const auto flags = run_cli({"data", "prepare", "--input", (*dir_ / "sums.jsonl").string(), "--format", "jsonl",
                              "--field", "prompt", "--chat-format", "chatml", "--tokenizer", "byte", "--out",
                              (*dir_ / "plain").string()});
  EXPECT_EQ(flags.exit_code, 2) << flags.output;
  EXPECT_NE(flags.output.find("they need --format chat (not jsonl)"), std::string::npos) << flags.output;
}

// A conversation trained on two responses would show a diffusion model its second turn beside the noised first
// answer: such a folder is refused by name for diffusion and trains AR; --split-turns makes one diffusion accepts.
TEST_F(FineTuning, MultiTurnConversationsAreSplitForDiffusion) {
  std::ofstream(*dir_ / "turns.jsonl")
      << "{\"messages\": [{\"role\": \"user\", \"content\": \"1+1=\"}, {\"role\": \"assistant\", "
         "\"content\": \"2\"}, {\"role\": \"user\", \"content\": \"2+2=\"}, {\"role\": \"assistant\", "
         "\"content\": \"4\"}]}\n"
      << "{\"prompt\": \"3+3=\", \"response\": \"6\"}\n";
  const auto prepare = [&](const std::string& out, std::vector<std::string> extra) {
    std::vector<std::string> args = {"data", "prepare", "--input", (*dir_ / "turns.jsonl").string(), "--format",
                                     "chat", "--tokenizer", "byte", "--out", (*dir_ / out).string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  };
  const auto whole = prepare("turns", {});
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  EXPECT_NE(whole.output.find("1 conversations train on several responses"), std::string::npos) << whole.output;
  const auto train = [&](const std::string& data, const std::string& objective) {
    return run_cli({"train", config(), "--run-dir", (*dir_ / ("turns-" + data + objective)).string(), "--set",
                    "data.path=\"" + (*dir_ / data).string() + "\"", "--set", "objective.name=\"" + objective + "\"",
                    "--set", "train.eval_interval=0"});
  };
  const auto refused = train("turns", "masked_diffusion");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("holds 1 conversations trained on several responses"), std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("--split-turns"), std::string::npos) << refused.output;
  EXPECT_EQ(train("turns", "ar").exit_code, 0);
  const auto split = prepare("turns-split", {"--split-turns"});
  ASSERT_EQ(split.exit_code, 0) << split.output;
  EXPECT_NE(split.output.find("3 docs,"), std::string::npos) << split.output;  // two turns and one pair
  const auto accepted = train("turns-split", "masked_diffusion");
  EXPECT_EQ(accepted.exit_code, 0) << accepted.output;
}

// `data synth --layout chat` splits each worked example into the prompt and the answer fine-tuning trains on.
TEST_F(FineTuning, SynthWritesPromptAndResponsePairs) {
  const auto text = (*dir_ / "arith-text.jsonl").string(), chat = (*dir_ / "arith-chat.jsonl").string();
  ASSERT_EQ(run_cli({"data", "synth", "--task", "arithmetic", "--num", "5", "--out", text}).exit_code, 0);
  ASSERT_EQ(run_cli({"data", "synth", "--task", "arithmetic", "--num", "5", "--layout", "chat", "--out", chat})
                .exit_code,
            0);
  std::ifstream texts(text), chats(chat);
  std::string text_line, chat_line;
  int lines = 0;
  while (std::getline(texts, text_line) && std::getline(chats, chat_line)) {
    const auto whole = nlohmann::json::parse(text_line), pair = nlohmann::json::parse(chat_line);
    EXPECT_EQ(pair.at("prompt").get<std::string>() + pair.at("response").get<std::string>(),
              whole.at("text").get<std::string>());
    EXPECT_NE(pair.at("response").get<std::string>().find("#### "), std::string::npos);  // the answer is trained
    EXPECT_EQ(pair.at("prompt").get<std::string>().find("####"), std::string::npos);
    ++lines;
  }
  EXPECT_EQ(lines, 5);
}

}  // namespace
}  // namespace inkstone
