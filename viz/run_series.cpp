#include "viz/run_series.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/errors.h"
#include "train/metric_tags.h"

namespace inkstone {

XAxis x_axis_from_name(const std::string& name) {
  if (name == "steps") return XAxis::steps;
  if (name == "tokens") return XAxis::tokens;
  if (name == "time") return XAxis::time;
  throw InputError(fmt::format("--x '{}': expected steps, tokens or time", name));
}

std::string x_axis_label(XAxis axis) {
  switch (axis) {
    case XAxis::steps:
      return "step";
    case XAxis::tokens:
      return "tokens";
    case XAxis::time:
      return "wall time (s)";
  }
  return "";
}

std::vector<std::string> run_tags(const std::filesystem::path& run_dir) {
  std::set<std::string> tags;
  for (const auto& line : read_metrics_lines(run_dir))
    for (const auto& [tag, value] : tagged_values(line)) tags.insert(tag);
  return {tags.begin(), tags.end()};
}

std::vector<Series> read_run_series(const std::filesystem::path& run_dir, const std::vector<std::string>& tags,
                                    XAxis x) {
  const std::filesystem::path path = run_dir / "metrics.jsonl";
  const std::vector<nlohmann::json> lines = read_metrics_lines(run_dir);
  std::map<int64_t, double> tokens_at_step;  // from the train lines
  for (const auto& line : lines)
    if (line.contains("tokens_seen") && line["tokens_seen"].is_number())
      tokens_at_step[line["step"].get<int64_t>()] = line["tokens_seen"].get<double>();
  if (x == XAxis::tokens && tokens_at_step.empty())
    throw InputError(
        fmt::format("{}: no tokens_seen in its lines (an RL run?); plot it against --x steps or time", path.string()));

  auto x_of = [&](const nlohmann::json& line, double& out) {
    const int64_t step = line["step"].get<int64_t>();
    if (x == XAxis::steps) {
      out = static_cast<double>(step);
      return true;
    }
    if (x == XAxis::time) {
      if (!line.contains("elapsed_s") || !line["elapsed_s"].is_number()) return false;
      out = line["elapsed_s"].get<double>();
      return true;
    }
    auto at = tokens_at_step.upper_bound(step);
    if (at == tokens_at_step.begin()) return step == 0 ? (out = 0, true) : false;
    out = std::prev(at)->second;
    return true;
  };

  std::vector<Series> out;
  std::filesystem::path folder = std::filesystem::absolute(run_dir).lexically_normal();
  if (folder.filename().empty()) folder = folder.parent_path();  // written with a trailing slash
  const std::string run = folder.filename().string();
  for (const auto& tag : tags) {
    Series series{run.empty() ? run_dir.string() : run, tag, {}, {}};
    for (const auto& line : lines)
      for (const auto& [line_tag, value] : tagged_values(line)) {
        double position = 0;
        if (line_tag == tag && std::isfinite(value) && x_of(line, position)) {
          series.x.push_back(position);
          series.y.push_back(value);
        }
      }
    if (!series.x.empty()) out.push_back(std::move(series));
  }
  return out;
}

std::vector<double> smooth(const std::vector<double>& y, double weight) {
  if (weight <= 0) return y;
  std::vector<double> out;
  double average = 0, debias = 1;
  for (double value : y) {
    average = weight * average + (1 - weight) * value;
    debias *= weight;
    out.push_back(average / (1 - debias));
  }
  return out;
}

}  // namespace inkstone
