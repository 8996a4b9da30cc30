#include "train/metric_tags.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <string_view>

#include "core/errors.h"
#include "core/input_file.h"
#include "core/string_suffix.h"

namespace inkstone {
namespace {

constexpr std::array<std::string_view, 4> kPlacingKeys = {"step", "split", "event", "samples"};
constexpr std::array<std::string_view, 7> kSystemKeys = {
    "peak_rss_mib", "cpu_max_allocated_mib", "cuda_max_allocated_mib", "cuda_reserved_mib", "elapsed_s", "tflops_per_s",
    "mfu"};

// metrics.jsonl writes a non-finite number as text ("nan", "inf", "-inf"; train/metrics_log.h).
bool numeric(const nlohmann::json& value, double& out) {
  if (value.is_number()) {
    out = value.get<double>();
    return true;
  }
  if (!value.is_string()) return false;
  const auto& text = value.get_ref<const std::string&>();
  if (text == "nan")
    out = std::nan("");
  else if (text == "inf")
    out = INFINITY;
  else if (text == "-inf")
    out = -INFINITY;
  else
    return false;
  return true;
}

}  // namespace

std::string metric_tag(const nlohmann::json& line, const std::string& key) {
  if (std::find(kPlacingKeys.begin(), kPlacingKeys.end(), key) != kPlacingKeys.end()) return "";
  double value = 0;
  if (!line.contains(key) || !numeric(line.at(key), value)) return "";
  if (line.contains("event") && line["event"].is_string()) return line["event"].get<std::string>() + "/" + key;
  if (std::find(kSystemKeys.begin(), kSystemKeys.end(), key) != kSystemKeys.end() || ends_with(key, "_per_s"))
    return "system/" + key;
  const std::string split =
      line.contains("split") && line["split"].is_string() ? line["split"].get<std::string>() : "train";
  return split + "/" + key;
}

std::vector<nlohmann::json> read_metrics_lines(const std::filesystem::path& run_dir) {
  const std::filesystem::path path = run_dir / "metrics.jsonl";
  std::ifstream in = open_input_file(path.string(), "metrics file");
  std::vector<nlohmann::json> lines;
  int64_t number = 0;
  for (std::string text; std::getline(in, text);) {
    ++number;
    if (text.empty()) continue;
    nlohmann::json line = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!line.is_object() || !line.contains("step") || !line["step"].is_number_integer())
      throw InputError(
          fmt::format("{}:{}: not a metrics record (a JSON object with an integer step)", path.string(), number));
    lines.push_back(std::move(line));
  }
  return lines;
}

std::vector<std::pair<std::string, double>> tagged_values(const nlohmann::json& line) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [key, value] : line.items()) {
    const std::string tag = metric_tag(line, key);
    double number = 0;
    if (!tag.empty() && numeric(value, number)) out.emplace_back(tag, number);
  }
  return out;
}

}  // namespace inkstone
