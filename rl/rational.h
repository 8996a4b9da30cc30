// Exact rational numbers for answer verifiers, which must never compare floats: a value is num/den in lowest
// terms with den > 0, and an operation whose result does not fit in 64-bit parts gives nullopt instead of
// wrapping, which a verifier counts as "not verifiable".
#pragma once
#include <cstdint>
#include <optional>

namespace inkstone {

struct Rational {
  int64_t num = 0;
  int64_t den = 1;

  friend bool operator==(const Rational& a, const Rational& b) { return a.num == b.num && a.den == b.den; }
  friend bool operator!=(const Rational& a, const Rational& b) { return !(a == b); }
};

// num/den reduced; nullopt when den is 0 or the reduced parts do not fit in int64.
std::optional<Rational> make_rational(__int128 num, __int128 den);

std::optional<Rational> add(const Rational& a, const Rational& b);
std::optional<Rational> subtract(const Rational& a, const Rational& b);
std::optional<Rational> multiply(const Rational& a, const Rational& b);
// nullopt for division by zero.
std::optional<Rational> divide(const Rational& a, const Rational& b);

}  // namespace inkstone
