// Chain-sum arithmetic (docs/rl.md, "Chain-sum arithmetic"; after reasoning-gym's chain_sum): "What is 12 + 5 - 3?"
// with an exact integer answer, made procedurally so that problem i is a pure function of (seed, i).
#pragma once
#include <cstdint>
#include <string>

namespace inkstone {

struct ArithmeticShape {
  int64_t terms = 2;   // operands in the chain
  int64_t digits = 1;  // every operand has exactly this many digits
};

// Difficulty d in 1..11 gives d + 1 terms of (d + 1) / 2 digits: 2 terms of 1 digit, 3 of 1, 4 of 2, ..., 12 of 6
// (reasoning-gym's curriculum runs to 12 terms). InputError outside that range.
ArithmeticShape arithmetic_shape(int64_t difficulty);

struct ArithmeticProblem {
  std::string question;       // "What is 12 + 5 - 3?"
  int64_t answer = 0;         // 14
  std::string worked_answer;  // "12 + 5 = 17\n17 - 3 = 14\n#### 14": left to right, one operation a line
};

// Operands uniform over the numbers of the shape's digit count, each operator + or - with equal odds.
ArithmeticProblem make_arithmetic_problem(uint64_t seed, int64_t index, int64_t difficulty);

}  // namespace inkstone
