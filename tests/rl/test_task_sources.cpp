// Prompt sources over the shared GSM8K and MATH-500 files and the procedural tasks, the registry's errors, and the
// reward functions with their weighted sum.
#include <gtest/gtest.h>

#include <fstream>

#include "core/errors.h"
#include "rl/answer_extraction.h"
#include "rl/task.h"
#include "tests/test_paths.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;

TaskOptions task(const std::string& name, const std::string& path = "") {
  TaskOptions options;
  options.name = name;
  options.path = path;
  return options;
}

TEST(Gsm8kSource, EveryReferenceOfTheTestSetIsANumber) {
  const fs::path file = testing::shared_data_dir() / "gsm8k" / "test.jsonl";
  if (!fs::exists(file)) GTEST_SKIP() << file << " is absent (the shared data folder is optional)";
  const auto source = make_prompt_source(task("gsm8k", file.string()));
  ASSERT_EQ(source->size(), 1319);
  for (int64_t i = 0; i < source->size(); ++i) {
    const Prompt prompt = source->get(i);
    ASSERT_TRUE(parse_number(prompt.answer.get<std::string>()).has_value()) << prompt.id << ": " << prompt.answer;
  }
  const Prompt first = source->get(0);
  EXPECT_EQ(first.id, "gsm8k/test/1");
  EXPECT_EQ(first.answer, "18");
  EXPECT_EQ(first.text.rfind("Janet", 0), 0u) << first.text;
  EXPECT_EQ(first.text.back(), '\n');  // the default template "{question}\n"
}

