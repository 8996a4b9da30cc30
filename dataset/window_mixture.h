// Training windows drawn from several prepared data folders by weight (data.mixture; docs/training.md, "Data
// mixtures"). Row r of step s comes from source i with probability w_i / Σw, chosen by counter_hash({seed, s, global
// row, 1}) (core/counter_hash.h), and is then that source's own window for (s, global row): like one folder's
// windows, a row is a pure function of the seed, the step and its place in the global batch, so a run resumes
// bitwise at any step and a global batch does not depend on how it is split over ranks.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dataset/window_loader.h"

namespace inkstone {

// One folder of a mixture: its training windows, validation split and share of the rows.
struct MixtureSource {
  std::string name;  // the folder's name, which labels its validation figures
  double weight = 1;
  std::shared_ptr<const WindowLoader> train;
  std::shared_ptr<const WindowLoader> val;
};

class WindowMixture : public TrainWindows {
 public:
  // The sources must agree on the window length, the mode, the seed and the rank (they are opened from one
  // config); weights must be positive.
  explicit WindowMixture(std::vector<MixtureSource> sources);

  TokenBatch train_batch(int64_t step, int64_t batch_size) const override;
  const WindowLoaderOptions& options() const override { return sources_.front().train->options(); }
  // The source of row `global_row` of step `step`.
  size_t source_of(int64_t step, int64_t global_row) const;
  const std::vector<MixtureSource>& sources() const { return sources_; }

 private:
  std::vector<MixtureSource> sources_;
  std::vector<double> cumulative_;  // Σ_{j ≤ i} w_j / Σw
  bool any_loss_mask_ = false;      // rows of sources without a mask are trained on every real token
};

}  // namespace inkstone
