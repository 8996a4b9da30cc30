// Warmup: lr = peak * (step + 1) / warmup, so the first step already moves.
// Cosine (SGDR, Loshchilov & Hutter 2017): min + (peak - min) * (1 + cos(pi * progress)) / 2 over the rest.
// WSD (Hu et al. 2024, MiniCPM): peak until the last decay_fraction of steps, then linear to min.
#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace inkstone {

double learning_rate_at(const ScheduleConfig& s, double peak_lr, int64_t step, int64_t total_steps) {
  if (step < s.warmup_steps) return peak_lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  const double min_lr = peak_lr * s.min_lr_ratio;
  if (s.kind == LrScheduleKind::constant) return peak_lr;
  if (s.kind == LrScheduleKind::cosine) {
    const double span = std::max<int64_t>(1, total_steps - s.warmup_steps - 1);
    const double progress = std::min(1.0, static_cast<double>(step - s.warmup_steps) / span);
    return min_lr + (peak_lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  // wsd
  const int64_t decay_steps = static_cast<int64_t>(std::llround(s.decay_fraction * total_steps));
  const int64_t decay_start = std::max(s.warmup_steps, total_steps - decay_steps);
  if (step < decay_start) return peak_lr;
  const double span = std::max<int64_t>(1, total_steps - decay_start - 1);
  const double progress = std::min(1.0, static_cast<double>(step - decay_start) / span);
  return peak_lr + (min_lr - peak_lr) * progress;
}

}  // namespace inkstone
