// The objective interface: a loss with metrics for one batch, a full validation, and what it needs.
// Objectives never reach into the training session; the session never knows which objective it runs.
#pragma once
#include <map>
#include <memory>
#include <string>

#include <torch/types.h>

#include "config/config.h"
#include "core/batch.h"
#include "dataset/tokenizer.h"
#include "models/language_model.h"
#include "objectives/validation_sums.h"

namespace inkstone {

// Where an objective's batches come from: token windows of a dataset, or rollouts of the policy being trained
// (batches carry RolloutAnnotations).
enum class BatchKind { windows, rollouts };

// What an objective asks of the backbone and of the data.
struct ObjectiveNeeds {
  BatchKind consumes = BatchKind::windows;
  MaskMode mask = MaskMode::causal;
  bool time_input = false;     // feeds a noise level to the model's time conditioning
  int64_t window_extra = 0;    // tokens per window beyond data.seq_len (next-token targets need 1)
};

// How this run's packed windows part into documents (core/batch.h): inactive without data.document_mask.
inline DocumentSplit document_split(const DataConfig& data, const Tokenizer& tokenizer, const ObjectiveNeeds& needs) {
  if (!data.document_mask) return {};
  return {tokenizer.specials().eos, needs.mask == MaskMode::causal};
}

struct LossOutput {
  // Sum of the per-unit losses of this micro-batch and the number of units, so that gradient accumulation
  // over micro-batches of any size divides by the true total (two halves equal one full batch exactly).
  torch::Tensor loss_sum;  // 0-d, differentiable
  torch::Tensor count;     // 0-d
  // Per-unit sums over the same units as the loss (reported as sum / count); 0-d tensors, no host sync.
  std::map<std::string, torch::Tensor> metric_sums;
  // Extremes over the units (reported as they are); 0-d tensors.
  std::map<std::string, torch::Tensor> metric_mins;
  std::map<std::string, torch::Tensor> metric_maxes;
};

class Objective {
 public:
  virtual ~Objective() = default;
  virtual std::string name() const = 0;
  virtual ObjectiveNeeds needs() const = 0;
  virtual LossOutput loss(LanguageModelImpl& model, const Batch& batch) = 0;
  // Validation totals over every batch of the source (float64 accumulation), which add up over sources that
  // split a validation set (sharded validation); validation_metrics() turns them into means.
  virtual ValidationSums evaluate(LanguageModelImpl& model, const EvalSource& source) = 0;
  // Statistics of a whole rollout batch that are fixed before any update (e.g. quantiles of quantities computed
  // without gradient); the rollout step source logs them once per batch. Window objectives have none.
  virtual std::map<std::string, double> rollout_metrics(const Batch&) const { return {}; }
  // Parameters the objective learns itself (FlowRL's log Z head), optimised with the model's; null for most.
  virtual std::shared_ptr<torch::nn::Module> trainable() { return nullptr; }
};

// The registered objectives by config name (objectives/registry.cpp holds one line per objective).
std::vector<std::string> registered_objective_names();
// Builds config.objective.name's objective after check_objective_settings.
std::unique_ptr<Objective> make_objective(const Config& config, const Tokenizer& tokenizer);
// InputError for settings that depend on the objective's kind: a key the objective would ignore without a word
// (objective.z_loss, data.inject_step, metrics.watch_text, diffusion.is_weight and diffusion.block_size outside
// the objectives that read them), and block diffusion on token mixers that do not follow its attention rule.
void check_objective_settings(const Config& config);
// The objective that trained the model a run holds: config.objective.name's, or for an RL run (an objective that
// consumes rollouts) the one named by rl.policy (`ar` when empty), which says how the model generates text and
// scores windows. InputError for an rl.policy that names no such objective.
std::unique_ptr<Objective> make_policy_objective(const Config& config, const Tokenizer& tokenizer);
std::string policy_objective_name(const Config& config);
// An RL run's config as the policy's own objective reads it: objective.name = rl.policy, and a diffusion policy
// adapted from an AR model attends both ways (its attention annealing is over).
Config policy_model_config(const Config& config);
// What the objective registered as `name` trains on, without building it (InputError for an unknown name).
BatchKind objective_batch_kind(const std::string& name);
// How many float32 copies of one chunk's [rows, V] logits the objective registered as `name` holds at once while
// its vocabulary loss runs (objectives/chunked_vocab.h): what the memory plan counts per chunk.
double objective_logit_copies(const std::string& name);

}  // namespace inkstone
