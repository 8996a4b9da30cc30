// Steps from windows of a token corpus (pretraining, diffusion): each step one deterministic batch (a pure
// function of seed and step), split into train.grad_accum micro-batches, one optimizer update; validation over
// consecutive windows of the val split.
#pragma once
#include <cstdint>
#include <functional>
#include <future>
#include <memory>

#include "core/batch.h"
#include "dataset/window_loader.h"
#include "dataset/window_mixture.h"
#include "train/session.h"
#include "train/twin_text.h"

namespace inkstone {

// Rows [row_begin, row_end) of a host batch as device tensors, with their packed documents (on the host, core/batch.h)
// where `documents` is active.
Batch token_batch_to_device(const TokenBatch& batch, int64_t row_begin, int64_t row_end, torch::Device device,
                            DocumentSplit documents = {});

// A split as consecutive non-overlapping windows, batch_size at a time (at most max_batches; 0: all). Sharded
// over `ranks`, rank r holds the split's batches r, r + ranks, r + 2·ranks, ...
class WindowEvalSource : public EvalSource {
 public:
  // An active `documents`: batches carry packed_documents(tokens, documents) (data.document_mask).
  WindowEvalSource(const WindowLoader& loader, int64_t batch_size, int64_t max_batches, torch::Device device,
                   DocumentSplit documents = {}, int64_t rank = 0, int64_t ranks = 1);
  int64_t num_batches() const override { return num_batches_; }
  Batch batch(int64_t index) const override;
  int64_t split_index(int64_t index) const override { return rank_ + index * ranks_; }
  double bytes_per_token() const override { return loader_.bytes_per_token(); }

 private:
  const WindowLoader& loader_;
  int64_t batch_size_;
  int64_t num_batches_;
  torch::Device device_;
  DocumentSplit documents_;
  int64_t rank_;
  int64_t ranks_;
};

class WindowSource : public StepSource {
 public:
  // In a data-parallel run `train_data` must be opened with the session's rank; each rank trains on its
  // batch_size / world_size rows of every global batch. InputError for an objective that trains on rollouts or
  // a batch that does not split evenly over ranks and micro-batches.
  WindowSource(TrainingSession& session, std::shared_ptr<const WindowLoader> train_data,
               std::shared_ptr<const WindowLoader> val_data);
  // Windows of several folders (data.mixture): validation scores each source's val split, reported per source
  // and as their weighted mean.
  WindowSource(TrainingSession& session, std::shared_ptr<const TrainWindows> train_data,
               std::vector<MixtureSource> sources);

  std::string name() const override { return "train"; }
  StepReport step(TrainingSession& session, int64_t step) override;
  void settle(TrainingSession& session) override;
  EvalReport evaluate(TrainingSession& session) override;
  nlohmann::json checkpoint_state() const override;
  void restore(const CheckpointData& checkpoint) override;

  // Called after every applied update with (step, loss); tests use it to compare runs.
  std::function<void(int64_t, double)> on_step;

 private:
  Batch to_device(const TokenBatch& batch, int64_t row_begin, int64_t row_end) const;
  // Step `step`'s rows of this rank: the one read ahead during the previous step when there is one, and then the
  // next step's read started on another thread (the rows are a pure function of the seed and the step, so reading
  // ahead changes nothing but the time the step waits).
  TokenBatch take_batch(int64_t step, int64_t rows);
  // Counts an update whose figures reached the host into the log window and the tokens seen.
  void count(UpdateResult u);

  // Validation of one source: its figures and the number of units (tokens) they are means over.
  std::map<std::string, double> evaluate_source(TrainingSession& session, const WindowLoader& val);

  std::shared_ptr<const TrainWindows> train_data_;
  std::vector<MixtureSource> sources_;  // their val splits; one unnamed source without a mixture
  RowInjection injection_;                   // data.inject_*: nothing to do unless due
  std::unique_ptr<TextEvalSource> watched_;  // metrics.watch_text; null: none
  TrainConfig train_;
  int64_t seq_len_;
  DocumentSplit documents_;  // active with data.document_mask
  int64_t rank_;
  int64_t world_size_;
  torch::Device device_;
  std::future<TokenBatch> ahead_;  // the rows of step ahead_step_, being read
  int64_t ahead_step_ = -1;
  int64_t tokens_seen_ = 0;
  // The current log window (train.log_interval steps): the seconds spent in its steps (evaluation, samples and
  // checkpoints between them are not training throughput), its tokens and summed step losses.
  double window_seconds_ = 0;
  int64_t window_tokens_ = 0;
  double window_loss_ = 0;
  int64_t window_steps_ = 0;
  UpdateResult latest_;  // the latest update counted: its gradient norm and metrics close a log window
};

}  // namespace inkstone
