// Fixed-length token windows from one split of a prepared data folder (dataset/shards.h), for training and eval.
//
// Training windows are a pure function of (seed, step, global row), global row = rank * batch_size + row:
// the loader keeps no position, so a run resumes at any step without rereading, ranks draw different windows,
// and a global batch is the same however it is split across ranks. Each window is located by
// counter_hash({seed, step, global_row}) (core/counter_hash.h), with replacement:
//   pack  a uniform offset in [0, tokens - window_len] of the split's token stream, documents separated by eos;
//   pad   a uniform document; the window holds its first window_len tokens (longer documents are truncated),
//         and after its eos the row is filled with pad, marked not real. Conversations prepared with
//         chat.prompt_start = eos are led by that eos, as context (it was written once, as the previous
//         document's end).
// Evaluation sweeps the split in order with non-overlapping windows: pack covers [k * window_len,
// (k + 1) * window_len) for every whole window; pad cuts each document into consecutive windows, the last one
// padded, so every token of the split is scored exactly once.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "config/config.h"
#include "dataset/shards.h"
#include "dataset/tokenizer.h"

namespace inkstone {


// rows x cols token ids, row-major, on the host.
struct TokenBatch {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> real;  // 1 for a token of the data, 0 for padding
  // From a folder with loss masks (conversations): 1 where the loss trains on the token (a response), 0 for the
  // prompt and padding. Empty: the loss trains on every real token.
  std::vector<uint8_t> trained;
  // With `trained`: one flag per row, 1 where the row holds a conversation (a row of a folder with loss masks),
  // whose padding a diffusion objective reads as the end of its response; 0 for a row of plain text.
  std::vector<uint8_t> conversations;

  int64_t real_tokens() const;
};

struct WindowLoaderOptions;

// Where training windows come from: one prepared folder (WindowLoader) or several by weight (WindowMixture).
class TrainWindows {
 public:
  virtual ~TrainWindows() = default;
  // The rows of this rank for `step`: a pure function of the seed, the step and each row's global place.
  virtual TokenBatch train_batch(int64_t step, int64_t batch_size) const = 0;
  virtual const WindowLoaderOptions& options() const = 0;
};

struct WindowLoaderOptions {
  std::string split = "train";
  int64_t window_len = 256;
  WindowMode mode = WindowMode::pack;
  uint64_t seed = 0;
  int64_t rank = 0;
  // Check every shard's xxh64 and id range at open: one pass over the split; turn off for huge folders.
  bool verify = true;
  // When set, the folder must have been made with the tokenizer of this fingerprint (Tokenizer::fingerprint()).
  std::string expected_tokenizer_fingerprint;
  // When set (> 0 / non-empty), the manifest's vocabulary and tokenizer kind must be these: ids are checked against
  // the manifest's count, so a count that disagrees with the run's tokenizer would let out-of-range ids through.
  int64_t expected_vocab_size = 0;
  std::string expected_tokenizer_kind;

  // The folder must have been made with `tokenizer`: its fingerprint, vocabulary size and kind.
  void expect_tokenizer(const Tokenizer& tokenizer) {
    expected_tokenizer_fingerprint = tokenizer.fingerprint();
    expected_vocab_size = tokenizer.vocab_size();
    expected_tokenizer_kind = tokenizer.kind();
  }
};

class WindowLoader : public TrainWindows {
 public:
  // InputError (one line, naming the file) for a missing, empty or corrupt manifest or shard, a tokenizer
  // mismatch, ids outside the vocabulary, or a split too small for one window.
  WindowLoader(const std::filesystem::path& data_dir, WindowLoaderOptions options);

  TokenBatch train_batch(int64_t step, int64_t batch_size) const override;
  // Row `row` of `batch` becomes the training window of (step, global row); `batch` is this folder's empty_batch or
  // one of another folder of the same tokenizer.
  void fill_train_row(TokenBatch& batch, int64_t row, int64_t step, int64_t global_row) const;
  // `rows` windows of padding, with a loss mask where this folder has one.
  TokenBatch empty_batch(int64_t rows) const;

  int64_t num_eval_windows() const;
  // Eval windows [first_window, first_window + count) of the sweep.
  TokenBatch eval_batch(int64_t first_window, int64_t count) const;

  int64_t total_tokens() const { return tokens_.size(); }
  int64_t total_documents() const { return split_.documents; }
  // Bytes of source text the split's tokens decode to.
  int64_t total_bytes() const { return split_.text_bytes; }
  // Bytes per scored token: of the trained tokens in a folder with loss masks (conversations), else of all.
  double bytes_per_token() const;

  const Manifest& manifest() const { return manifest_; }
  bool has_loss_mask() const { return tokens_.has_loss_mask(); }
  const WindowLoaderOptions& options() const override { return options_; }

 private:
  // Copies the window of up to window_len tokens starting at `offset` and not past `end` into row `row`,
  // padding the rest; with `lead` the row starts with an eos of context and holds one token less of the data.
  void fill_row(TokenBatch& batch, int64_t row, int64_t offset, int64_t end, bool lead = false) const;

  WindowLoaderOptions options_;
  Manifest manifest_;
  SplitInfo split_;
  SplitTokens tokens_;
  std::vector<int64_t> document_starts_;  // pad mode: each document's first token, then the split's end
  std::vector<int64_t> eval_window_starts_;  // pad mode: index of each document's first eval window, then the total
  bool leading_eos_ = false;  // pad mode: rows of conversations that start from eos begin with it
};

}  // namespace inkstone
