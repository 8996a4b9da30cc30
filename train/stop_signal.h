// Preemption (docs/reliability.md): SIGTERM, SIGINT and SIGUSR1 ask a training run to stop after its current
// step, with a checkpoint; a second signal ends the process at once, as the first would have without a handler.
#pragma once

#include "train/distributed.h"

namespace inkstone {

void install_stop_signal_handlers();

// The first stop signal this process received; 0 when none.
int stop_signal_received();

// The stop signal any rank received (the largest number), so that every rank stops after the same step. One
// one-element all-reduce when the run has several ranks; none otherwise.
int stop_signal_on_any_rank(Distributed& distributed, torch::Device device);

}  // namespace inkstone
