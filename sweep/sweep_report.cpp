#include "sweep/sweep_report.h"

#include <fmt/format.h>

#include <map>

#include "core/errors.h"
#include "train/metric_tags.h"

namespace inkstone {

std::optional<double> final_metric(const std::vector<nlohmann::json>& lines, const std::string& tag, int64_t step) {
  std::optional<double> found;
  for (const auto& line : lines) {
    if (line["step"] != step) continue;
    for (const auto& [line_tag, value] : tagged_values(line))
      if (line_tag == tag) found = value;
  }
  return found;
}

std::vector<MetricReport> sweep_report(const SweepSpec& spec, const std::vector<SweepRun>& runs) {
  const size_t tests = spec.variants.size() - 1;
  // Each run's lines, read once for all metrics; a run that never started has none.
  std::map<std::filesystem::path, std::vector<nlohmann::json>> lines_of;
  for (const auto& run : runs)
    if (std::filesystem::exists(run.run_dir / "metrics.jsonl")) lines_of[run.run_dir] = read_metrics_lines(run.run_dir);
  std::vector<MetricReport> reports;
  for (const auto& metric : spec.metrics) {
    MetricReport report{metric, {}, 0};
    for (const auto& variant : spec.variants) {
      VariantResult result{variant.name, {}, {}, std::nullopt, 1, 1, 0};
      for (const auto& run : runs) {
        if (run.variant != variant.name) continue;
        const auto value = final_metric(lines_of[run.run_dir], metric, run.steps);
        if (!value)
          throw InputError(fmt::format("{}: no {} at step {} (run not finished, or not a metric of this run)",
                                       run.run_dir.string(), metric, run.steps));
        result.values.push_back(*value);
      }
      result.summary = summarize(result.values);
      report.variants.push_back(std::move(result));
    }
    const auto& baseline = *std::find_if(report.variants.begin(), report.variants.end(),
                                         [&](const VariantResult& v) { return v.variant == spec.baseline; });
    report.baseline_seed_sd = baseline.summary.sd;
    std::vector<double> p;
    for (auto& v : report.variants) {
      if (v.variant == spec.baseline) continue;
      v.versus_baseline = paired_t_test(v.values, baseline.values);
      v.minimum_detectable_effect =
          minimum_detectable_effect(v.versus_baseline->sd_difference, v.versus_baseline->n,
                                    spec.alpha / static_cast<double>(std::max<size_t>(tests, 1)));
      p.push_back(v.versus_baseline->p);
    }
    const auto by_bonferroni = bonferroni(p), by_holm = holm(p);
    size_t k = 0;
    for (auto& v : report.variants)
      if (v.versus_baseline) {
        v.p_bonferroni = by_bonferroni[k];
        v.p_holm = by_holm[k++];
      }
    reports.push_back(std::move(report));
  }
  return reports;
}

std::string report_markdown(const SweepSpec& spec, const std::vector<MetricReport>& reports) {
  std::string out;
  for (const auto& report : reports) {
    out += fmt::format("### {} ({} seeds; baseline {}; noise floor: baseline sd over seeds {:.4f})\n\n", report.metric,
                       spec.seeds.size(), spec.baseline, report.baseline_seed_sd);
    out +=
        "| variant | mean | sd | 95% CI | diff vs baseline | 95% CI of diff | t | p | p Bonferroni | p Holm | "
        "MDE |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& v : report.variants) {
      out += fmt::format("| {} | {:.4f} | {:.4f} | [{:.4f}, {:.4f}] |", v.variant, v.summary.mean, v.summary.sd,
                         v.summary.ci_low, v.summary.ci_high);
      if (!v.versus_baseline) {
        out += " (baseline) | | | | | | |\n";
        continue;
      }
      const auto& t = *v.versus_baseline;
      const bool beyond = v.p_holm < spec.alpha;
      out += fmt::format(" {:+.4f}{} | [{:+.4f}, {:+.4f}] | {:.2f} | {:.3g} | {:.3g} | {:.3g} | {:.4f} |\n",
                         t.mean_difference, beyond ? " *" : "", t.ci_low, t.ci_high, t.t, t.p, v.p_bonferroni, v.p_holm,
                         v.minimum_detectable_effect);
    }
    out += fmt::format(
        "\n`*`: beyond the noise floor (Holm-corrected p < {}). MDE: the smallest true difference a "
        "paired test at the corrected level detects with power 0.8, from the measured spread.\n\n",
        spec.alpha);
  }
  return out;
}

nlohmann::json report_json(const SweepSpec& spec, const std::vector<MetricReport>& reports) {
  nlohmann::json out = {{"baseline", spec.baseline},
                        {"alpha", spec.alpha},
                        {"seeds", spec.seeds},
                        {"data_seeds", spec.data_seeds},
                        {"metrics", nlohmann::json::object()}};
  for (const auto& report : reports) {
    nlohmann::json variants = nlohmann::json::array();
    for (const auto& v : report.variants) {
      nlohmann::json entry = {{"variant", v.variant},
                              {"values", v.values},
                              {"mean", v.summary.mean},
                              {"sd", v.summary.sd},
                              {"ci95", {v.summary.ci_low, v.summary.ci_high}}};
      if (v.versus_baseline) {
        const auto& t = *v.versus_baseline;
        entry["versus_baseline"] = {{"mean_difference", t.mean_difference},
                                    {"sd_difference", t.sd_difference},
                                    {"ci95", {t.ci_low, t.ci_high}},
                                    {"t", t.t},
                                    {"p", t.p},
                                    {"p_bonferroni", v.p_bonferroni},
                                    {"p_holm", v.p_holm},
                                    {"minimum_detectable_effect", v.minimum_detectable_effect}};
      }
      variants.push_back(entry);
    }
    out["metrics"][report.metric] = {{"baseline_seed_sd", report.baseline_seed_sd}, {"variants", variants}};
  }
  return out;
}

}  // namespace inkstone
