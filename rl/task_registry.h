// The tasks by config name: how each one's prompts are made and how its answers are read and checked. Both
// make_prompt_source and make_reward_function (rl/task.h) look a task up here.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "rl/task.h"

namespace inkstone {

struct TaskEntry {
  std::string_view name;
  bool reads_file = false;  // gsm8k and math read TaskOptions::path; the procedural tasks use size and seed
  std::unique_ptr<PromptSource> (*make_source)(const TaskOptions&) = nullptr;
  // The answer the "correct" reward checks, fallbacks included.
  std::optional<std::string> (*extract_answer)(std::string_view completion) = nullptr;
  // The answer only when written in the task's own format; the "format" reward.
  std::optional<std::string> (*extract_formatted_answer)(std::string_view completion) = nullptr;
  bool (*is_correct)(const std::string& answer, const nlohmann::json& reference) = nullptr;
};

// InputError naming the known tasks for an unknown name.
const TaskEntry& find_task(std::string_view name);

// `prompt_template` with each "{question}" replaced by `question`.
std::string render_prompt(std::string_view prompt_template, std::string_view question);

// GSM8K JSONL ({question, answer} per line): the reference is the number after "####", without commas, as text;
// ids are "gsm8k/<file stem>/<line number>".
std::unique_ptr<PromptSource> make_gsm8k_source(const TaskOptions& options);
// A JSON array of {problem, answer} objects such as MATH-500: the reference is the answer's LaTeX text;
// ids are "math/<file stem>/<array index>".
std::unique_ptr<PromptSource> make_math_source(const TaskOptions& options);
// Chain-sum arithmetic (rl/arithmetic_task.h): the reference is the integer result as text.
std::unique_ptr<PromptSource> make_arithmetic_source(const TaskOptions& options);
// Countdown (rl/countdown_task.h): the reference is {numbers, target, solution}.
std::unique_ptr<PromptSource> make_countdown_source(const TaskOptions& options);

}  // namespace inkstone
