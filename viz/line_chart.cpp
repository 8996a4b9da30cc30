#include "viz/line_chart.h"

#include <cairo-svg.h>
#include <cairo.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "core/atomic_file.h"
#include "core/errors.h"

namespace inkstone {
namespace {

// Tableau's ten colours: distinct for the usual handful of runs and readable on white.
constexpr std::array<std::array<double, 3>, 10> kColours = {{{0.12, 0.47, 0.71},
                                                              {1.00, 0.50, 0.05},
                                                              {0.17, 0.63, 0.17},
                                                              {0.84, 0.15, 0.16},
                                                              {0.58, 0.40, 0.74},
                                                              {0.55, 0.34, 0.29},
                                                              {0.89, 0.47, 0.76},
                                                              {0.50, 0.50, 0.50},
                                                              {0.74, 0.74, 0.13},
                                                              {0.09, 0.75, 0.81}}};
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
};

std::string tick_label(double v) {
  const double a = std::abs(v);
  if (a >= 1e9) return fmt::format("{:g}G", v / 1e9);
  if (a >= 1e6) return fmt::format("{:g}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:g}k", v / 1e3);
  return fmt::format("{:.4g}", v);
}

cairo_status_t append_to_string(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
}

void text_at(cairo_t* cr, const std::string& text, double x, double y, double align_x, double align_y) {
  cairo_text_extents_t extents;
  cairo_text_extents(cr, text.c_str(), &extents);
  cairo_move_to(cr, x - extents.x_bearing - align_x * extents.width, y - extents.y_bearing - align_y * extents.height);
  cairo_show_text(cr, text.c_str());
}

class PanelPainter {
 public:
  PanelPainter(cairo_t* cr, const ChartStyle& style, double left, double top, double width, double height)
      : cr_(cr), style_(style), left_(left + kMarginLeft), top_(top + kMarginTop),
        width_(width - kMarginLeft - kMarginRight), height_(height - kMarginTop - kMarginBottom) {}

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
    x_ = xs;
    y_ = ys;
    axes();
    int curves = 0;
    cairo_save(cr_);
    cairo_rectangle(cr_, left_, top_, width_, height_);
    cairo_clip(cr_);
    for (size_t i = 0; i < panel.series.size(); ++i) {
      const auto& colour = kColours[colour_of_run.at(panel.series[i].run) % kColours.size()];
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
      if (i == 0) cairo_move_to(cr_, px(x[i]), py(v));
      else cairo_line_to(cr_, px(x[i]), py(v));
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
    const auto& colour = kColours[i % kColours.size()];
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

std::vector<double> nice_ticks(double low, double high, int target) {
  std::vector<double> ticks;
  if (!(high > low) || target < 1) return ticks;
  const double rough = (high - low) / target;
  const int exponent = static_cast<int>(std::floor(std::log10(rough)));
  const double magnitude = std::pow(10.0, exponent);
  double factor = 10;
  for (double f : {1.0, 2.0, 5.0})
    if (rough <= f * magnitude) {
      factor = f;
      break;
    }
  // k * factor scaled by the power of ten last, dividing for negative exponents: 3 * 2 / 10 is 0.6 exactly, where
  // 3 * 0.2 is not.
  auto tick = [&](double k) {
    return exponent < 0 ? k * factor / std::pow(10.0, -exponent) : k * factor * magnitude;
  };
  const double step = factor * magnitude;
  for (double k = std::ceil(low / step - 1e-9); tick(k) <= high + step * 1e-9; k += 1) ticks.push_back(tick(k) + 0.0);
  return ticks;
}

ChartSummary draw_line_charts(const std::vector<ChartPanel>& panels, const ChartStyle& style,
                              const std::filesystem::path& out) {
  const std::string extension = out.extension().string();
  if (extension != ".png" && extension != ".svg")
    throw InputError(fmt::format("--out '{}': the figure is written as .png or .svg", out.string()));
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

  std::string bytes;
  cairo_surface_t* surface =
      extension == ".svg"
          ? cairo_svg_surface_create_for_stream(append_to_string, &bytes, summary.width, summary.height)
          : cairo_image_surface_create(CAIRO_FORMAT_ARGB32, summary.width, summary.height);
  cairo_t* cr = cairo_create(surface);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  legend(cr, runs, summary.width);
  const double panel_width = static_cast<double>(summary.width) / columns;
  const double panel_height = (summary.height - kLegendHeight) / rows;
  try {
    for (int i = 0; i < summary.panels; ++i) {
      PanelPainter painter(cr, style, (i % columns) * panel_width, kLegendHeight + (i / columns) * panel_height,
                           panel_width, panel_height);
      summary.series += painter.paint(panels[static_cast<size_t>(i)], colour_of_run);
    }
  } catch (...) {
    cairo_destroy(cr);
    cairo_surface_destroy(surface);
    throw;
  }
  cairo_destroy(cr);
  if (extension == ".png") cairo_surface_write_to_png_stream(surface, append_to_string, &bytes);
  cairo_surface_finish(surface);
  const cairo_status_t status = cairo_surface_status(surface);
  cairo_surface_destroy(surface);
  if (status != CAIRO_STATUS_SUCCESS)
    throw std::runtime_error(fmt::format("drawing {}: {}", out.string(), cairo_status_to_string(status)));
  write_file_atomic(out, bytes);
  return summary;
}

}  // namespace inkstone
