// What a finished sweep measured: each run's metrics at its last step, per variant mean / sd / 95% interval over
// seeds, the paired differences to the baseline (seed i against seed i: same data order), paired t-tests with
// Bonferroni and Holm corrections over the variants, and the minimum detectable effect (docs/sweeps.md).
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sweep/statistics.h"
#include "sweep/sweep_plan.h"

namespace inkstone {

// The value of `tag` on the last of a run's metrics lines (train/metric_tags.h) that holds it at step `step`;
// none when the run has not logged it there (not finished, or the metric is not the run's).
std::optional<double> final_metric(const std::vector<nlohmann::json>& lines, const std::string& tag, int64_t step);

struct VariantResult {
  std::string variant;
  std::vector<double> values;  // by seed index
  Summary summary;
  std::optional<PairedTest> versus_baseline;  // none for the baseline itself
  double p_bonferroni = 1, p_holm = 1;
  double minimum_detectable_effect = 0;  // at the corrected level (alpha / tests), power 0.8
};

struct MetricReport {
  std::string metric;
  std::vector<VariantResult> variants;  // in the sweep's order
  double baseline_seed_sd = 0;          // the noise floor: the baseline's spread over seeds
};

// Needs every run finished (InputError naming the first that is not).
std::vector<MetricReport> sweep_report(const SweepSpec& spec, const std::vector<SweepRun>& runs);

std::string report_markdown(const SweepSpec& spec, const std::vector<MetricReport>& reports);
nlohmann::json report_json(const SweepSpec& spec, const std::vector<MetricReport>& reports);

}  // namespace inkstone
