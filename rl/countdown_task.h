// Countdown (docs/rl.md, "Countdown"; after TinyZero): reach a target from a few numbers with + - * / and parentheses,
// using each number exactly once. Problems are solvable by construction and problem i is a pure function of
// (seed, i).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace inkstone {

struct CountdownShape {
  int64_t count = 3;         // numbers given
  int64_t max_number = 20;   // each drawn from [1, max_number]
  int64_t max_target = 100;  // the target lies in [1, max_target]
};

// Difficulty d in 1..4: d + 2 numbers from [1, 10 (d + 1)], a target up to 100 d. Then count · max_number <=
// max_target, so a tree of sums always lands in range and the generator's redraw loop ends. InputError outside.
CountdownShape countdown_shape(int64_t difficulty);

struct CountdownProblem {
  std::vector<int64_t> numbers;  // in the order the question shows them
  int64_t target = 0;
  std::string solution;       // an expression over `numbers` equal to `target`: "(3 + 5) * 2"
  std::string question;       // "Using the numbers 3, 5, 2, make 16. ..."
  std::string worked_answer;  // "3 + 5 = 8\n8 * 2 = 16\n#### (3 + 5) * 2"
};

// The solvable generator of docs/rl.md, "Countdown": the numbers are drawn, then random pairs of the pool are
// combined by a random operation until one expression is left, redrawing the tree until its value is at most
// max_target. Every intermediate value is a positive integer: a difference takes the larger side first and a
// quotient must be exact; an operation that cannot meet that becomes a sum.
CountdownProblem make_countdown_problem(uint64_t seed, int64_t index, int64_t difficulty);

enum class CountdownVerdict {
  correct,
  malformed,      // not an expression of integers, + - * /, parentheses and spaces (no unary minus, no '=')
  wrong_numbers,  // the integers written are not exactly the given multiset
  undefined,      // a division by zero, or a value beyond exact 64-bit rationals
  wrong_target,   // a valid expression whose exact value is not the target
};

// TinyZero's check with exact arithmetic: every given number used exactly once, and no float equality.
CountdownVerdict check_countdown_expression(std::string_view expression, const std::vector<int64_t>& numbers,
                                            int64_t target);

}  // namespace inkstone
