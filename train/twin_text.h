// The two pieces of a counterfactual twin (docs/sweeps.md, "Twin runs"): a training row that carries a given text
// at one update (data.inject_*), and a text scored at every evaluation (metrics.watch_text).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/batch.h"
#include "dataset/tokenizer.h"
#include "dataset/window_loader.h"

namespace inkstone {

class RowInjection {
 public:
  // window_len: the training windows' length. InputError for a text longer than a window or one that encodes to
  // nothing.
  RowInjection(const DataConfig& data, const Tokenizer& tokenizer, int64_t window_len);

  // Whether update `step` (0-based) carries the text.
  bool due(int64_t step) const { return step_ > 0 && step + 1 == step_; }
  // This rank's rows of the global batch (rank `rank` holds rows [rank·rows, (rank + 1)·rows)), with the
  // injected row's first tokens replaced by the text's when that row is one of them; the rest of the row, its
  // padding flags and every other row are kept.
  TokenBatch apply(TokenBatch batch, int64_t rank) const;

 private:
  std::vector<int32_t> tokens_;
  int64_t step_;
  int64_t row_;
};

// A text as one evaluation batch of `copies` identical rows (a diffusion objective draws its stratified times over
// the rows, so copies spread them over [0, 1]; an autoregressive one scores every copy alike).
class TextEvalSource : public EvalSource {
 public:
  TextEvalSource(const std::string& text, const Tokenizer& tokenizer, torch::Device device, int64_t max_tokens,
                 int64_t copies = 16);
  int64_t num_batches() const override { return 1; }
  Batch batch(int64_t) const override { return batch_; }
  double bytes_per_token() const override { return bytes_per_token_; }

 private:
  Batch batch_;
  double bytes_per_token_;
};

}  // namespace inkstone
