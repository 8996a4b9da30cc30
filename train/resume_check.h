// What a resumed run may change: the config it resumes with against the config its checkpoint was trained with
// (docs/reliability.md, "Resume checks what it resumes").
#pragma once
#include <string>
#include <vector>

#include "config/config.h"

namespace inkstone {

struct SettingChange {
  std::string key;  // section.key
  std::string before;
  std::string after;
};

// A change to what the run is (objective, model, tokenizer, data, batch, optimizer, schedule shape, seeds, chat
// format, RL task and rewards) is an InputError naming the key, both values and `origin`. The changes a user
// legitimately makes to a running campaign (train.steps, which also moves the schedule's end; gradient
// accumulation, the same batch in other micro-batches; log, eval and checkpoint cadence; retention; threads and
// device; time-outs; sampling and RL evaluation settings) are returned, in schema order, for the run to log.
std::vector<SettingChange> check_resume_config(const Config& saved, const Config& resumed, const std::string& origin);

// "resume: train.steps 100 -> 200" per change, for the run header.
void print_setting_changes(const std::vector<SettingChange>& changes);

}  // namespace inkstone
