// The training loop: micro-batched steps of any objective, schedules, clipping, NaN guard, eval, checkpoints.
#pragma once
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/batch.h"
#include "core/checkpoint.h"
#include "core/config.h"
#include "core/distributed.h"
#include "core/optimizer.h"
#include "core/tokenizer.h"
#include "core/window_loader.h"
#include "objectives/objective.h"

namespace inkstone {

struct TrainResult {
  int64_t steps_done = 0;
  int64_t skipped_steps = 0;
  std::map<std::string, double> final_eval;
  std::filesystem::path last_checkpoint;
  int stop_signal = 0;  // the run stopped early, checkpointed, on this signal (core/stop_signal.h)
};

// The error for an optimizer update (the update of step `step` + 1) that left a weight NaN or inf; found with the
// next step's host transfer, so the run ends before that update can reach a checkpoint (exit 1).
NonFiniteError non_finite_update(int64_t step);

// Rows [row_begin, row_end) of a host batch as device tensors.
Batch token_batch_to_device(const TokenBatch& batch, int64_t row_begin, int64_t row_end, torch::Device device);

struct AccumulatedStep {
  torch::Tensor loss_sum;  // 0-d, detached
  torch::Tensor count;     // 0-d
  std::map<std::string, torch::Tensor> metric_sums;
  std::map<std::string, torch::Tensor> metric_mins;
  std::map<std::string, torch::Tensor> metric_maxes;
};
// Runs the objective on each micro-batch, backpropagating loss sums, then divides the gradients of
// `parameters` by the total count, so any split of a batch into micro-batches gives the full batch's gradient.
// With `across_ranks`, the last backward also sums gradients over ranks, and the loss, count and metrics are
// reduced too, so every rank ends with the global batch's mean gradient: sum over ranks / count over ranks.
AccumulatedStep accumulate_gradients(Objective& objective, LanguageModelImpl& model,
                                     const std::vector<Batch>& micro_batches, const NamedTensors& parameters,
                                     bool autocast, GradientSynchroniser* across_ranks = nullptr);

// The model's own updates after an optimizer step (models/auxiliary.h), from statistics summed over the ranks
// first, so that every rank updates alike (e.g. MoE's router bias from the global expert load).
void after_optimizer_step_on_all_ranks(LanguageModelImpl& model, Distributed& distributed);

// A split as consecutive non-overlapping windows, batch_size at a time (at most max_batches; 0: all).
class WindowEvalSource : public EvalSource {
 public:
  // document_eos ≥ 0: batches carry packed_documents(tokens, document_eos) (data.document_mask).
  WindowEvalSource(const WindowLoader& loader, int64_t batch_size, int64_t max_batches, torch::Device device,
                   int64_t document_eos = -1);
  int64_t num_batches() const override { return num_batches_; }
  Batch batch(int64_t index) const override;
  double bytes_per_token() const override { return loader_.bytes_per_token(); }

 private:
  const WindowLoader& loader_;
  int64_t batch_size_;
  int64_t num_batches_;
  torch::Device device_;
  int64_t document_eos_;
};

class Trainer {
 public:
  // With an active `distributed`, this process is one rank of a data-parallel run: train_data must be opened
  // with its rank; it trains on its batch_size / world_size rows of each global batch, and only rank 0 writes
  // metrics, progress and checkpoints.
  Trainer(Config config, LanguageModel model, std::unique_ptr<Objective> objective,
          std::shared_ptr<const Tokenizer> tokenizer, std::shared_ptr<const WindowLoader> train_data,
          std::shared_ptr<const WindowLoader> val_data, std::filesystem::path run_dir, torch::Device device,
          std::shared_ptr<Distributed> distributed = nullptr);

  // Restores weights, optimizer, RNG, step and data position, so training continues exactly. A checkpoint of a
  // run with another number of ranks is an InputError (each rank's random stream is saved and restored).
  void resume(const CheckpointData& checkpoint);
  TrainResult run();

  // Called after every step with (step, loss); tests use it to compare runs.
  std::function<void(int64_t, double)> on_step;

 private:
  std::map<std::string, double> evaluate();
  std::filesystem::path save(double elapsed_s);
  Batch to_device(const TokenBatch& batch, int64_t row_begin, int64_t row_end) const;

  Config config_;
  LanguageModel model_;
  std::unique_ptr<Objective> objective_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<const WindowLoader> train_data_;
  std::shared_ptr<const WindowLoader> val_data_;
  std::filesystem::path run_dir_;
  torch::Device device_;
  NamedTensors optimized_;  // in the optimizer's group order, for its checkpointed state
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::shared_ptr<Distributed> distributed_;
  std::unique_ptr<GradientSynchroniser> synchroniser_;  // only in a data-parallel run
  int64_t step_ = 0;
  int64_t tokens_seen_ = 0;
  double elapsed_before_s_ = 0;  // wall time of earlier sessions of a resumed run
};

}  // namespace inkstone
