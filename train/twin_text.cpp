#include "train/twin_text.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include "core/errors.h"

namespace inkstone {

RowInjection::RowInjection(const DataConfig& data, const Tokenizer& tokenizer, int64_t window_len)
    : step_(data.inject_step), row_(data.inject_row) {
  if (step_ == 0) return;
  tokens_ = tokenizer.encode(data.inject_text);
  if (tokens_.empty()) throw InputError("data.inject_text encodes to no tokens");
  if (static_cast<int64_t>(tokens_.size()) > window_len)
    throw InputError(
        fmt::format("data.inject_text is {} tokens, longer than a training window of {}", tokens_.size(), window_len));
}

TokenBatch RowInjection::apply(TokenBatch batch, int64_t rank) const {
  const int64_t local = row_ - rank * batch.rows;
  if (local < 0 || local >= batch.rows) return batch;
  std::copy(tokens_.begin(), tokens_.end(), batch.tokens.begin() + local * batch.cols);
  std::fill_n(batch.real.begin() + local * batch.cols, tokens_.size(), uint8_t{1});
  if (!batch.trained.empty()) std::fill_n(batch.trained.begin() + local * batch.cols, tokens_.size(), uint8_t{1});
  return batch;
}

TextEvalSource::TextEvalSource(const std::string& text, const Tokenizer& tokenizer, torch::Device device,
                               int64_t max_tokens, int64_t copies) {
  const auto ids = tokenizer.encode(text);
  if (ids.size() < 2) throw InputError("metrics.watch_text must encode to at least two tokens");
  if (static_cast<int64_t>(ids.size()) > max_tokens)
    throw InputError(
        fmt::format("metrics.watch_text is {} tokens, more than model.max_seq_len = {}", ids.size(), max_tokens));
  const auto row = torch::tensor(std::vector<int64_t>(ids.begin(), ids.end()), torch::kLong);
  batch_.tokens = row.unsqueeze(0).repeat({copies, 1}).to(device);
  batch_.real = torch::ones_like(batch_.tokens, torch::kBool);
  bytes_per_token_ = static_cast<double>(text.size()) / static_cast<double>(ids.size());
}

}  // namespace inkstone
