// Learning-rate schedules: linear warmup, then cosine, warmup-stable-decay (WSD) or constant.
#pragma once
#include <cstdint>

#include "config/config.h"

namespace inkstone {

// The learning rate for 0-based optimizer step `step` of `total_steps`.
double learning_rate_at(const ScheduleConfig& schedule, double peak_lr, int64_t step, int64_t total_steps);

}  // namespace inkstone