TEST(Gsm8kSource, ErrorsNameTheFileAndLine) {
  const fs::path dir = testing::temp_dir("gsm8k_source");
  const fs::path file = dir / "bad.jsonl";
  std::ofstream(file)
      << "{\"question\": \"1+1?\", \"answer\": \"#### 2\"}\n\n{\"question\": \"q\", \"answer\": \"no mark\"}\n";
  try {
    make_prompt_source(task("gsm8k", file.string()));
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:3"), std::string::npos) << e.what();
  }
  std::ofstream(file) << "{\"question\": \"1+1?\"}\n";
  EXPECT_THROW(make_prompt_source(task("gsm8k", file.string())), InputError);
  // A reference no answer can ever equal is reported at load, not discovered as zero reward.
  for (const char* reference : {"1/0", "123456789012345678901234567890"}) {
    std::ofstream(file) << "{\"question\": \"q\", \"answer\": \"#### " << reference << "\"}\n";
    try {
      make_prompt_source(task("gsm8k", file.string()));
      ADD_FAILURE() << reference << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("bad.jsonl:1: the reference"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(make_prompt_source(task("gsm8k", (dir / "missing.jsonl").string())), InputError);
  fs::remove_all(dir);
}

TEST(MathSource, EveryMath500AnswerRoundTripsThroughABox) {
  const fs::path file = testing::shared_data_dir() / "math500" / "test.json";
  if (!fs::exists(file)) GTEST_SKIP() << file << " is absent (the shared data folder is optional)";
  const auto source = make_prompt_source(task("math", file.string()));
  ASSERT_EQ(source->size(), 500);
  const auto correct = make_reward_function("correct", "math");
  for (int64_t i = 0; i < source->size(); ++i) {
    const Prompt prompt = source->get(i);
    const std::string reference = prompt.answer.get<std::string>();
    ASSERT_FALSE(normalize_math_answer(reference).empty()) << prompt.id << ": " << reference;
    EXPECT_EQ(extract_last_boxed("So the answer is $\\boxed{" + reference + "}$.").value_or("<none>"), reference)
        << prompt.id;
    EXPECT_EQ(correct->score(prompt, "\\boxed{" + reference + "}").value, 1.0) << prompt.id << ": " << reference;
  }
  EXPECT_EQ(source->get(0).id, "math/test/0");
}

TEST(MathSource, MalformedFilesAreInputErrors) {
  const fs::path dir = testing::temp_dir("math_source");
  const fs::path file = dir / "bad.json";
  std::ofstream(file) << "[{\"problem\": \"p\", \"answer\": \"1\"}, {\"problem\": \"q\"}]";
  try {
    make_prompt_source(task("math", file.string()));
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("item 1"), std::string::npos) << e.what();
  }
  std::ofstream(file) << "[{\"problem\": \"p\", \"answer\": 204}]";
  EXPECT_EQ(make_prompt_source(task("math", file.string()))->get(0).answer, "204");
  std::ofstream(file) << "not json";
  EXPECT_THROW(make_prompt_source(task("math", file.string())), InputError);
  fs::remove_all(dir);
}

TEST(TaskRegistry, ProceduralSourcesAndBadOptions) {
  TaskOptions options = task("countdown");
  options.size = 5;
  options.difficulty = 2;
  options.prompt_template = "Q: {question}\nA:";
  const auto source = make_prompt_source(options);
  EXPECT_EQ(source->size(), 5);
  const Prompt prompt = source->get(4);
  EXPECT_EQ(prompt.id, "countdown/d2-s0/4");
  EXPECT_EQ(prompt.text.substr(0, 3), "Q: ");
  EXPECT_EQ(prompt.text.substr(prompt.text.size() - 3), "\nA:");
  EXPECT_EQ(prompt.answer.at("numbers").size(), 4u);

  EXPECT_THROW(make_prompt_source(task("chess")), InputError);
  EXPECT_THROW(make_prompt_source(task("gsm8k")), InputError);  // no path
  options.prompt_template = "no slot";
  EXPECT_THROW(make_prompt_source(options), InputError);
  options = task("arithmetic");
  options.size = 0;
  EXPECT_THROW(make_prompt_source(options), InputError);
  options.size = 10;
  options.difficulty = 99;
  EXPECT_THROW(make_prompt_source(options), InputError);
  EXPECT_THROW(make_reward_function("style", "gsm8k"), InputError);
  EXPECT_THROW(make_reward_function("correct", "chess"), InputError);
}

TEST(Rewards, CorrectAndFormatPerTask) {
  const Prompt gsm8k{"gsm8k/t/1", "q", "1000"};
  const auto correct = make_reward_function("correct", "gsm8k");
  const auto format = make_reward_function("format", "gsm8k");
  EXPECT_EQ(correct->score(gsm8k, "so #### $1,000.").value, 1.0);
  EXPECT_EQ(correct->score(gsm8k, "It costs 1000 dollars.").value, 1.0);  // the fallback still counts as correct
  EXPECT_EQ(format->score(gsm8k, "It costs 1000 dollars.").value, 0.0);   // but not as the format
  EXPECT_EQ(format->score(gsm8k, "#### 7").value, 1.0);
  const RewardResult none = correct->score(gsm8k, "I do not know.");
  EXPECT_FALSE(none.parsed);
  EXPECT_EQ(none.value, 0.0);
  const RewardResult wrong = correct->score(gsm8k, "#### 999");
  EXPECT_TRUE(wrong.parsed);
  EXPECT_EQ(wrong.extracted, "999");
  EXPECT_EQ(wrong.value, 0.0);

  const Prompt countdown{
      "countdown/d1-s0/0", "q", {{"numbers", {3, 5, 2}}, {"target", 16}, {"solution", "(3 + 5) * 2"}}};
  EXPECT_EQ(make_reward_function("correct", "countdown")->score(countdown, "#### 2 * (5 + 3)").value, 1.0);
  EXPECT_EQ(make_reward_function("correct", "countdown")->score(countdown, "#### 2 * (5 + 5)").value, 0.0);
  EXPECT_EQ(make_reward_function("format", "countdown")->score(countdown, "#### 2 * (5 + 5)").value, 1.0);

  const Prompt math{"math/t/0", "q", "\\frac{1}{2}"};
  EXPECT_EQ(make_reward_function("correct", "math")->score(math, "$\\boxed{\\dfrac12}$").value, 1.0);
  EXPECT_FALSE(make_reward_function("correct", "math")->score(math, "#### 0.5").parsed);
}

TEST(Rewards, CombinedRewardIsTheWeightedSum) {
  const Prompt prompt{"arithmetic/d1-s0/0", "What is 3 + 4?\n", "7"};
  const std::vector<WeightedReward> rewards = {
      {std::shared_ptr<const RewardFunction>(make_reward_function("correct", "arithmetic")), 1.0},
      {std::shared_ptr<const RewardFunction>(make_reward_function("format", "arithmetic")), 0.1},
  };
  const CombinedReward right = combine_rewards(rewards, prompt, "3 + 4 = 7\n#### 7");
  EXPECT_DOUBLE_EQ(right.total, 1.1);
  EXPECT_TRUE(right.correct);
  ASSERT_EQ(right.parts.size(), 2u);
  EXPECT_TRUE(right.parts[0].parsed && right.parts[1].parsed);

  const CombinedReward formatted = combine_rewards(rewards, prompt, "#### 8");
  EXPECT_DOUBLE_EQ(formatted.total, 0.1);
  EXPECT_FALSE(formatted.correct);

  const CombinedReward unparsed = combine_rewards(rewards, prompt, "seven");
  EXPECT_DOUBLE_EQ(unparsed.total, 0.0);
  EXPECT_FALSE(unparsed.parts[0].parsed);
  EXPECT_FALSE(unparsed.parts[1].parsed);

  const CombinedReward format_only = combine_rewards({rewards[1]}, prompt, "#### 7");
  EXPECT_FALSE(format_only.correct);  // no "correct" part: never counted as correct
}

}  // namespace
}  // namespace inkstone
