// Line charts of run metrics drawn with Cairo, as PNG or SVG (by the output's extension): a grid of panels, one
// per metric, each run one colour in every panel, a shared legend of run names.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "viz/run_series.h"

namespace inkstone {

struct ChartPanel {
  std::string title;  // the tag
  std::vector<Series> series;
};

struct ChartStyle {
  int width = 1200;  // pixels (PNG) or points (SVG) of the whole figure
  int height = 0;    // 0: 360 per row of panels
  int columns = 0;   // 0: up to 3
  std::string x_label = "step";
  bool log_y = false;
  double smoothing = 0;  // weight of smooth() in run_series.h; the raw curve is drawn faintly behind
};

struct ChartSummary {
  int panels = 0;
  int series = 0;  // curves drawn
  int width = 0, height = 0;
};

// Draws the panels into `out` (.png or .svg); InputError for another extension, a panel without data on a log
// scale, or a file that cannot be written. Runs are coloured by their order of first appearance.
ChartSummary draw_line_charts(const std::vector<ChartPanel>& panels, const ChartStyle& style,
                              const std::filesystem::path& out);

}  // namespace inkstone
