// Final answers out of model text, and their comparison with a reference (docs/rl.md, "GSM8K" and "MATH").
//
// Numeric answers (GSM8K, chain-sum arithmetic). The policy writes its answer after "#### "; a number there
// is "marked". A number is an optional sign, an optional '$', a run of digits, commas and dots that starts with
// a digit (or a dot before a digit), less any trailing dots and commas, and optionally "/digits" for a fraction.
// Commas and the '$' are dropped, so "$1,000." reads as "1000". A '-' is a sign only when it does not follow a
// letter or digit, so "10-15" reads as 10 and 15. Exponents ("1e3") are not numbers: neither GSM8K's
// references nor chain-sum answers use them, and the lexer reads "1e3" as 1 and 3.
// Numbers compare by exact value, so "1000.00", "1000" and "2000/2" are equal.
//
// MATH answers. The last \boxed{...} (or \fbox{...}) with matching braces, compared after a light
// normalisation in the spirit of Hendrycks et al.'s `strip_string` convention (see normalize_math_answer).
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "rl/rational.h"

namespace inkstone {

// The last number that directly follows a "####" marker (spaces between are allowed); nullopt when none does.
// This is also GSM8K's reference rule: its solutions end in "#### N". verl's "strict" rule searches only the last
// 300 characters; this searches the whole text, so an answer followed by a long ramble still counts.
std::optional<std::string> extract_marked_number(std::string_view text);

// The last number anywhere in the text (verl's "flexible" GSM8K rule).
std::optional<std::string> extract_last_number(std::string_view text);

// The marked number when there is one, else the last number.
std::optional<std::string> extract_numeric_answer(std::string_view text);

// The rest of the line after the last "####" marker, trimmed; nullopt when there is no marker or the line is
// empty. Countdown answers are expressions, read this way.
std::optional<std::string> extract_marked_text(std::string_view text);

// An integer, a decimal ("-1.50", ".5") or a fraction of integers ("3/4") as an exact value; nullopt for anything
// else, commas included (callers drop thousands separators first) and for values beyond 64-bit parts.
std::optional<Rational> parse_number(std::string_view text);

// Both parse as numbers of equal value.
bool numeric_answers_equal(std::string_view answer, std::string_view reference);

// The inside of the last \boxed{...} or \fbox{...}, braces matched with a depth counter (escaped "\{", "\}" do not
// count); "\boxed 5" gives the token after the space. nullopt when there is no box or its braces do not close.
std::optional<std::string> extract_last_boxed(std::string_view text);

// A MATH answer in a canonical spelling: no \left / \right, \dfrac and \tfrac as \frac, \frac12 as \frac{1}{2},
// \sqrt2 as \sqrt{2}, no thin spaces, degrees, percent or dollar signs, no trailing unit (a \text{ ...} or
// \mbox{ ...} whose content starts with a space, and all after it), \text{X} as X, no whitespace, no trailing
// '.', "x=5" as 5, and "10,080" as 10080 when the commas group digits by three.
std::string normalize_math_answer(std::string_view answer);

// Equal normalised spellings, or both normalised answers numbers (including \frac{a}{b} of integers) of equal
// value, so "\dfrac{1}{2}", "1/2" and "0.5" all match.
bool math_answers_equal(std::string_view answer, std::string_view reference);

}  // namespace inkstone
