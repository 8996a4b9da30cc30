// Preemption (docs/reliability.md): SIGTERM, SIGINT, SIGUSR1 and SIGHUP (a closed terminal or ssh session) ask a
// training run to stop after its current step, with a checkpoint; a second signal ends the process at once, as the first would have without a handler.
#pragma once

#include "core/host_copy.h"
#include "train/distributed.h"

namespace inkstone {

void install_stop_signal_handlers();

// The first stop signal this process received; 0 when none.
int stop_signal_received();

// The ranks' agreement on a stop signal (the largest number any rank received), so that every rank stops after the
// same step. With several ranks each step casts a vote (a one-element all-reduce queued behind the step) and reads
// the previous step's, which has long arrived: no step waits for the host, and a signal stops the run one step
// later than it would alone. With one rank the process's own flag is read at once.
class StopVote {
 public:
  StopVote(Distributed& distributed, torch::Device device) : distributed_(distributed), device_(device) {}
  // Casts this step's vote; returns the outcome of the previous step's (0: nobody asked to stop).
  int cast();

 private:
  Distributed& distributed_;
  torch::Device device_;
  HostCopy previous_;
  bool voted_ = false;
};

}  // namespace inkstone
