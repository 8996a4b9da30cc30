// `inkstone data synth`: worked examples of a procedural task as JSONL {"text": prompt + worked answer}, for
// pretraining a small model on the answer format before RL (`inkstone data prepare --format jsonl` reads it), or
// with --layout chat as {"prompt", "response"} pairs for fine-tuning on the answers alone (`--format chat`).
#include <filesystem>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/errors.h"
#include "rl/arithmetic_task.h"
#include "rl/countdown_task.h"
#include "rl/task_registry.h"
#include "tools/commands.h"

namespace inkstone::cli {
namespace {

struct SynthArgs {
  std::string task;
  int64_t num = 0;
  int64_t difficulty = 1;
  uint64_t seed = 1;
  std::string out;
  std::string layout = "text";
};

// Problem `index` of the task as its question and worked answer.
std::pair<std::string, std::string> worked_example(const SynthArgs& args, int64_t index) {
  if (args.task == "arithmetic") {
    ArithmeticProblem problem = make_arithmetic_problem(args.seed, index, args.difficulty);
    return {std::move(problem.question), std::move(problem.worked_answer)};
  }
  CountdownProblem problem = make_countdown_problem(args.seed, index, args.difficulty);
  return {std::move(problem.question), std::move(problem.worked_answer)};
}

int run_synth(const SynthArgs& args) {
  const std::string prompt_template = TaskOptions{}.prompt_template;
  const std::filesystem::path path(args.out);
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  // An invalid difficulty throws from the first problem; the atomic file then leaves nothing behind.
  AtomicFile out(path);
  for (int64_t index = 0; index < args.num; ++index) {
    const auto [question, worked_answer] = worked_example(args, index);
    const std::string prompt = render_prompt(prompt_template, question);
    const nlohmann::json line = args.layout == "chat" ? nlohmann::json{{"prompt", prompt}, {"response", worked_answer}}
                                                      : nlohmann::json{{"text", prompt + worked_answer}};
    out.write(line.dump() + "\n");
  }
  out.commit();
  fmt::print("wrote {}: {} {} examples, difficulty {}, seed {}\n", args.out, args.num, args.task, args.difficulty,
             args.seed);
  return 0;
}

}  // namespace

void add_data_synth_command(CLI::App& data, Action& action) {
  auto* synth = data.add_subcommand("synth", "Write worked examples of a procedural task as JSONL {\"text\": ...}");
  auto args = std::make_shared<SynthArgs>();
  synth->add_option("--task", args->task, "Procedural task")
      ->check(CLI::IsMember({"arithmetic", "countdown"}))
      ->required();
  synth->add_option("--num", args->num, "Number of examples (problems 0..N-1 of the seed)")
      ->check(count_range(1, 1000000000))
      ->required();
  synth->add_option("--difficulty", args->difficulty, "arithmetic: 1..11, countdown: 1..4")->capture_default_str();
  synth
      ->add_option("--seed", args->seed,
                   "Problem seed; RL tasks default to seed 0, so the default keeps RL problems out of this data "
                   "(small difficulties have few distinct problems and will overlap anyway)")
      ->capture_default_str();
  synth->add_option("--out", args->out, "Output JSONL file")->required();
  synth->add_option("--layout", args->layout, "text: {\"text\": prompt + answer}; chat: {\"prompt\", \"response\"}")
      ->check(CLI::IsMember({"text", "chat"}))
      ->capture_default_str();
  synth->callback([&action, args] { action = [args] { return run_synth(*args); }; });
}

}  // namespace inkstone::cli
