#include "viz/figure.h"

#include <cairo-svg.h>
#include <fmt/format.h>

#include <cmath>

#include "core/atomic_file.h"
#include "core/errors.h"

namespace inkstone {
namespace {

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

cairo_status_t append_to_string(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
}

}  // namespace

const std::array<double, 3>& palette_colour(size_t index) { return kColours[index % kColours.size()]; }

void check_figure_extension(const std::filesystem::path& out) {
  const std::string extension = out.extension().string();
  if (extension != ".png" && extension != ".svg")
    throw InputError(fmt::format("--out '{}': the figure is written as .png or .svg", out.string()));
}

void write_figure(const std::filesystem::path& out, int width, int height, const std::function<void(cairo_t*)>& paint) {
  check_figure_extension(out);
  const bool svg = out.extension() == ".svg";
  std::string bytes;
  cairo_surface_t* surface = svg ? cairo_svg_surface_create_for_stream(append_to_string, &bytes, width, height)
                                 : cairo_image_surface_create(CAIRO_FORMAT_ARGB32, width, height);
  cairo_t* cr = cairo_create(surface);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  try {
    paint(cr);
  } catch (...) {
    cairo_destroy(cr);
    cairo_surface_destroy(surface);
    throw;
  }
  cairo_destroy(cr);
  if (!svg) cairo_surface_write_to_png_stream(surface, append_to_string, &bytes);
  cairo_surface_finish(surface);
  const cairo_status_t status = cairo_surface_status(surface);
  cairo_surface_destroy(surface);
  if (status != CAIRO_STATUS_SUCCESS)
    throw std::runtime_error(fmt::format("drawing {}: {}", out.string(), cairo_status_to_string(status)));
  write_file_atomic(out, bytes);
}

void text_at(cairo_t* cr, const std::string& text, double x, double y, double align_x, double align_y) {
  cairo_text_extents_t extents;
  cairo_text_extents(cr, text.c_str(), &extents);
  cairo_move_to(cr, x - extents.x_bearing - align_x * extents.width, y - extents.y_bearing - align_y * extents.height);
  cairo_show_text(cr, text.c_str());
}

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
  auto tick = [&](double k) { return exponent < 0 ? k * factor / std::pow(10.0, -exponent) : k * factor * magnitude; };
  const double step = factor * magnitude;
  for (double k = std::ceil(low / step - 1e-9); tick(k) <= high + step * 1e-9; k += 1) ticks.push_back(tick(k) + 0.0);
  return ticks;
}

std::string tick_label(double value) {
  const double a = std::abs(value);
  if (a >= 1e9) return fmt::format("{:g}G", value / 1e9);
  if (a >= 1e6) return fmt::format("{:g}M", value / 1e6);
  if (a >= 1e4) return fmt::format("{:g}k", value / 1e3);
  return fmt::format("{:.4g}", value);
}

}  // namespace inkstone
