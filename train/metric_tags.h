// Names of the metrics in a run's lines as TensorBoard and `inkstone plot` show them: "<split>/<metric>"
// (train/loss, val/loss, eval/pass@1), "system/<metric>" for memory, speed and time, "<event>/<metric>" for an
// event line (skipped_spike/loss_z). docs/observability.md lists them.
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace inkstone {

// The tag of `key` on metrics line `line`; empty for the keys that place a line rather than measure something
// (step, split, event, samples) and for values that are not numbers.
std::string metric_tag(const nlohmann::json& line, const std::string& key);

// The lines of RUN_DIR/metrics.jsonl (train/metrics_log.h); a missing file or a line that is not a JSON object with
// an integer step is an InputError naming the file (and line).
std::vector<nlohmann::json> read_metrics_lines(const std::filesystem::path& run_dir);

// Every (tag, value) a line holds, in the line's key order.
std::vector<std::pair<std::string, double>> tagged_values(const nlohmann::json& line);

}  // namespace inkstone
