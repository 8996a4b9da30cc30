// A one-line progress display for long loops: done / total, rate, ETA and the caller's counters.
//
// On a terminal the line is redrawn in place with \r (at most 10 times a second); when the output is a file or
// a pipe (CI logs, nohup) a plain line is printed every `plain_every_s` seconds instead, so logs stay readable.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace inkstone {

// 1234567 -> "1.23M"; below 1000 the plain number.
std::string human_count(double value);
// 2800000 -> "2.80 MB" (powers of 1000, as disks and network rates are quoted).
std::string human_bytes(double bytes);
// 3725 -> "1:02:05", 65 -> "1:05".
std::string human_duration(double seconds);

class ProgressBar {
 public:
  // What `done` and `total` count: bytes are shown as MB and MB/s.
  enum class Unit { items, bytes };

  ProgressBar(std::string label, int64_t total, Unit unit, std::FILE* out = stdout, double plain_every_s = 10.0);

  // `counters` is appended to the line as it is, e.g. "12.3M tokens, 4.1M tokens/s".
  void update(int64_t done, const std::string& counters = "");
  // Prints the final state on its own line.
  void finish(int64_t done, const std::string& counters = "");
  double elapsed_s() const;

 private:
  std::string line(int64_t done, const std::string& counters) const;

  std::string label_;
  int64_t total_;
  Unit unit_;
  std::FILE* out_;
  bool terminal_;
  double redraw_every_s_;
  std::chrono::steady_clock::time_point start_;
  double last_print_s_ = -1e30;
};

}  // namespace inkstone
