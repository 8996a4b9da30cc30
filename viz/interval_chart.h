// A sweep's result as a figure: per metric a panel, per variant a row with every seed's value (small dots), the
// mean (a large dot) and its 95% interval (a whisker), a dashed line at the baseline's mean; variants beyond the
// noise floor in colour, the others grey. PNG or SVG (viz/figure.h).
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace inkstone {

struct IntervalRow {
  std::string label;
  std::vector<double> values;  // one per seed
  double mean = 0, low = 0, high = 0;
  bool baseline = false;
  bool beyond_noise = false;
};

struct IntervalPanel {
  std::string title;
  std::vector<IntervalRow> rows;
};

struct IntervalSummary {
  int panels = 0, rows = 0, points = 0;  // points: seed values drawn
  int width = 0, height = 0;
};

IntervalSummary draw_interval_charts(const std::vector<IntervalPanel>& panels, const std::filesystem::path& out,
                                     int width = 1000);

}  // namespace inkstone
