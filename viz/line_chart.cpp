#include "viz/line_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "core/errors.h"
#include "viz/figure.h"

namespace inkstone {
namespace {

constexpr double kLegendHeight = 34;
constexpr double kMarginLeft = 72, kMarginRight = 18, kMarginTop = 30, kMarginBottom = 46;

struct Range {
  double low = INFINITY, high = -INFINITY;
  void add(double v) {
    low = std::min(low, v);
    high = std::max(high, v);
  }
  bool empty() const { return !(low <= high); }
  void pad() {  // a flat curve still gets a visible span
    if (high - low < 1e-12 * std::max(1.0, std::abs(high))) {
      const double half = std::max(std::abs(high) * 0.05, 1e-6);
      low -= half;
      high += half;
    }
  }
  void margin(double fraction) {  // room so that extremes do not run along the frame
    const double extra = (high - low) * fraction;
    low -= extra;
    high += extra;
  }
};

class PanelPainter {
 public:
  PanelPainter(cairo_t* cr, const ChartStyle& style, double left, double top, double width, double height)
      : cr_(cr),
        style_(style),
        left_(left + kMarginLeft),
        top_(top + kMarginTop),
        width_(width - kMarginLeft - kMarginRight),
        height_(height - kMarginTop - kMarginBottom) {}

  // Returns the number of curves drawn.
  int paint(const ChartPanel& panel, const std::map<std::string, size_t>& colour_of_run) {
    Range xs, ys;
    std::vector<std::vector<double>> smoothed;
    for (const Series& s : panel.series) {
      smoothed.push_back(smooth(s.y, style_.smoothing));
      for (double x : s.x) xs.add(x);
      for (double y : s.y) ys.add(value_of(y, panel.title));
    }
    title(panel.title);
    if (xs.empty() || ys.empty()) return 0;
    xs.pad();
    ys.pad();
    ys.margin(0.04);
    x_ = xs;
    y_ = ys;
    axes();
    int curves = 0;
    cairo_save(cr_);
    cairo_rectangle(cr_, left_, top_, width_, height_);
    cairo_clip(cr_);
    for (size_t i = 0; i < panel.series.size(); ++i) {
      const auto& colour = palette_colour(colour_of_run.at(panel.series[i].run));
      if (style_.smoothing > 0) curve(panel.series[i].x, panel.series[i].y, colour, 0.25, 1.0);
      curve(panel.series[i].x, smoothed[i], colour, 1.0, 1.8);
      ++curves;
    }
    cairo_restore(cr_);
    return curves;
  }

 private:
  double value_of(double y, const std::string& tag) const {
    if (!style_.log_y) return y;
    if (y <= 0) throw InputError(fmt::format("--log-y: metric '{}' has a value {} <= 0", tag, y));
    return std::log10(y);
  }
  double px(double x) const { return left_ + (x - x_.low) / (x_.high - x_.low) * width_; }
  double py(double v) const { return top_ + height_ - (v - y_.low) / (y_.high - y_.low) * height_; }

  void title(const std::string& text) {
    cairo_set_source_rgb(cr_, 0.1, 0.1, 0.1);
    cairo_set_font_size(cr_, 14);
    text_at(cr_, text, left_ + width_ / 2, top_ - 8, 0.5, 1.0);
  }

  void axes() {
    cairo_set_font_size(cr_, 11);
    cairo_set_line_width(cr_, 1);
    for (double t : nice_ticks(x_.low, x_.high, 6)) {
      grid_line(px(t), top_, px(t), top_ + height_);
      cairo_set_source_rgb(cr_, 0.25, 0.25, 0.25);
      text_at(cr_, tick_label(t), px(t), top_ + height_ + 6, 0.5, 0.0);
    }
    for (double t : nice_ticks(y_.low, y_.high, 5)) {
      grid_line(left_, py(t), left_ + width_, py(t));
      cairo_set_source_rgb(cr_, 0.25, 0.25, 0.25);
      // On a log scale the ticks are exponents: label the value they stand for.
      text_at(cr_, tick_label(style_.log_y ? std::pow(10.0, t) : t), left_ - 6, py(t), 1.0, 0.5);
    }
    cairo_set_source_rgb(cr_, 0.3, 0.3, 0.3);
    cairo_rectangle(cr_, left_, top_, width_, height_);
    cairo_stroke(cr_);
    text_at(cr_, style_.x_label + (style_.log_y ? "   (log y)" : ""), left_ + width_ / 2, top_ + height_ + 24, 0.5,
            0.0);
  }

