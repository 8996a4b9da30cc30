// Autoregressive objective: L = -sum_t log p(x_{t+1} | x_{<=t}) over real (non-pad) targets; with a loss mask
// (fine-tuning on conversations) over the targets it trains on, the responses, whose context includes the prompt.
#include "objectives/ar.h"

#include <torch/nn/functional/loss.h>

#include "objectives/chunked_vocab.h"
#include "objectives/z_loss.h"

namespace inkstone {
namespace {

// Per-target results of one batch; the tensors [B, T] are detached, the loss carries the gradient.
struct TokenLosses {
  torch::Tensor loss;           // 0-d: Σ nll + z_loss · Σ log²Z over real targets
  torch::Tensor nll;            // per-target negative log-likelihood, 0 where not real
  torch::Tensor correct;        // argmax hits on real targets, as 0 / 1
  torch::Tensor real;           // bool
  torch::Tensor log_z_squared;  // on real targets; only with z_loss > 0
};

TokenLosses next_token_losses(LanguageModelImpl& model, const Batch& batch, double z_loss, int64_t chunk_mib) {
  using torch::indexing::Slice;
  auto inputs = batch.tokens.index({Slice(), Slice(0, -1)});
  auto targets = batch.tokens.index({Slice(), Slice(1, torch::indexing::None)});
  // A target counts when it and the token predicting it are real data and the loss trains on the target.
  auto real = scored_tokens(batch).index({Slice(), Slice(1, torch::indexing::None)}) &
              batch.real.index({Slice(), Slice(0, -1)});
  WindowInputs window;
  if (batch.documents.defined()) window.documents = batch.documents.index({Slice(), Slice(0, -1)});
  const auto hidden = model.hidden_states(inputs, window);
  const auto flat_targets = targets.reshape(-1);
  const auto flat_real = real.reshape(-1);
  const bool with_z = z_loss > 0;
  // Logits in fp32 whatever the weights' dtype, so that the log-softmax normaliser does not round.
  const ChunkTermsFn terms = [&](const torch::Tensor& logits, int64_t begin) {
    const auto target = flat_targets.narrow(0, begin, logits.size(0));
    const auto counted = flat_real.narrow(0, begin, logits.size(0));
    const auto log_probs = torch::log_softmax(logits, -1);
    std::vector<torch::Tensor> columns = {
        (-log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)).masked_fill(~counted, 0.0),
        (logits.argmax(-1).eq(target) & counted).to(torch::kFloat)};
    if (with_z) columns.push_back(log_z_squared(logits).masked_fill(~counted, 0.0));
    return torch::stack(columns, 1);
  };
  std::vector<double> coefficients = {1.0, 0.0};
  if (with_z) coefficients.push_back(z_loss);
  const auto weight = model.head_weight();
  const auto out = chunked_vocab_loss(hidden.reshape({-1, hidden.size(-1)}), weight, terms, coefficients,
                                      chunk_rows_for(weight.size(0), chunk_mib, weight.is_cuda()));
  const auto per_target = [&](int64_t column) { return out.terms.select(1, column).view(targets.sizes()); };
  TokenLosses losses{out.loss, per_target(0), per_target(1), real, {}};
  if (with_z) losses.log_z_squared = per_target(2);
  return losses;
}

}  // namespace

AutoregressiveObjective::AutoregressiveObjective(const Config& config)
    : z_loss_(config.objective.z_loss), logit_chunk_mib_(config.objective.logit_chunk_mib) {}

ObjectiveNeeds AutoregressiveObjective::needs() const {
  ObjectiveNeeds needs;
  needs.mask = MaskMode::causal;
  needs.window_extra = 1;
  return needs;
}

LossOutput AutoregressiveObjective::loss(LanguageModelImpl& model, const Batch& batch) {
  auto t = next_token_losses(model, batch, z_loss_, logit_chunk_mib_);
  LossOutput out;
  out.loss_sum = t.loss;
  out.count = t.real.sum().to(torch::kFloat);
  out.metric_sums["accuracy"] = t.correct.sum();
  if (z_loss_ > 0) out.metric_sums["log_z_squared"] = t.log_z_squared.sum();
  return out;
}

ValidationSums AutoregressiveObjective::evaluate(LanguageModelImpl& model, const EvalSource& source) {
  torch::NoGradGuard no_grad;
  ValidationSums totals;
  double& nll = totals.sums["loss_nats"];
  double& correct = totals.sums["accuracy"];
  for (int64_t i = 0; i < source.num_batches(); ++i) {
    auto t = next_token_losses(model, source.batch(i), 0.0, logit_chunk_mib_);
    nll += t.nll.to(torch::kDouble).sum().item<double>();
    totals.units += t.real.sum().item<double>();
    correct += t.correct.sum().item<double>();
  }
  return totals;
}

}  // namespace inkstone
