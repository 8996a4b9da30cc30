// Chain-sum problems and their PromptSource.
#include "rl/arithmetic_task.h"

#include <fmt/format.h>

#include "core/errors.h"
#include "rl/problem_draws.h"
#include "rl/task_registry.h"

namespace inkstone {
namespace {

class ArithmeticSource final : public PromptSource {
 public:
  explicit ArithmeticSource(const TaskOptions& options) : options_(options) { arithmetic_shape(options.difficulty); }

  int64_t size() const override { return options_.size; }

  Prompt get(int64_t index) const override {
    const ArithmeticProblem problem = make_arithmetic_problem(options_.seed, index, options_.difficulty);
    return {fmt::format("arithmetic/d{}-s{}/{}", options_.difficulty, options_.seed, index),
            render_prompt(options_.prompt_template, problem.question), std::to_string(problem.answer)};
  }

 private:
  TaskOptions options_;
};

}  // namespace

ArithmeticShape arithmetic_shape(int64_t difficulty) {
  if (difficulty < 1 || difficulty > 11) {
    throw InputError(fmt::format("arithmetic difficulty {} is outside 1..11", difficulty));
  }
  return {difficulty + 1, (difficulty + 1) / 2};
}

ArithmeticProblem make_arithmetic_problem(uint64_t seed, int64_t index, int64_t difficulty) {
  const ArithmeticShape shape = arithmetic_shape(difficulty);
  int64_t smallest = 1;
  for (int64_t k = 1; k < shape.digits; ++k) smallest *= 10;
  ProblemDraws draws(seed, index);
  ArithmeticProblem problem;
  int64_t total = draws.uniform(smallest, smallest * 10 - 1);
  std::string expression = std::to_string(total);
  for (int64_t k = 1; k < shape.terms; ++k) {
    const int64_t operand = draws.uniform(smallest, smallest * 10 - 1);
    const bool plus = draws.uniform(0, 1) == 1;
    const int64_t next = plus ? total + operand : total - operand;
    const char op = plus ? '+' : '-';
    problem.worked_answer += fmt::format("{} {} {} = {}\n", total, op, operand, next);
    expression += fmt::format(" {} {}", op, operand);
    total = next;
  }
  problem.question = fmt::format("What is {}?", expression);
  problem.answer = total;
  problem.worked_answer += fmt::format("#### {}", total);
  return problem;
}

std::unique_ptr<PromptSource> make_arithmetic_source(const TaskOptions& options) {
  return std::make_unique<ArithmeticSource>(options);
}

}  // namespace inkstone
