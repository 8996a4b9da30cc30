// One training session for every objective: it owns the parameters (model and objective), the optimizer, the
// data-parallel set-up, the update (micro-batches -> clipped, NaN-guarded AdamW step), checkpoints and resume,
// the metrics log, progress, and the eval / checkpoint cadence. What a step trains on comes from a StepSource:
// windows of a token corpus (train/window_source.h) or rollouts of the policy (rl/rollout_source.h).
// docs/training.md describes the loop.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/module_weights.h"
#include "config/config.h"
#include "core/errors.h"
#include "core/host_copy.h"
#include "dataset/tokenizer.h"
#include "models/language_model.h"
#include "objectives/objective.h"
#include "train/gradient_synchroniser.h"
#include "train/gradient_accumulation.h"
#include "train/master_weights.h"
#include "train/metrics_log.h"
#include "train/optimizer.h"
#include "train/parameter_gathering.h"
#include "train/spike_guard.h"
#include "train/tensorboard_log.h"
#include "train/zero_sharding.h"

namespace inkstone {

class TrainingSession;

struct TrainResult {
  int64_t steps_done = 0;
  int64_t skipped_updates = 0;  // optimizer updates skipped for a non-finite loss or gradient
  std::map<std::string, double> final_eval;
  std::filesystem::path last_checkpoint;
  int stop_signal = 0;  // the run stopped early, checkpointed, on this signal (train/stop_signal.h)
};

// What one step reports to the session: the metrics line to log (none on steps between log lines) and the text
// of the progress bar.
struct StepReport {
  std::optional<nlohmann::json> line;
  std::string progress;
  // The model FLOPs per second the steps since the previous line trained at, over all ranks (3 times the forward
  // FLOPs of the trained tokens, recomputation not counted); 0: unknown. The session logs it per device as
  // tflops_per_s, and as mfu against the device's bf16 peak where one is known.
  double model_flops_per_s = 0;
};

// Samples of the run's prompts from the current weights, as (prompt, text) pairs; called on every rank (a ZeRO-3
// forward needs them all), with the same result on each.
using SampleTexts = std::function<std::vector<std::pair<std::string, std::string>>()>;

// An evaluation: its metrics, the line to log (split and metrics; the session adds step and elapsed time) and a
// one-line summary for the terminal.
struct EvalReport {
  std::map<std::string, double> metrics;
  nlohmann::json line;
  std::string summary;
};

// Where a session's steps come from. A source draws a step's data from (run seed, step) alone, so that a resumed
// run continues as the uninterrupted one would, and calls TrainingSession::update once or more per step.
class StepSource {
 public:
  virtual ~StepSource() = default;
  virtual std::string name() const = 0;  // labels the progress bar
  virtual StepReport step(TrainingSession& session, int64_t step) = 0;
  virtual EvalReport evaluate(TrainingSession& session) = 0;
  // Whether the untrained model is evaluated before the first step (the RL baseline).
  virtual bool evaluates_before_training() const { return false; }
  // Takes in the updates whose figures are still on their way to the host (TrainingSession::settle_updates): the
  // session calls it before it evaluates, samples or checkpoints, so that the counters are those of every step done.
  virtual void settle(TrainingSession& session) { (void)session; }
  // The source's own counters, saved in the checkpoint's state and restored from it.
  virtual nlohmann::json checkpoint_state() const = 0;
  virtual void restore(const CheckpointData& checkpoint) = 0;
};

// One optimizer update: its loss, gradient norm and unit count, and whether the step was taken.
struct UpdateResult {
  int64_t step = 0;      // the training step it belongs to (0-based)
  bool applied = false;  // false: skipped (non-finite loss or gradient, a spike) or empty (no units)
  double loss = 0;       // mean over units
  double grad_norm = 0;  // before clipping
  double units = 0;
  AccumulatedStep sums;
};

// The error for an optimizer update (the update of step `step` + 1) that left a weight NaN or inf; found when its
// figures reach the host, before that update can reach a checkpoint, so the run ends with the last one intact
// (exit 1).
NonFiniteError non_finite_update(int64_t step);

// When an update's figures (loss, gradient norm, units, finiteness) are read on the host.
enum class Settle {
  now,    // at once: the host waits for the device to finish the update
  later,  // where the session decides on the device (TrainingSession::decides_on_device), by a later call, so that
          // the host never waits for the step it has just queued; otherwise at once
};

class TrainingSession {
 public:
  // With an active `distributed`, this process is one rank of a data-parallel run: the step source gives it its
  // share of each global batch, the gradients are averaged over the ranks, and only rank 0 writes metrics,
  // progress and checkpoints. The objective's own parameters (Objective::trainable) are optimised and
  // checkpointed with the model's.
  TrainingSession(Config config, LanguageModel model, std::unique_ptr<Objective> objective,
                  std::shared_ptr<const Tokenizer> tokenizer, std::filesystem::path run_dir, torch::Device device,
                  std::shared_ptr<Distributed> distributed = nullptr);

  // Restores weights (model and objective), optimizer, RNG, step and the source's counters, so training
  // continues exactly. A checkpoint whose config differs in meaning (train/resume_check.h: the objective, the
  // architecture, ...) or of a run with another number of ranks is an InputError.
  void resume(const CheckpointData& checkpoint, StepSource& source);
  TrainResult run(StepSource& source);

