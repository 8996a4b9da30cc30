#include "sweep/statistics.h"

#include <algorithm>
#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace inkstone {
namespace {

double mean_of(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / v.size(); }

double sd_of(const std::vector<double>& v, double mean) {
  if (v.size() < 2) return 0;
  double squares = 0;
  for (double x : v) squares += (x - mean) * (x - mean);
  return std::sqrt(squares / static_cast<double>(v.size() - 1));
}

// The q-quantile of Student's t with `df` degrees of freedom.
double t_quantile(double q, int df) { return boost::math::quantile(boost::math::students_t(df), q); }

}  // namespace

Summary summarize(const std::vector<double>& values) {
  Summary s;
  s.n = static_cast<int>(values.size());
  if (s.n == 0) return s;
  s.mean = mean_of(values);
  s.sd = sd_of(values, s.mean);
  s.ci_low = s.ci_high = s.mean;
  if (s.n >= 2) {
    const double half = t_quantile(0.975, s.n - 1) * s.sd / std::sqrt(static_cast<double>(s.n));
    s.ci_low = s.mean - half;
    s.ci_high = s.mean + half;
  }
  return s;
}

PairedTest paired_t_test(const std::vector<double>& variant, const std::vector<double>& baseline) {
  if (variant.size() != baseline.size())
    throw std::invalid_argument("paired_t_test: the variant and the baseline need the same number of seeds");
  std::vector<double> differences;
  for (size_t i = 0; i < variant.size(); ++i) differences.push_back(variant[i] - baseline[i]);
  const Summary s = summarize(differences);
  PairedTest test;
  test.n = s.n;
  test.mean_difference = s.mean;
  test.sd_difference = s.sd;
  test.ci_low = s.ci_low;
  test.ci_high = s.ci_high;
  if (s.n < 2 || s.sd == 0) return test;
  test.t = s.mean / (s.sd / std::sqrt(static_cast<double>(s.n)));
  test.p = 2 * boost::math::cdf(boost::math::complement(boost::math::students_t(s.n - 1), std::abs(test.t)));
  return test;
}

std::vector<double> bonferroni(const std::vector<double>& p) {
  std::vector<double> adjusted;
  for (double value : p) adjusted.push_back(std::min(1.0, value * static_cast<double>(p.size())));
  return adjusted;
}

std::vector<double> holm(const std::vector<double>& p) {
  std::vector<size_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  std::vector<double> adjusted(p.size());
  double running = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    running = std::max(running, std::min(1.0, p[order[k]] * static_cast<double>(p.size() - k)));
    adjusted[order[k]] = running;
  }
  return adjusted;
}

double minimum_detectable_effect(double sd, int n, double alpha, double power) {
  if (n < 2) return std::numeric_limits<double>::infinity();
  return (t_quantile(1 - alpha / 2, n - 1) + t_quantile(power, n - 1)) * sd / std::sqrt(static_cast<double>(n));
}

}  // namespace inkstone
