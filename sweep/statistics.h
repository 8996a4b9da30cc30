// The statistics a sweep reports (docs/sweeps.md): a variant's mean with its 95% interval over seeds, the paired
// t-test of its per-seed differences to the baseline, multiple-comparison corrections over the variants, and the
// smallest difference the measured noise could detect. All in double precision; Student's t from Boost.Math.
#pragma once
#include <vector>

namespace inkstone {

struct Summary {
  int n = 0;
  double mean = 0;
  double sd = 0;                   // sample standard deviation (n - 1); 0 for n < 2
  double ci_low = 0, ci_high = 0;  // 95% t interval of the mean; the mean itself for n < 2
};
Summary summarize(const std::vector<double>& values);

struct PairedTest {
  int n = 0;                   // pairs
  double mean_difference = 0;  // mean of variant - baseline
  double sd_difference = 0;
  double t = 0;                    // mean / (sd / sqrt(n))
  double p = 1;                    // two-sided; 1 when the differences have no spread or n < 2
  double ci_low = 0, ci_high = 0;  // 95% interval of the mean difference
};
// Student's paired t-test of `variant` against `baseline`, pair i being seed i of each (the lengths must match:
// std::invalid_argument otherwise).
PairedTest paired_t_test(const std::vector<double>& variant, const std::vector<double>& baseline);

// Adjusted p-values in the input order: Bonferroni multiplies by the number of tests; Holm's step-down multiplies
// the k-th smallest by (m - k + 1) and keeps the adjusted values non-decreasing in that order; both cap at 1.
std::vector<double> bonferroni(const std::vector<double>& p);
std::vector<double> holm(const std::vector<double>& p);

// The smallest true mean difference a two-sided paired t-test at level `alpha` detects with probability `power`,
// given n pairs whose differences have standard deviation `sd`: (t_{1-alpha/2, n-1} + t_{power, n-1}) sd / sqrt(n)
// (the t approximation of the noncentral distribution). Infinite for n < 2.
double minimum_detectable_effect(double sd, int n, double alpha, double power = 0.8);

}  // namespace inkstone
