#include "train/stop_signal.h"

#include <csignal>

namespace inkstone {
namespace {

volatile std::sig_atomic_t received = 0;

void on_stop_signal(int number) {
  if (received != 0) {
    // The second signal: the default action (terminate with this signal), now.
    std::signal(number, SIG_DFL);
    std::raise(number);
    return;
  }
  received = number;
}

}  // namespace

void install_stop_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // reads and writes in flight finish; the loop looks at the flag between steps
  for (int number : {SIGTERM, SIGINT, SIGUSR1}) sigaction(number, &action, nullptr);
}

int stop_signal_received() { return static_cast<int>(received); }

int stop_signal_on_any_rank(Distributed& distributed, torch::Device device) {
  if (!distributed.active()) return stop_signal_received();
  auto flag = torch::full({1}, stop_signal_received(), torch::TensorOptions().dtype(torch::kInt).device(device));
  distributed.all_reduce({flag}, ReduceOp::max);
  return flag.item<int>();
}

}  // namespace inkstone
