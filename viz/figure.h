// What every inkstone figure shares (viz/): a Cairo surface written as PNG or SVG by the file's extension, atomically;
// the palette; text placement; tick positions and labels.
#pragma once
#include <cairo.h>

#include <array>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace inkstone {

// Tableau's ten colours: distinct for the usual handful of runs and readable on white.
const std::array<double, 3>& palette_colour(size_t index);

// Draws with `paint` on a white width x height canvas and writes it to `out` (.png or .svg; InputError for another
// extension) through a temporary file. An exception from `paint` leaves no file.
void write_figure(const std::filesystem::path& out, int width, int height, const std::function<void(cairo_t*)>& paint);

// Checks the extension before any work is done.
void check_figure_extension(const std::filesystem::path& out);

// `text` placed so that (x, y) is at fraction (align_x, align_y) of its extents (0, 0: top left; 0.5, 0.5: centre).
void text_at(cairo_t* cr, const std::string& text, double x, double y, double align_x, double align_y);

// Tick positions covering [low, high] at a 1-2-5 step (a linear axis), about `target` of them.
std::vector<double> nice_ticks(double low, double high, int target);
// A tick value in few characters: 1.5k, 20M, 0.0012.
std::string tick_label(double value);

}  // namespace inkstone
