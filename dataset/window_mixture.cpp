#include "dataset/window_mixture.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "core/counter_hash.h"

namespace inkstone {

WindowMixture::WindowMixture(std::vector<MixtureSource> sources) : sources_(std::move(sources)) {
  if (sources_.empty()) throw std::invalid_argument("WindowMixture: no sources");
  double total = 0;
  for (const auto& source : sources_) {
    if (!(source.weight > 0) || !std::isfinite(source.weight))
      throw std::invalid_argument(fmt::format("WindowMixture: source '{}' has weight {}", source.name, source.weight));
    const auto& o = source.train->options();
    const auto& first = options();
    if (o.window_len != first.window_len || o.mode != first.mode || o.seed != first.seed || o.rank != first.rank)
      throw std::invalid_argument("WindowMixture: sources opened with different options");
    total += source.weight;
    any_loss_mask_ = any_loss_mask_ || source.train->has_loss_mask();
  }
  double sum = 0;
  for (const auto& source : sources_) cumulative_.push_back((sum += source.weight) / total);
  cumulative_.back() = 1.0;
}

size_t WindowMixture::source_of(int64_t step, int64_t global_row) const {
  // The draw's own key (a fourth word), independent of the window each source then draws for the same row.
  const uint64_t hash =
      counter_hash({options().seed, static_cast<uint64_t>(step), static_cast<uint64_t>(global_row), 1});
  const double u = static_cast<double>(hash >> 11) * 0x1.0p-53;
  return static_cast<size_t>(std::upper_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin());
}

TokenBatch WindowMixture::train_batch(int64_t step, int64_t batch_size) const {
  if (step < 0 || batch_size < 1)
    throw std::invalid_argument(fmt::format("train_batch(step {}, batch_size {})", step, batch_size));
  TokenBatch batch = sources_.front().train->empty_batch(batch_size);
  if (any_loss_mask_) {
    batch.trained.assign(batch.real.size(), 0);
    batch.conversations.assign(static_cast<size_t>(batch_size), 0);
  }
  for (int64_t row = 0; row < batch_size; ++row) {
    const int64_t global_row = options().rank * batch_size + row;
    const WindowLoader& source = *sources_[source_of(step, global_row)].train;
    source.fill_train_row(batch, row, step, global_row);
    if (any_loss_mask_ && !source.has_loss_mask()) {
      const auto first = batch.real.begin() + row * batch.cols;
      std::copy(first, first + batch.cols, batch.trained.begin() + row * batch.cols);
    }
  }
  return batch;
}

}  // namespace inkstone
