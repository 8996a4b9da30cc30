#include "train/spike_guard.h"

#include <cmath>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/json_error.h"

namespace inkstone {
namespace {

// (value - mean) / standard deviation of a full window (population form); 0 for a window not yet full or flat.
double z_score(const std::deque<double>& window, int64_t size, double value) {
  if (static_cast<int64_t>(window.size()) < size) return 0.0;
  double mean = 0;
  for (double v : window) mean += v;
  mean /= static_cast<double>(window.size());
  double variance = 0;
  for (double v : window) variance += (v - mean) * (v - mean);
  const double sd = std::sqrt(variance / static_cast<double>(window.size()));
  return sd > 0 ? (value - mean) / sd : 0.0;
}

void push(std::deque<double>& window, int64_t size, double value) {
  window.push_back(value);
  while (static_cast<int64_t>(window.size()) > size) window.pop_front();
}

}  // namespace

SpikeGuard::SpikeGuard(int64_t window, double loss_z, double grad_z)
    : window_(window), loss_limit_(loss_z), grad_limit_(grad_z) {}

SpikeVerdict SpikeGuard::check(double loss, double grad_norm) {
  SpikeVerdict verdict;
  if (!enabled()) return verdict;
  verdict.loss_z = z_score(losses_, window_, loss);
  verdict.grad_z = z_score(grad_norms_, window_, grad_norm);
  verdict.skip =
      (loss_limit_ > 0 && verdict.loss_z > loss_limit_) || (grad_limit_ > 0 && verdict.grad_z > grad_limit_);
  push(losses_, window_, loss);
  push(grad_norms_, window_, grad_norm);
  return verdict;
}

nlohmann::json SpikeGuard::state() const {
  return {{"losses", std::vector<double>(losses_.begin(), losses_.end())},
          {"grad_norms", std::vector<double>(grad_norms_.begin(), grad_norms_.end())}};
}

void SpikeGuard::restore(const nlohmann::json& state, const std::string& origin) {
  try {
    const auto losses = state.at("losses").get<std::vector<double>>();
    const auto grad_norms = state.at("grad_norms").get<std::vector<double>>();
    losses_.clear();
    grad_norms_.clear();
    for (double v : losses) push(losses_, window_, v);
    for (double v : grad_norms) push(grad_norms_, window_, v);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: spike_guard state: {}", origin, describe_json_error(e)));
  }
}

}  // namespace inkstone
