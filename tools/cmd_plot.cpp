// `inkstone plot RUN [RUN ...] (--metric TAG ... | --rl) --out FIG.png|svg [--x steps|tokens|time] [--smooth W]
//  [--log-y] [--columns C] [--width PX]` or `inkstone plot RUN ... --list`: the runs' metrics on shared axes, one
// panel per metric (docs/observability.md, "Plots").
#include <fmt/format.h>

#include "core/errors.h"
#include "tools/commands.h"
#include "viz/line_chart.h"
#include "viz/run_series.h"

namespace inkstone::cli {
namespace {

struct PlotOptions {
  std::vector<std::string> runs;
  std::vector<std::string> metrics;
  bool rl = false;
  bool list = false;
  std::string out;
  std::string x = "steps";
  double smoothing = 0;
  bool log_y = false;
  int columns = 0;
  int width = 1200;
};

// The RL panel: reward and accuracy of the rollouts, held-out pass@1 and the largest pass@k evaluated, policy
// entropy, KL to the reference, GFlowRL's saturated flow gaps per side, response length.
std::vector<std::string> rl_metrics(const std::vector<std::string>& runs) {
  std::vector<std::string> metrics = {"train/reward_mean", "train/accuracy", "eval/pass@1"};
  int largest_k = 1;
  for (const auto& run : runs)
    for (const auto& tag : run_tags(run))
      if (tag.rfind("eval/pass@", 0) == 0 && tag.size() > 10 &&
          tag.find_first_not_of("0123456789", 10) == std::string::npos)
        largest_k = std::max(largest_k, std::stoi(tag.substr(10)));
  if (largest_k > 1) metrics.push_back(fmt::format("eval/pass@{}", largest_k));
  for (const char* tag : {"train/entropy", "train/kl_old_ref_k3", "train/saturated_push_up",
                          "train/saturated_push_down", "train/response_length_mean"})
    metrics.emplace_back(tag);
  return metrics;
}

int list_tags(const std::vector<std::string>& runs) {
  for (const auto& run : runs) {
    fmt::print("{}:\n", run);
    for (const auto& tag : run_tags(run)) fmt::print("  {}\n", tag);
  }
  return 0;
}

int plot(const PlotOptions& o) {
  if (o.metrics.empty() && !o.rl) throw InputError("plot needs --metric TAG (repeatable) or --rl");
  const XAxis x = x_axis_from_name(o.x);
  std::vector<std::string> metrics = o.metrics;
  if (o.rl)
    for (const auto& tag : rl_metrics(o.runs)) metrics.push_back(tag);

  std::vector<ChartPanel> panels;
  for (const auto& metric : metrics) panels.push_back({metric, {}});
  for (const auto& run : o.runs)
    for (Series& s : read_run_series(run, metrics, x))
      for (auto& panel : panels)
        if (panel.title == s.tag) panel.series.push_back(s);
  // A metric no run logged is named and left out (GRPO logs no flow gaps); none at all is an error.
  std::vector<ChartPanel> drawn;
  for (auto& panel : panels) {
    if (!panel.series.empty())
      drawn.push_back(std::move(panel));
    else
      fmt::print(stderr, "plot: no run logged '{}'; left out\n", panel.title);
  }
  if (drawn.empty()) throw InputError("plot: none of the metrics is in these runs (tags: `inkstone plot --list RUN`)");

  ChartStyle style;
  style.width = o.width;
  style.columns = o.columns;
  style.x_label = x_axis_label(x);
  style.log_y = o.log_y;
  style.smoothing = o.smoothing;
  const ChartSummary summary = draw_line_charts(drawn, style, o.out);
  fmt::print("wrote {}: {} panels, {} curves, {}x{}\n", o.out, summary.panels, summary.series, summary.width,
             summary.height);
  return 0;
}

}  // namespace

void add_plot_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<PlotOptions>();
  auto* cmd = app.add_subcommand("plot", "Draw runs' metrics on shared axes (PNG or SVG)");
  cmd->add_option("runs", o->runs, "Run folders (their metrics.jsonl)")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--metric", o->metrics, "A metric tag, e.g. train/loss, val/loss, eval/pass@1 (repeatable)");
  cmd->add_flag("--rl", o->rl,
                "The RL panel: reward, accuracy, pass@1 and pass@k, entropy, KL, flow-gap "
                "saturation per side, response length");
  cmd->add_flag("--list", o->list, "Print the metric tags of each run instead of drawing");
  cmd->add_option("--out", o->out, "Figure file: .png or .svg");
  cmd->add_option("--x", o->x, "x axis: steps | tokens | time")->check(CLI::IsMember({"steps", "tokens", "time"}));
  cmd->add_option("--smooth", o->smoothing,
                  "Exponential smoothing weight in [0, 1) (TensorBoard's); raw curve "
                  "drawn faintly behind")
      ->check(CLI::Range(0.0, 0.999));
  cmd->add_flag("--log-y", o->log_y, "Logarithmic y axis");
  cmd->add_option("--columns", o->columns, "Panels per row (default: up to 3)")->check(CLI::Range(1, 12));
  cmd->add_option("--width", o->width, "Figure width in pixels (PNG) or points (SVG)")->check(CLI::Range(200, 10000));
  cmd->callback([o, &action] {
    action = [o] {
      if (o->list) return list_tags(o->runs);
      if (o->out.empty()) throw InputError("plot needs --out FIG.png or FIG.svg");
      return plot(*o);
    };
  });
}

}  // namespace inkstone::cli
