#include "dataset/window_loader.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "core/counter_hash.h"
#include "core/errors.h"

namespace inkstone {
namespace {

Manifest checked_manifest(const std::filesystem::path& data_dir, const WindowLoaderOptions& options) {
  Manifest manifest = read_manifest(data_dir);
  const std::string& expected = options.expected_tokenizer_fingerprint;
  if (!expected.empty() && expected != manifest.tokenizer_fingerprint) {
    throw InputError(fmt::format("{}: made with tokenizer {} but this run uses tokenizer {}; prepare the data again "
                                 "with this tokenizer or use the folder's tokenizer.json",
                                 manifest_path(data_dir).string(), manifest.tokenizer_fingerprint, expected));
  }
  if (options.expected_vocab_size > 0 && manifest.vocab_size != options.expected_vocab_size) {
    throw InputError(fmt::format("{}: tokenizer.vocab_size = {} but this run's tokenizer has {} ids",
                                 manifest_path(data_dir).string(), manifest.vocab_size, options.expected_vocab_size));
  }
  if (!options.expected_tokenizer_kind.empty() && manifest.tokenizer_kind != options.expected_tokenizer_kind) {
    throw InputError(fmt::format("{}: tokenizer.kind = '{}' but this run's tokenizer is '{}'",
                                 manifest_path(data_dir).string(), manifest.tokenizer_kind,
                                 options.expected_tokenizer_kind));
  }
  if (options.window_len < 1) throw InputError(fmt::format("window length {} must be at least 1", options.window_len));
  if (options.rank < 0) throw InputError(fmt::format("rank {} must not be negative", options.rank));
  return manifest;
}

SplitInfo split_of(const Manifest& manifest, const std::filesystem::path& data_dir, const std::string& split) {
  auto found = manifest.splits.find(split);
  if (found == manifest.splits.end()) {
    throw InputError(fmt::format("{}: no split '{}'", manifest_path(data_dir).string(), split));
  }
  return found->second;
}

}  // namespace

int64_t TokenBatch::real_tokens() const { return std::accumulate(real.begin(), real.end(), int64_t{0}); }

WindowLoader::WindowLoader(const std::filesystem::path& data_dir, WindowLoaderOptions options)
    : options_(std::move(options)),
      manifest_(checked_manifest(data_dir, options_)),
      split_(split_of(manifest_, data_dir, options_.split)),
      tokens_(data_dir, manifest_, options_.split, options_.verify) {
  const std::string where = fmt::format("{} split '{}'", data_dir.string(), options_.split);
  if (options_.mode == WindowMode::pack && tokens_.size() < options_.window_len) {
    throw InputError(fmt::format("{} has {} tokens, fewer than one window of {}", where, tokens_.size(),
                                 options_.window_len));
  }
  if (options_.mode == WindowMode::pad) {
    if (manifest_.pad < 0) throw InputError(fmt::format("{}: the tokenizer has no pad token for pad mode", where));
    document_starts_ = tokens_.document_starts(manifest_.eos);
    const auto documents = static_cast<int64_t>(document_starts_.size()) - 1;
    if (documents < 1) throw InputError(fmt::format("{} has no documents", where));
    if (documents != split_.documents) {
      throw InputError(fmt::format("{} holds {} documents but the manifest says {}", where, documents,
                                   split_.documents));
    }
    // Conversations that start from eos were written without it (the eos ending the document before serves): a
    // padded row puts it back in front, as the context the prompt starts from (docs/training.md, "Fine-tuning on
    // conversations").
    leading_eos_ = manifest_.chat && manifest_.chat->prompt_start == "eos";
    eval_window_starts_.push_back(0);
    for (int64_t d = 0; d < documents; ++d) {
      const int64_t length = document_starts_[d + 1] - document_starts_[d] + (leading_eos_ ? 1 : 0);
      eval_window_starts_.push_back(eval_window_starts_.back() + (length + options_.window_len - 1) / options_.window_len);
    }
  }
}

TokenBatch WindowLoader::empty_batch(int64_t rows) const {
  TokenBatch batch;
  batch.rows = rows;
  batch.cols = options_.window_len;
  batch.tokens.assign(static_cast<size_t>(rows * batch.cols), manifest_.pad);
  batch.real.assign(static_cast<size_t>(rows * batch.cols), 0);
  if (tokens_.has_loss_mask()) {
    batch.trained.assign(static_cast<size_t>(rows * batch.cols), 0);
    batch.conversations.assign(static_cast<size_t>(rows), 0);
  }
  return batch;
}

void WindowLoader::fill_row(TokenBatch& batch, int64_t row, int64_t offset, int64_t end, bool lead) const {
  auto first = static_cast<size_t>(row * batch.cols);
  if (lead) {  // the eos is context: real, never trained
    batch.tokens[first] = manifest_.eos;
    batch.real[first] = 1;
    ++first;
  }
  const int64_t length = std::min(batch.cols - (lead ? 1 : 0), end - offset);
  tokens_.read(offset, length, batch.tokens.data() + first);
  std::fill_n(batch.real.begin() + static_cast<std::ptrdiff_t>(first), length, uint8_t{1});
  if (tokens_.has_loss_mask()) {
    if (batch.trained.size() != batch.tokens.size() || batch.conversations.size() != static_cast<size_t>(batch.rows))
      throw std::logic_error("fill_row: a folder with loss masks needs a batch with a loss mask");
    tokens_.read_loss_mask(offset, length, batch.trained.data() + first);
    batch.conversations[static_cast<size_t>(row)] = 1;
  }
}

TokenBatch WindowLoader::train_batch(int64_t step, int64_t batch_size) const {
  if (step < 0 || batch_size < 1) {
    throw std::invalid_argument(fmt::format("train_batch(step {}, batch_size {})", step, batch_size));
  }
  TokenBatch batch = empty_batch(batch_size);
  for (int64_t row = 0; row < batch_size; ++row) fill_train_row(batch, row, step, options_.rank * batch_size + row);
  return batch;
}

void WindowLoader::fill_train_row(TokenBatch& batch, int64_t row, int64_t step, int64_t global_row) const {
  const uint64_t hash =
      counter_hash({options_.seed, static_cast<uint64_t>(step), static_cast<uint64_t>(global_row)});
  if (options_.mode == WindowMode::pack) {
    const auto offset = static_cast<int64_t>(hash_below(hash, tokens_.size() - options_.window_len + 1));
    fill_row(batch, row, offset, tokens_.size());
  } else {
    const auto document = static_cast<size_t>(hash_below(hash, document_starts_.size() - 1));
    fill_row(batch, row, document_starts_[document], document_starts_[document + 1], leading_eos_);
  }
}

int64_t WindowLoader::num_eval_windows() const {
  return options_.mode == WindowMode::pack ? tokens_.size() / options_.window_len : eval_window_starts_.back();
}

TokenBatch WindowLoader::eval_batch(int64_t first_window, int64_t count) const {
  if (first_window < 0 || count < 0 || first_window + count > num_eval_windows()) {
    throw std::out_of_range(fmt::format("eval windows [{}, {}) outside the {} of the sweep", first_window,
                                        first_window + count, num_eval_windows()));
  }
  TokenBatch batch = empty_batch(count);
  for (int64_t row = 0; row < count; ++row) {
    const int64_t window = first_window + row;
    if (options_.mode == WindowMode::pack) {
      fill_row(batch, row, window * options_.window_len, tokens_.size());
    } else {
      // The document whose run of eval windows contains `window`.
      const auto document = static_cast<size_t>(
          std::upper_bound(eval_window_starts_.begin(), eval_window_starts_.end(), window) -
          eval_window_starts_.begin() - 1);
      // Window k of a document covers [k, k + 1) window lengths of it, counted from the eos in front if it has one.
      const int64_t k = window - eval_window_starts_[document];
      const bool lead = leading_eos_ && k == 0;
      const int64_t offset = document_starts_[document] + k * options_.window_len - (leading_eos_ && k > 0 ? 1 : 0);
      fill_row(batch, row, offset, document_starts_[document + 1], lead);
    }
  }
  return batch;
}

// In a folder with loss masks only the trained tokens are scored, so their own bytes per token.
double WindowLoader::bytes_per_token() const {
  return static_cast<double>(split_.trained_bytes) / static_cast<double>(std::max<int64_t>(split_.trained_tokens, 1));
}

}  // namespace inkstone
