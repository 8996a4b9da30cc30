// Exact rational arithmetic: each operation is done in 128-bit integers, where the products of two 64-bit parts
// cannot overflow, and reduced back to 64-bit parts.
#include "rl/rational.h"

#include <limits>

namespace inkstone {
namespace {

__int128 gcd128(__int128 a, __int128 b) {
  if (a < 0) a = -a;
  if (b < 0) b = -b;
  while (b != 0) {
    const __int128 r = a % b;
    a = b;
    b = r;
  }
  return a;
}

bool fits_int64(__int128 x) {
  return x >= std::numeric_limits<int64_t>::min() && x <= std::numeric_limits<int64_t>::max();
}

}  // namespace

std::optional<Rational> make_rational(__int128 num, __int128 den) {
  if (den == 0) return std::nullopt;
  if (den < 0) {
    num = -num;
    den = -den;
  }
  const __int128 divisor = gcd128(num, den);
  num /= divisor;
  den /= divisor;
  if (!fits_int64(num) || !fits_int64(den)) return std::nullopt;
  return Rational{static_cast<int64_t>(num), static_cast<int64_t>(den)};
}

std::optional<Rational> add(const Rational& a, const Rational& b) {
  return make_rational(static_cast<__int128>(a.num) * b.den + static_cast<__int128>(b.num) * a.den,
                       static_cast<__int128>(a.den) * b.den);
}

std::optional<Rational> subtract(const Rational& a, const Rational& b) {
  return make_rational(static_cast<__int128>(a.num) * b.den - static_cast<__int128>(b.num) * a.den,
                       static_cast<__int128>(a.den) * b.den);
}

std::optional<Rational> multiply(const Rational& a, const Rational& b) {
  return make_rational(static_cast<__int128>(a.num) * b.num, static_cast<__int128>(a.den) * b.den);
}

std::optional<Rational> divide(const Rational& a, const Rational& b) {
  return make_rational(static_cast<__int128>(a.num) * b.den, static_cast<__int128>(a.den) * b.num);
}

}  // namespace inkstone
