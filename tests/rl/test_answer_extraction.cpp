// Answer extraction and comparison: GSM8K-style numbers (marked and fallback), MATH \boxed{} extraction and the
// normalisation that decides MATH equivalence (docs/rl.md, "GSM8K" and "MATH").
#include <gtest/gtest.h>

#include "rl/answer_extraction.h"

namespace inkstone {
namespace {

struct NumericCase {
  const char* text;
  const char* expected;  // nullptr: no number is extracted
};

TEST(NumericAnswer, MarkedNumberElseLastNumber) {
  const NumericCase cases[] = {
      {"The answer is $1,000.", "1000"},
      {"#### 1,000", "1000"},
      {"so she pays 1000.00", "1000.00"},
      {"#### -5", "-5"},
      {"It drops to -5 degrees.", "-5"},
      {"#### $18", "18"},
      {"#### 3/4", "3/4"},
      {"#### 12\nbut wait, 7 apples and 9 pears", "12"},  // the marked number wins over later numbers
      {"#### 12\n#### 13", "13"},                         // the last marker wins
      {"#### none\n3 then 4", "4"},                       // a marker without a number falls back
      {"She had 3 apples, bought 4 more, and ate 2; 5 are left.", "5"},
      {"from 10-15 minutes", "15"},  // a hyphen after a digit is not a minus sign
      {"x = .5", ".5"},
      {"1e3", "3"},  // exponents are not numbers (answer_extraction.h)
      {"no digits here.", nullptr},
      {"####", nullptr},
      {"", nullptr},
  };
  for (const NumericCase& c : cases) {
    const auto answer = extract_numeric_answer(c.text);
    if (c.expected == nullptr) {
      EXPECT_FALSE(answer.has_value()) << c.text << " gave " << answer.value_or("");
    } else {
      EXPECT_EQ(answer.value_or("<none>"), c.expected) << c.text;
    }
  }
}

TEST(NumericAnswer, OnlyTheMarkedFormIsTheFormat) {
  EXPECT_EQ(extract_marked_number("work 3 + 4 = 7\n#### 7").value_or(""), "7");
  EXPECT_FALSE(extract_marked_number("the answer is 7").has_value());
  EXPECT_FALSE(extract_marked_number("#### seven").has_value());
}

TEST(NumericAnswer, ComparisonIsByExactValue) {
  EXPECT_TRUE(numeric_answers_equal("1000.00", "1000"));
  EXPECT_TRUE(numeric_answers_equal("2000/2", "1000"));
  EXPECT_TRUE(numeric_answers_equal("3/4", "0.75"));
  EXPECT_TRUE(numeric_answers_equal("-3", "-3.0"));
  EXPECT_TRUE(numeric_answers_equal(".5", "0.5"));
  EXPECT_FALSE(numeric_answers_equal("-3", "3"));
  EXPECT_FALSE(numeric_answers_equal("0.1", "0.10000000000000001"));
  EXPECT_FALSE(numeric_answers_equal("1,000", "1000"));  // extraction drops commas; the comparison does not
  EXPECT_FALSE(numeric_answers_equal("1e3", "1000"));
  EXPECT_FALSE(numeric_answers_equal("1/0", "1/0"));
  EXPECT_FALSE(numeric_answers_equal("1.2.3", "1.2.3"));
  EXPECT_FALSE(numeric_answers_equal("", ""));
}

TEST(NumericAnswer, HugeNumbersAreNotComparedInsteadOfWrapping) {
  EXPECT_FALSE(parse_number("123456789012345678901234567890").has_value());
  EXPECT_TRUE(parse_number("123456789012345678").has_value());
}

TEST(NumericAnswer, MarkedTextIsTheRestOfTheLastMarkerLine) {
  EXPECT_EQ(extract_marked_text("3 + 5 = 8\n#### (3 + 5) * 2  \nthanks").value_or(""), "(3 + 5) * 2");
  EXPECT_EQ(extract_marked_text("#### 1\n####2").value_or(""), "2");
  EXPECT_FALSE(extract_marked_text("#### \n").has_value());
  EXPECT_FALSE(extract_marked_text("(3 + 5) * 2").has_value());
}

TEST(BoxedAnswer, LastBoxWithMatchedBraces) {
  EXPECT_EQ(extract_last_boxed("so \\boxed{\\frac{1}{2}}.").value_or(""), "\\frac{1}{2}");
  EXPECT_EQ(extract_last_boxed("\\boxed{1} then \\boxed{2}").value_or(""), "2");
  EXPECT_EQ(extract_last_boxed("$\\boxed 5$").value_or(""), "5");
  EXPECT_EQ(extract_last_boxed("\\fbox{7}").value_or(""), "7");
  EXPECT_EQ(extract_last_boxed("\\boxed{3} and \\fbox{4}").value_or(""), "4");
  EXPECT_EQ(extract_last_boxed("\\boxed{\\{1,2\\}}").value_or(""), "\\{1,2\\}");  // escaped braces do not count
  EXPECT_EQ(extract_last_boxed("\\boxed {x^{2}}").value_or(""), "x^{2}");
  EXPECT_FALSE(extract_last_boxed("\\boxed{\\frac{1}{2}").has_value());      // unbalanced: no answer
  EXPECT_FALSE(extract_last_boxed("\\boxed{1} and \\boxed{2").has_value());  // the last box decides
  EXPECT_FALSE(extract_last_boxed("the answer is 5").has_value());
  EXPECT_FALSE(extract_last_boxed("\\boxedfoo").has_value());
}

TEST(MathNormalisation, EquivalentSpellingsMatch) {
  const std::pair<const char*, const char*> same[] = {
      {"\\dfrac{1}{2}", "\\frac12"},
      {"\\tfrac{1}{2}", "0.5"},
      {"1/2", "\\frac{1}{2}"},
      {"-\\frac{3}{4}", "-0.75"},
      {"\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"},
      {"\\frac\\pi2", "\\frac{\\pi}{2}"},
      {"\\sqrt2", "\\sqrt{2}"},
      {"2\\sqrt 3", "2\\sqrt{3}"},
      {"90^\\circ", "90"},
      {"30^{\\circ}", "30"},
      {"10,\\!080", "10080"},
      {"11,\\! 111,\\! 111,\\! 100", "11111111100"},
      {"\\$32,\\!348", "32348"},
      {"50\\%", "50"},
      {"5.4 \\text{ cents}", "5.4"},
      {"864 \\mbox{ inches}^2", "864"},
      {"\\frac{270}7\\text{ degrees}", "\\frac{270}{7}"},
      {"\\text{(C)}", "(C)"},
      {"\\text{Evelyn}", "Evelyn"},
      {"x = 5", "5"},
      {"7.", "7"},
      {"1000.00", "1000"},
  };
  for (const auto& [a, b] : same) EXPECT_TRUE(math_answers_equal(a, b)) << a << " vs " << b;
}

TEST(MathNormalisation, DifferentAnswersStayDifferent) {
  const std::pair<const char*, const char*> different[] = {
      {"3, 5, 7", "357"},  // commas that do not group thousands are kept
      {"1,-2", "12"},
      {"\\frac{1}{2}", "\\frac{2}{1}"},
      {"(3,4]", "(3,4)"},
      {"\\text{(C)}", "(D)"},
      {"-2", "2"},
      {"p - q", "q - p"},
  };
  for (const auto& [a, b] : different) EXPECT_FALSE(math_answers_equal(a, b)) << a << " vs " << b;
}

}  // namespace
}  // namespace inkstone