  // Zeroes the gradients, accumulates them over `micro_batches` at learning rate `lr`, clips, and steps unless
  // the loss or gradient is non-finite (counted, logged, fatal after train.max_bad_steps in a row), a spike
  // (train.spike_*) or the batch has no units. `step` is the training step the update belongs to. Returns the
  // updates whose figures reached the host in this call, oldest first: this one with Settle::now or where the
  // decision is taken on the host; with Settle::later and decides_on_device(), the ones before it. Only during
  // run().
  std::vector<UpdateResult> update(const std::vector<Batch>& micro_batches, double lr, int64_t step, Settle settle);
  // The updates whose figures are still on their way, oldest first, read now.
  std::vector<UpdateResult> settle_updates();
  // Whether the step-or-skip decision is taken on the device, so that update(Settle::later) never waits for the
  // device (docs/training.md, "A step without host synchronisation"): where AdamW runs its fused kernel and no
  // spike guard needs the figures before the step.
  bool decides_on_device() const { return decides_on_device_; }
  // What run() samples every metrics.sample_interval steps into the metrics (split "samples").
  void set_sample_texts(SampleTexts sample_texts) { sample_texts_ = std::move(sample_texts); }
  // The learning rate of optimizer step `k` of `total` (optim.learning_rate under the schedule).
  double learning_rate(int64_t k, int64_t total) const;

  const Config& config() const { return config_; }
  LanguageModel& model() { return model_; }
  Objective& objective() { return *objective_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  torch::Device device() const { return device_; }
  Distributed& distributed() { return *distributed_; }
  int64_t step() const { return step_; }  // steps done
  bool autocast() const { return autocast_; }
  // How the run computes and stores weights, as the metrics name it: "fp32", "bf16 autocast, fp32 weights",
  // "bf16 weights, fp32 master" (+ ", bf16 autocast" on CUDA).
  std::string precision_label() const;
  // Wall time of the run so far, earlier sessions of a resumed run included.
  double elapsed_s() const;

 private:
  std::filesystem::path save(const StepSource& source);
  void restore_optimizer(const CheckpointData& checkpoint, const std::string& origin);
  void import_optimizer_state(const NamedTensors& state, const std::string& file);
  NamedTensors export_optimizer_state();
  void log(const nlohmann::json& line);
  void log_samples(int64_t step);
  // tflops_per_s and mfu for a line whose step window trained at `model_flops_per_s` over all ranks.
  void add_utilisation(nlohmann::json& line, double model_flops_per_s) const;
  // An update whose figures are still on their way to the host.
  struct PendingUpdate {
    int64_t step;
    AccumulatedStep sums;
    HostCopy figures;                    // loss sum, units, gradient norm, weights finite after it (1 or 0)
    std::vector<torch::Tensor> counted;  // the parameters whose host step count the update advanced
  };
  // The update's first half on either side: zeroed gradients, accumulated over the micro-batches, clipped.
  struct Gradients {
    AccumulatedStep sums;
    torch::Tensor grad_norm;  // 0-d, before clipping
  };
  Gradients accumulate(const std::vector<Batch>& micro_batches, double lr);
  UpdateResult update_deciding_on_host(const std::vector<Batch>& micro_batches, double lr, int64_t step);
  void queue_update_deciding_on_device(const std::vector<Batch>& micro_batches, double lr, int64_t step);
  // Reads the oldest pending updates until at most `keep` remain.
  std::vector<UpdateResult> settle_pending(size_t keep);
  // The host's verdict on an update from its figures: whether to step; a skip is counted and logged, and
  // train.max_bad_steps in a row stop the run. On the device the same rule is a tensor expression
  // (queue_update_deciding_on_device), with no spike guard.
  bool judge(const UpdateResult& u);
  // Counts and logs a skipped update (`line` says why); train.max_bad_steps in a row stop the run.
  void skip_update(int64_t step, nlohmann::json line, const std::string& why);
  // The optimizer step proper, after the gradients are clipped: master weights, ZeRO's exchange, the model's own
  // updates (models/auxiliary.h); skip: undefined (the host decided to step) or the device's 0-d verdict.
  std::vector<torch::Tensor> take_step(const torch::Tensor& skip);

  Config config_;
  LanguageModel model_;
  std::unique_ptr<Objective> objective_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::filesystem::path run_dir_;
  torch::Device device_;
  bool autocast_;
  NamedTensors optimized_;  // every trained tensor, decay group first; the same order on every rank
  std::vector<torch::Tensor> parameters_;  // the same tensors, for clipping and finiteness checks
  NamedTensors stepped_;  // what this rank's optimizer updates: optimized_, or with ZeRO this rank's shard of it
  std::optional<MasterWeights> masters_;  // run.param_dtype = bf16: the fp32 tensors the optimizer steps instead
  bool masters_restored_ = false;         // from a checkpoint (else taken from the starting weights in run())
  std::unique_ptr<AdamW> optimizer_;
  bool decides_on_device_ = false;
  std::deque<PendingUpdate> pending_;
  std::shared_ptr<Distributed> distributed_;
  std::unique_ptr<GradientSynchroniser> synchroniser_;  // only in a data-parallel run
  std::unique_ptr<ZeroSharding> zero_;                  // only with distributed.zero_stage > 0 and several ranks
  std::shared_ptr<ParameterGathering> gathering_;       // only with ZeRO stage 3; the model's residency in run()
  std::optional<MetricsLog> log_;                       // rank 0, during run()
  std::optional<TensorBoardLog> tensorboard_;           // rank 0, during run(), with metrics.tensorboard
  SampleTexts sample_texts_;
  std::optional<double> peak_tflops_;                   // the mfu denominator, where known
  SpikeGuard spike_guard_;
  torch::Tensor weights_finite_;  // deciding on the host: after the latest update, read with the next one's figures
  int64_t step_ = 0;
  int64_t skipped_updates_ = 0;
  int64_t bad_in_a_row_ = 0;
  double elapsed_before_s_ = 0;  // wall time of earlier sessions of a resumed run
  std::chrono::steady_clock::time_point session_start_ = std::chrono::steady_clock::now();
};

}  // namespace inkstone
