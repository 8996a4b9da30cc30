// The task table, make_prompt_source, and the prompt rendering the sources share.
#include "rl/task_registry.h"

#include <fmt/format.h>

#include "core/errors.h"
#include "rl/answer_extraction.h"
#include "rl/countdown_task.h"

namespace inkstone {
namespace {

// GSM8K and chain-sum answers are numbers after "#### "; the last number in the text is the fallback.
bool numeric_is_correct(const std::string& answer, const nlohmann::json& reference) {
  return numeric_answers_equal(answer, reference.get<std::string>());
}

bool math_is_correct(const std::string& answer, const nlohmann::json& reference) {
  return math_answers_equal(answer, reference.get<std::string>());
}

bool countdown_is_correct(const std::string& answer, const nlohmann::json& reference) {
  return check_countdown_expression(answer, reference.at("numbers").get<std::vector<int64_t>>(),
                                    reference.at("target").get<int64_t>()) == CountdownVerdict::correct;
}

const TaskEntry kTasks[] = {
    {"gsm8k", true, make_gsm8k_source, extract_numeric_answer, extract_marked_number, numeric_is_correct},
    {"math", true, make_math_source, extract_last_boxed, extract_last_boxed, math_is_correct},
    {"arithmetic", false, make_arithmetic_source, extract_numeric_answer, extract_marked_number, numeric_is_correct},
    {"countdown", false, make_countdown_source, extract_marked_text, extract_marked_text, countdown_is_correct},
};

}  // namespace

const TaskEntry& find_task(std::string_view name) {
  for (const TaskEntry& task : kTasks) {
    if (task.name == name) return task;
  }
  std::string known;
  for (const TaskEntry& task : kTasks) known += (known.empty() ? "" : ", ") + std::string(task.name);
  throw InputError(fmt::format("rl.task = '{}' is not a registered task ({})", name, known));
}

std::string render_prompt(std::string_view prompt_template, std::string_view question) {
  constexpr std::string_view kSlot = "{question}";
  std::string text(prompt_template);
  for (size_t at = text.find(kSlot); at != std::string::npos; at = text.find(kSlot, at + question.size())) {
    text.replace(at, kSlot.size(), question);
  }
  return text;
}

std::unique_ptr<PromptSource> make_prompt_source(const TaskOptions& options) {
  const TaskEntry& task = find_task(options.name);
  if (options.prompt_template.find("{question}") == std::string::npos) {
    throw InputError(fmt::format("prompt template '{}' has no {{question}}", options.prompt_template));
  }
  if (task.reads_file && options.path.empty()) throw InputError(fmt::format("task {} needs a path", task.name));
  if (!task.reads_file && options.size < 1) {
    throw InputError(fmt::format("task {}: size {} is not positive", task.name, options.size));
  }
  return task.make_source(options);
}

}  // namespace inkstone
