// The curves of a run's metrics.jsonl, by tag (train/metric_tags.h), against steps, tokens or wall time: what
// `inkstone plot` draws.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace inkstone {

enum class XAxis { steps, tokens, time };
XAxis x_axis_from_name(const std::string& name);  // steps | tokens | time; InputError otherwise
std::string x_axis_label(XAxis axis);

struct Series {
  std::string run;  // the run folder's name
  std::string tag;
  std::vector<double> x, y;  // non-finite values left out
};

// One series per tag present in RUN_DIR/metrics.jsonl (a tag absent from the run gives no series). x = tokens
// takes each line's tokens from the train line of its step or the nearest before it (tokens_seen); a run with no
// tokens_seen (an RL run) is an InputError. A malformed line is an InputError naming file and line.
std::vector<Series> read_run_series(const std::filesystem::path& run_dir, const std::vector<std::string>& tags,
                                    XAxis x);

// Every tag the run's lines hold, sorted.
std::vector<std::string> run_tags(const std::filesystem::path& run_dir);

// Exponential moving average with TensorBoard's debiasing (weight in [0, 1); 0: unchanged): the first points are
// not pulled towards zero.
std::vector<double> smooth(const std::vector<double>& y, double weight);

}  // namespace inkstone
