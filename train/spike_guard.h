// Loss-spike guard (docs/training.md, "The update"): an update whose loss or gradient norm is an upward z-score
// outlier of the previous `window` updates is skipped, as llm.c's -sl / -sg do. Every value joins the window,
// skipped or not, so a lasting change of level (a learning-rate phase) is absorbed within one window instead of
// being skipped forever.
#pragma once
#include <cstdint>
#include <deque>
#include <string>

#include <nlohmann/json.hpp>

namespace inkstone {

struct SpikeVerdict {
  double loss_z = 0;  // of this update's loss against the window (0 until the window is full)
  double grad_z = 0;
  bool skip = false;
};

class SpikeGuard {
 public:
  // loss_z / grad_z: the z-score above which an update is skipped (0: that check is off).
  SpikeGuard(int64_t window, double loss_z, double grad_z);

  bool enabled() const { return window_ > 0 && (loss_limit_ > 0 || grad_limit_ > 0); }
  // Judges an update against the window, then adds its values to the window.
  SpikeVerdict check(double loss, double grad_norm);

  // The window, for checkpoints: a resumed run judges its updates as the uninterrupted one would.
  nlohmann::json state() const;
  // An InputError naming `origin` when the state is malformed.
  void restore(const nlohmann::json& state, const std::string& origin);

 private:
  int64_t window_;
  double loss_limit_, grad_limit_;
  std::deque<double> losses_, grad_norms_;
};

}  // namespace inkstone
