// Countdown problems, solvable by construction, and their PromptSource.
#include "rl/countdown_task.h"

#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/errors.h"
#include "rl/problem_draws.h"
#include "rl/task_registry.h"

namespace inkstone {
namespace {

// A sub-expression of the solution. Precedence says where it needs parentheses: 1 for a sum or difference,
// 2 for a product or quotient, 3 for a number.
struct Node {
  int64_t value = 0;
  std::string text;
  int precedence = 3;
};

// a op b with the fewest parentheses that keep its meaning: an operand binding looser than op is wrapped, and so
// is a right operand of equal precedence under - or /, since a - (b + c) != a - b + c.
Node combine(const Node& a, char op, const Node& b) {
  const int precedence = op == '+' || op == '-' ? 1 : 2;
  const bool wrap_left = a.precedence < precedence;
  const bool wrap_right = b.precedence < precedence || (b.precedence == precedence && (op == '-' || op == '/'));
  Node node;
  switch (op) {
    case '+': node.value = a.value + b.value; break;
    case '-': node.value = a.value - b.value; break;
    case '*': node.value = a.value * b.value; break;
    default: node.value = a.value / b.value; break;
  }
  node.text = fmt::format(wrap_left ? "({})" : "{}", a.text) + fmt::format(" {} ", op) +
              fmt::format(wrap_right ? "({})" : "{}", b.text);
  node.precedence = precedence;
  return node;
}

struct Tree {
  Node root;
  std::string steps;  // one "a op b = c" line per operation, in the order they were made
};

Tree random_tree(const std::vector<int64_t>& numbers, ProblemDraws& draws) {
  std::vector<Node> pool;
  for (int64_t number : numbers) pool.push_back({number, std::to_string(number), 3});
  Tree tree;
  while (pool.size() > 1) {
    const auto last = static_cast<int64_t>(pool.size()) - 1;
    const auto i = static_cast<size_t>(draws.uniform(0, last));
    auto j = static_cast<size_t>(draws.uniform(0, last - 1));
    if (j >= i) ++j;
    Node a = pool[i], b = pool[j];
    char op = "+-*/"[draws.uniform(0, 3)];
    if (op == '-' || op == '/') {
      if (a.value < b.value) std::swap(a, b);
      const bool positive_integer = op == '-' ? a.value > b.value : a.value % b.value == 0;
      if (!positive_integer) op = '+';
    }
    Node node = combine(a, op, b);
    tree.steps += fmt::format("{} {} {} = {}\n", a.value, op, b.value, node.value);
    pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(std::max(i, j)));
    pool[std::min(i, j)] = std::move(node);
  }
  tree.root = std::move(pool.front());
  return tree;
}

class CountdownSource final : public PromptSource {
 public:
  explicit CountdownSource(const TaskOptions& options) : options_(options) { countdown_shape(options.difficulty); }

  int64_t size() const override { return options_.size; }

  Prompt get(int64_t index) const override {
    const CountdownProblem problem = make_countdown_problem(options_.seed, index, options_.difficulty);
    nlohmann::json answer = {{"numbers", problem.numbers}, {"target", problem.target}, {"solution", problem.solution}};
    return {fmt::format("countdown/d{}-s{}/{}", options_.difficulty, options_.seed, index),
            render_prompt(options_.prompt_template, problem.question), std::move(answer)};
  }

 private:
  TaskOptions options_;
};

}  // namespace

CountdownShape countdown_shape(int64_t difficulty) {
  if (difficulty < 1 || difficulty > 4) {
    throw InputError(fmt::format("countdown difficulty {} is outside 1..4", difficulty));
  }
  return {difficulty + 2, 10 * (difficulty + 1), 100 * difficulty};
}

CountdownProblem make_countdown_problem(uint64_t seed, int64_t index, int64_t difficulty) {
  const CountdownShape shape = countdown_shape(difficulty);
  ProblemDraws draws(seed, index);
  CountdownProblem problem;
  for (int64_t k = 0; k < shape.count; ++k) problem.numbers.push_back(draws.uniform(1, shape.max_number));
  Tree tree = random_tree(problem.numbers, draws);
  while (tree.root.value > shape.max_target) tree = random_tree(problem.numbers, draws);
  problem.target = tree.root.value;
  problem.solution = tree.root.text;
  problem.question = fmt::format(
      "Using the numbers {}, make {}. Use each number exactly once, with + - * / and "
      "parentheses.",
      fmt::join(problem.numbers, ", "), problem.target);
  problem.worked_answer = tree.steps + "#### " + problem.solution;
  return problem;
}

std::unique_ptr<PromptSource> make_countdown_source(const TaskOptions& options) {
  return std::make_unique<CountdownSource>(options);
}

}  // namespace inkstone
