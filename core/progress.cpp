#include "core/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace inkstone {
namespace {

constexpr int kBarWidth = 24;
constexpr double kTerminalRedrawS = 0.1;

}  // namespace

std::string human_count(double value) {
  const char* suffixes[] = {"", "k", "M", "G", "T"};
  int i = 0;
  while (std::abs(value) >= 1000 && i < 4) {
    value /= 1000;
    ++i;
  }
  return i == 0 ? fmt::format("{:.0f}", value) : fmt::format("{:.{}f}{}", value, value < 10 ? 2 : 1, suffixes[i]);
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int i = 0;
  while (bytes >= 1000 && i < 4) {
    bytes /= 1000;
    ++i;
  }
  return i == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.2f} {}", bytes, units[i]);
}

std::string human_duration(double seconds) {
  const auto total = static_cast<int64_t>(std::max(0.0, std::round(seconds)));
  const int64_t hours = total / 3600, minutes = total / 60 % 60, secs = total % 60;
  return hours > 0 ? fmt::format("{}:{:02d}:{:02d}", hours, minutes, secs) : fmt::format("{}:{:02d}", minutes, secs);
}

ProgressBar::ProgressBar(std::string label, int64_t total, Unit unit, std::FILE* out, double plain_every_s)
    : label_(std::move(label)),
      total_(total),
      unit_(unit),
      out_(out),
      terminal_(::isatty(::fileno(out)) == 1),
      redraw_every_s_(terminal_ ? kTerminalRedrawS : plain_every_s),
      start_(std::chrono::steady_clock::now()) {}

double ProgressBar::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string ProgressBar::line(int64_t done, const std::string& counters) const {
  const double elapsed = elapsed_s();
  const double fraction = total_ > 0 ? std::clamp(static_cast<double>(done) / total_, 0.0, 1.0) : 0.0;
  const double rate = elapsed > 0 ? done / elapsed : 0.0;
  const bool bytes = unit_ == Unit::bytes;
  std::string text = label_;
  if (terminal_) {
    const int filled = static_cast<int>(fraction * kBarWidth);
    text += fmt::format(" [{}{}]", std::string(filled, '#'), std::string(kBarWidth - filled, '.'));
  }
  text += fmt::format(" {:3.0f}% {}/{} {}/s", 100 * fraction, bytes ? human_bytes(done) : human_count(done),
                      bytes ? human_bytes(total_) : human_count(total_), bytes ? human_bytes(rate) : human_count(rate));
  if (rate > 0 && done < total_) text += " ETA " + human_duration((total_ - done) / rate);
  if (!counters.empty()) text += " | " + counters;
  return text;
}

void ProgressBar::update(int64_t done, const std::string& counters) {
  const double now = elapsed_s();
  if (now - last_print_s_ < redraw_every_s_) return;
  last_print_s_ = now;
  // \x1b[K clears what a longer previous line left behind.
  if (terminal_) {
    fmt::print(out_, "\r{}\x1b[K", line(done, counters));
  } else {
    fmt::print(out_, "{}\n", line(done, counters));
  }
  std::fflush(out_);
}

void ProgressBar::finish(int64_t done, const std::string& counters) {
  fmt::print(out_, terminal_ ? "\r{}\x1b[K\n" : "{}\n", line(done, counters));
  std::fflush(out_);
}

}  // namespace inkstone
