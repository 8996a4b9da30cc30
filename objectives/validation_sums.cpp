#include "objectives/validation_sums.h"

#include <cmath>

namespace inkstone {

std::map<std::string, double> validation_metrics(const ValidationSums& totals, double bytes_per_token) {
  std::map<std::string, double> metrics;
  for (const auto& [name, sum] : totals.sums) metrics[name] = totals.units > 0 ? sum / totals.units : 0.0;
  const double nats = metrics["loss_nats"];
  metrics["perplexity"] = std::exp(nats);
  metrics["bits_per_byte"] = nats / std::log(2.0) / bytes_per_token;
  metrics["tokens"] = totals.units;
  return metrics;
}

}  // namespace inkstone
