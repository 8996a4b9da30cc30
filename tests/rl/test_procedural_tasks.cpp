// Chain-sum arithmetic and Countdown: problems are pure functions of (seed, index), worked answers verify, and
// Countdown's verifier rejects what docs/rl.md, "Countdown" rejects.
#include <gtest/gtest.h>

#include <set>

#include "core/errors.h"
#include "rl/answer_extraction.h"
#include "rl/arithmetic_task.h"
#include "rl/countdown_task.h"

namespace inkstone {
namespace {

TEST(Arithmetic, ProblemsArePureFunctionsOfSeedAndIndex) {
  for (int64_t index : {0, 1, 57}) {
    const auto a = make_arithmetic_problem(3, index, 4), b = make_arithmetic_problem(3, index, 4);
    EXPECT_EQ(a.question, b.question);
    EXPECT_EQ(a.worked_answer, b.worked_answer);
  }
  int same = 0;
  for (int64_t index = 0; index < 50; ++index) {
    same += make_arithmetic_problem(3, index, 4).question == make_arithmetic_problem(4, index, 4).question;
  }
  EXPECT_LT(same, 3);
  EXPECT_NE(make_arithmetic_problem(3, 0, 4).question, make_arithmetic_problem(3, 1, 4).question);
}

TEST(Arithmetic, DifficultySetsTermsAndDigits) {
  EXPECT_EQ(arithmetic_shape(1).terms, 2);
  EXPECT_EQ(arithmetic_shape(1).digits, 1);
  EXPECT_EQ(arithmetic_shape(3).terms, 4);
  EXPECT_EQ(arithmetic_shape(3).digits, 2);
  EXPECT_EQ(arithmetic_shape(11).terms, 12);
  EXPECT_THROW(arithmetic_shape(0), InputError);
  EXPECT_THROW(arithmetic_shape(12), InputError);
  // "What is 12 + 34 - 56 + 78?": four two-digit operands.
  const std::string question = make_arithmetic_problem(0, 0, 3).question;
  int operands = 0;
  for (size_t at = 0; (at = question.find_first_of("0123456789", at)) != std::string::npos; ++operands) {
    const size_t end = question.find_first_not_of("0123456789", at);
    EXPECT_EQ(end - at, 2u) << question;
    at = end;
  }
  EXPECT_EQ(operands, 4) << question;
}

TEST(Arithmetic, WorkedAnswersVerifyAndWrongAnswersDoNot) {
  for (int64_t difficulty = 1; difficulty <= 11; ++difficulty) {
    for (int64_t index = 0; index < 20; ++index) {
      const ArithmeticProblem problem = make_arithmetic_problem(7, index, difficulty);
      const std::string reference = std::to_string(problem.answer);
      const auto answer = extract_marked_number(problem.worked_answer);
      ASSERT_TRUE(answer.has_value()) << problem.worked_answer;
      EXPECT_TRUE(numeric_answers_equal(*answer, reference)) << problem.question << "\n" << problem.worked_answer;
      EXPECT_FALSE(numeric_answers_equal(std::to_string(problem.answer + 1), reference));
    }
  }
  const ArithmeticProblem problem = make_arithmetic_problem(0, 0, 1);
  EXPECT_EQ(problem.worked_answer.substr(problem.worked_answer.rfind('\n') + 1),
            "#### " + std::to_string(problem.answer));
}

TEST(Countdown, GeneratedSolutionsVerifyAndFitTheShape) {
  for (int64_t difficulty = 1; difficulty <= 4; ++difficulty) {
    const CountdownShape shape = countdown_shape(difficulty);
    std::set<int64_t> targets;
    for (int64_t index = 0; index < 200; ++index) {
      const CountdownProblem problem = make_countdown_problem(11, index, difficulty);
      ASSERT_EQ(static_cast<int64_t>(problem.numbers.size()), shape.count);
      for (int64_t number : problem.numbers) {
        EXPECT_GE(number, 1);
        EXPECT_LE(number, shape.max_number);
      }
      EXPECT_GE(problem.target, 1);
      EXPECT_LE(problem.target, shape.max_target);
      EXPECT_EQ(check_countdown_expression(problem.solution, problem.numbers, problem.target),
                CountdownVerdict::correct)
          << problem.question << "\n"
          << problem.solution;
      EXPECT_EQ(extract_marked_text(problem.worked_answer).value_or(""), problem.solution);
      targets.insert(problem.target);
    }
    EXPECT_GT(targets.size(), 20u) << "difficulty " << difficulty;
  }
}

TEST(Countdown, ProblemsArePureFunctionsOfSeedAndIndex) {
  EXPECT_EQ(make_countdown_problem(5, 9, 2).worked_answer, make_countdown_problem(5, 9, 2).worked_answer);
  EXPECT_EQ(make_countdown_problem(5, 9, 2).question, make_countdown_problem(5, 9, 2).question);
  int same = 0;
  for (int64_t index = 0; index < 50; ++index) {
    same += make_countdown_problem(5, index, 2).question == make_countdown_problem(6, index, 2).question;
  }
  EXPECT_LT(same, 3);
  EXPECT_THROW(countdown_shape(0), InputError);
  EXPECT_THROW(countdown_shape(5), InputError);
}

TEST(Countdown, VerifierFollowsTheRules) {
  const std::vector<int64_t> numbers = {3, 5, 2};
  EXPECT_EQ(check_countdown_expression("(3 + 5) * 2", numbers, 16), CountdownVerdict::correct);
  EXPECT_EQ(check_countdown_expression("2*(5+3)", numbers, 16), CountdownVerdict::correct);
  EXPECT_EQ(check_countdown_expression("3 + 5 * 2", numbers, 13), CountdownVerdict::correct);
  EXPECT_EQ(check_countdown_expression("(3 + 5) * 2", numbers, 15), CountdownVerdict::wrong_target);
  EXPECT_EQ(check_countdown_expression("3 + 5 * 2", numbers, 16), CountdownVerdict::wrong_target);     // precedence
  EXPECT_EQ(check_countdown_expression("(3 + 3) * 2", numbers, 12), CountdownVerdict::wrong_numbers);  // reuse
  EXPECT_EQ(check_countdown_expression("3 + 5", numbers, 8), CountdownVerdict::wrong_numbers);         // one unused
  EXPECT_EQ(check_countdown_expression("3 + 5 + 2 + 1", numbers, 11), CountdownVerdict::wrong_numbers);
  EXPECT_EQ(check_countdown_expression("3 / (5 - 5) + 2", {3, 5, 5, 2}, 2), CountdownVerdict::undefined);
  EXPECT_EQ(check_countdown_expression("the answer is 16", numbers, 16), CountdownVerdict::malformed);
  EXPECT_EQ(check_countdown_expression("(3 + 5) * 2 = 16", numbers, 16), CountdownVerdict::malformed);
  EXPECT_EQ(check_countdown_expression("(3 + 5 * 2", numbers, 13), CountdownVerdict::malformed);
  EXPECT_EQ(check_countdown_expression("-3 + 5 * 2", numbers, 7), CountdownVerdict::malformed);
  EXPECT_EQ(check_countdown_expression("3.0 + 5 * 2", numbers, 13), CountdownVerdict::malformed);
  EXPECT_EQ(check_countdown_expression("", numbers, 0), CountdownVerdict::malformed);
  EXPECT_EQ(check_countdown_expression(std::string(1000, '(') + "3", numbers, 3), CountdownVerdict::malformed);
}

TEST(Countdown, DivisionIsExactNotFloatingPoint) {
  // Intermediate values are exact rationals, so thirds add up to exactly one.
  EXPECT_EQ(check_countdown_expression("7 / 3 * 3", {7, 3, 3}, 7), CountdownVerdict::correct);
  EXPECT_EQ(check_countdown_expression("(1 / 3 + 1 / 3 + 1 / 3) * 9", {1, 3, 1, 3, 1, 3, 9}, 9),
            CountdownVerdict::correct);
  EXPECT_EQ(check_countdown_expression("10 / 4", {10, 4}, 2), CountdownVerdict::wrong_target);
}

}  // namespace
}  // namespace inkstone