  void grid_line(double x0, double y0, double x1, double y1) {
    cairo_set_source_rgb(cr_, 0.9, 0.9, 0.9);
    cairo_move_to(cr_, x0, y0);
    cairo_line_to(cr_, x1, y1);
    cairo_stroke(cr_);
  }

  void curve(const std::vector<double>& x, const std::vector<double>& y, const std::array<double, 3>& colour,
             double alpha, double line_width) {
    cairo_set_source_rgba(cr_, colour[0], colour[1], colour[2], alpha);
    cairo_set_line_width(cr_, line_width);
    cairo_set_line_join(cr_, CAIRO_LINE_JOIN_ROUND);
    for (size_t i = 0; i < x.size(); ++i) {
      const double v = style_.log_y ? std::log10(y[i]) : y[i];
      if (i == 0)
        cairo_move_to(cr_, px(x[i]), py(v));
      else
        cairo_line_to(cr_, px(x[i]), py(v));
    }
    if (x.size() == 1) {  // a single point (one eval) as a dot
      cairo_arc(cr_, px(x[0]), py(style_.log_y ? std::log10(y[0]) : y[0]), 2.5, 0, 2 * M_PI);
      cairo_fill(cr_);
    }
    cairo_stroke(cr_);
  }

  cairo_t* cr_;
  const ChartStyle& style_;
  double left_, top_, width_, height_;
  Range x_, y_;
};

void legend(cairo_t* cr, const std::vector<std::string>& runs, double width) {
  cairo_set_font_size(cr, 13);
  double total = 0;
  std::vector<double> widths;
  for (const auto& run : runs) {
    cairo_text_extents_t extents;
    cairo_text_extents(cr, run.c_str(), &extents);
    widths.push_back(28 + extents.x_advance + 18);
    total += widths.back();
  }
  double x = std::max(8.0, (width - total) / 2);
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& colour = palette_colour(i);
    cairo_set_source_rgb(cr, colour[0], colour[1], colour[2]);
    cairo_set_line_width(cr, 3);
    cairo_move_to(cr, x, kLegendHeight / 2);
    cairo_line_to(cr, x + 22, kLegendHeight / 2);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    text_at(cr, runs[i], x + 28, kLegendHeight / 2, 0.0, 0.5);
    x += widths[i];
  }
}

}  // namespace

ChartSummary draw_line_charts(const std::vector<ChartPanel>& panels, const ChartStyle& style,
                              const std::filesystem::path& out) {
  check_figure_extension(out);
  if (panels.empty()) throw InputError("nothing to plot: no metric given");

  ChartSummary summary;
  summary.panels = static_cast<int>(panels.size());
  const int columns = style.columns > 0 ? style.columns : std::min<int>(3, summary.panels);
  const int rows = (summary.panels + columns - 1) / columns;
  summary.width = style.width;
  summary.height = style.height > 0 ? style.height : static_cast<int>(kLegendHeight) + 360 * rows;

  std::map<std::string, size_t> colour_of_run;
  std::vector<std::string> runs;
  for (const auto& panel : panels)
    for (const auto& s : panel.series)
      if (colour_of_run.emplace(s.run, runs.size()).second) runs.push_back(s.run);

  const double panel_width = static_cast<double>(summary.width) / columns;
  const double panel_height = (summary.height - kLegendHeight) / rows;
  write_figure(out, summary.width, summary.height, [&](cairo_t* cr) {
    legend(cr, runs, summary.width);
    for (int i = 0; i < summary.panels; ++i) {
      PanelPainter painter(cr, style, (i % columns) * panel_width, kLegendHeight + (i / columns) * panel_height,
                           panel_width, panel_height);
      summary.series += painter.paint(panels[static_cast<size_t>(i)], colour_of_run);
    }
  });
  return summary;
}

}  // namespace inkstone
