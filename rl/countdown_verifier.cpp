// Countdown's verifier: a recursive-descent parser that evaluates as it reads, in exact rationals (docs/rl.md,
// "Countdown").
#include <algorithm>

#include "rl/countdown_task.h"
#include "rl/rational.h"

namespace inkstone {
namespace {

using Value = std::optional<Rational>;  // nullopt once a division by zero or an overflow happened

// Parentheses nest at most this deep, so a pathological completion cannot exhaust the stack.
constexpr int kMaxDepth = 64;
// Integers of at most 18 digits fit in int64.
constexpr size_t kMaxLiteralDigits = 18;

Value apply(const Value& a, char op, const Value& b) {
  if (!a || !b) return std::nullopt;
  switch (op) {
    case '+': return add(*a, *b);
    case '-': return subtract(*a, *b);
    case '*': return multiply(*a, *b);
    default: return divide(*a, *b);
  }
}

// expression := term (('+' | '-') term)*
// term       := factor (('*' | '/') factor)*
// factor     := integer | '(' expression ')'
class ExpressionParser {
 public:
  explicit ExpressionParser(std::string_view text) : text_(text) {}

  // False when the whole text is not one expression.
  bool parse(Value& value) {
    if (!expression(value, 0)) return false;
    skip_spaces();
    return pos_ == text_.size();
  }

  const std::vector<int64_t>& literals() const { return literals_; }

 private:
  bool expression(Value& value, int depth) {
    if (!term(value, depth)) return false;
    for (char op = peek(); op == '+' || op == '-'; op = peek()) {
      ++pos_;
      Value right;
      if (!term(right, depth)) return false;
      value = apply(value, op, right);
    }
    return true;
  }

  bool term(Value& value, int depth) {
    if (!factor(value, depth)) return false;
    for (char op = peek(); op == '*' || op == '/'; op = peek()) {
      ++pos_;
      Value right;
      if (!factor(right, depth)) return false;
      value = apply(value, op, right);
    }
    return true;
  }

  bool factor(Value& value, int depth) {
    const char c = peek();
    if (c == '(') {
      ++pos_;
      if (depth == kMaxDepth || !expression(value, depth + 1) || peek() != ')') return false;
      ++pos_;
      return true;
    }
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    if (pos_ == start || pos_ - start > kMaxLiteralDigits) return false;
    const int64_t literal = std::stoll(std::string(text_.substr(start, pos_ - start)));
    literals_.push_back(literal);
    value = Rational{literal, 1};
    return true;
  }

  void skip_spaces() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
  }

  // The next character that is not a space, or '\0' at the end.
  char peek() {
    skip_spaces();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::vector<int64_t> literals_;
};

}  // namespace

CountdownVerdict check_countdown_expression(std::string_view expression, const std::vector<int64_t>& numbers,
                                            int64_t target) {
  ExpressionParser parser(expression);
  Value value;
  if (!parser.parse(value)) return CountdownVerdict::malformed;
  std::vector<int64_t> used = parser.literals(), given = numbers;
  std::sort(used.begin(), used.end());
  std::sort(given.begin(), given.end());
  if (used != given) return CountdownVerdict::wrong_numbers;
  if (!value) return CountdownVerdict::undefined;
  return *value == Rational{target, 1} ? CountdownVerdict::correct : CountdownVerdict::wrong_target;
}

}  // namespace inkstone
