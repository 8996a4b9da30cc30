#include "viz/interval_chart.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/errors.h"
#include "viz/figure.h"

namespace inkstone {
namespace {

constexpr double kRowHeight = 40, kTitleHeight = 34, kAxisHeight = 40, kLabelWidth = 150, kRightMargin = 30;

double panel_height(const IntervalPanel& panel) {
  return kTitleHeight + kRowHeight * static_cast<double>(panel.rows.size()) + kAxisHeight;
}

void paint_panel(cairo_t* cr, const IntervalPanel& panel, double top, double width, IntervalSummary& summary) {
  double low = INFINITY, high = -INFINITY;
  double baseline_mean = NAN;
  for (const auto& row : panel.rows) {
    for (double v : row.values) low = std::min(low, v), high = std::max(high, v);
    low = std::min(low, row.low), high = std::max(high, row.high);
    if (row.baseline) baseline_mean = row.mean;
  }
  if (!(high > low)) low -= 0.5, high += 0.5;
  const double extra = (high - low) * 0.05;
  low -= extra, high += extra;
  const double left = kLabelWidth, plot_width = width - kLabelWidth - kRightMargin;
  const double rows_top = top + kTitleHeight, rows_bottom = rows_top + kRowHeight * panel.rows.size();
  auto px = [&](double v) { return left + (v - low) / (high - low) * plot_width; };

  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  cairo_set_font_size(cr, 14);
  text_at(cr, panel.title, left + plot_width / 2, top + 10, 0.5, 0.0);
  cairo_set_font_size(cr, 11);
  cairo_set_line_width(cr, 1);
  for (double t : nice_ticks(low, high, 6)) {
    cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
    cairo_move_to(cr, px(t), rows_top);
    cairo_line_to(cr, px(t), rows_bottom);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.25, 0.25, 0.25);
    text_at(cr, tick_label(t), px(t), rows_bottom + 6, 0.5, 0.0);
  }
  if (std::isfinite(baseline_mean)) {
    const double dash[] = {4.0, 3.0};
    cairo_set_dash(cr, dash, 2, 0);
    cairo_set_source_rgb(cr, 0.4, 0.4, 0.4);
    cairo_move_to(cr, px(baseline_mean), rows_top);
    cairo_line_to(cr, px(baseline_mean), rows_bottom);
    cairo_stroke(cr);
    cairo_set_dash(cr, nullptr, 0, 0);
  }
  for (size_t r = 0; r < panel.rows.size(); ++r) {
    const IntervalRow& row = panel.rows[r];
    const double y = rows_top + kRowHeight * (r + 0.5);
    // The baseline in black, a variant beyond the noise floor in the first palette colour, the others grey.
    static const std::array<double, 3> kBlack = {0.1, 0.1, 0.1}, kGrey = {0.6, 0.6, 0.6};
    const auto& colour = row.baseline ? kBlack : row.beyond_noise ? palette_colour(0) : kGrey;
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    cairo_set_font_size(cr, 12);
    text_at(cr, row.label + (row.beyond_noise ? " *" : ""), left - 10, y, 1.0, 0.5);
    cairo_set_source_rgb(cr, colour[0], colour[1], colour[2]);
    cairo_set_line_width(cr, 2);
    cairo_move_to(cr, px(row.low), y);
    cairo_line_to(cr, px(row.high), y);
    for (double end : {row.low, row.high}) {
      cairo_move_to(cr, px(end), y - 6);
      cairo_line_to(cr, px(end), y + 6);
    }
    cairo_stroke(cr);
    cairo_arc(cr, px(row.mean), y, 5, 0, 2 * M_PI);
    cairo_fill(cr);
    cairo_set_line_width(cr, 1);
    for (double v : row.values) {
      cairo_arc(cr, px(v), y - 11, 2.5, 0, 2 * M_PI);
      cairo_stroke(cr);
      ++summary.points;
    }
    ++summary.rows;
  }
  cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
  cairo_rectangle(cr, left, rows_top, plot_width, rows_bottom - rows_top);
  cairo_stroke(cr);
}

}  // namespace

IntervalSummary draw_interval_charts(const std::vector<IntervalPanel>& panels, const std::filesystem::path& out,
                                     int width) {
  check_figure_extension(out);
  if (panels.empty()) throw InputError("nothing to draw: no metric");
  IntervalSummary summary;
  summary.panels = static_cast<int>(panels.size());
  summary.width = width;
  double height = 0;
  for (const auto& panel : panels) height += panel_height(panel);
  summary.height = static_cast<int>(std::ceil(height));
  write_figure(out, summary.width, summary.height, [&](cairo_t* cr) {
    double top = 0;
    for (const auto& panel : panels) {
      paint_panel(cr, panel, top, width, summary);
      top += panel_height(panel);
    }
  });
  return summary;
}

}  // namespace inkstone
