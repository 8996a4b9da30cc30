// Autoregressive objective: L = -sum_t log p(x_{t+1} | x_{<=t}) over real (non-pad) targets.
#include "objectives/ar.h"

#include <torch/nn/functional/loss.h>

#include "objectives/z_loss.h"

namespace inkstone {
namespace {

struct TokenLosses {
  torch::Tensor nll;      // [B, T] per-target negative log-likelihood, 0 where not real
  torch::Tensor correct;  // [B, T] argmax hits on real targets
  torch::Tensor real;     // [B, T] bool
  torch::Tensor log_z_squared;  // [B, T] on real targets, with_z only
};

TokenLosses next_token_losses(LanguageModelImpl& model, const Batch& batch, bool with_z = false) {
  using torch::indexing::Slice;
  auto inputs = batch.tokens.index({Slice(), Slice(0, -1)});
  auto targets = batch.tokens.index({Slice(), Slice(1, torch::indexing::None)});
  // A target counts when it and the token predicting it are real data.
  auto real = batch.real.index({Slice(), Slice(1, torch::indexing::None)}) &
              batch.real.index({Slice(), Slice(0, -1)});
  ForwardArgs args;
  args.mask = MaskMode::causal;
  if (batch.documents.defined()) args.documents = batch.documents.index({Slice(), Slice(0, -1)});
  // [B, T, V]; in fp32 whatever the weights' dtype, so that the log-softmax normaliser does not round.
  auto logits = model.forward(inputs, args).logits.to(torch::kFloat);
  auto log_probs = torch::log_softmax(logits, -1);
  auto nll = -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1);
  auto correct = logits.argmax(-1).eq(targets);
  TokenLosses losses{nll.masked_fill(~real, 0.0), correct & real, real, {}};
  if (with_z) losses.log_z_squared = log_z_squared(logits).masked_fill(~real, 0.0);
  return losses;
}

}  // namespace

AutoregressiveObjective::AutoregressiveObjective(const Config& config) : z_loss_(config.objective.z_loss) {}

ObjectiveNeeds AutoregressiveObjective::needs() const {
  ObjectiveNeeds needs;
  needs.mask = MaskMode::causal;
  needs.window_extra = 1;
  return needs;
}

LossOutput AutoregressiveObjective::loss(LanguageModelImpl& model, const Batch& batch) {
  auto t = next_token_losses(model, batch, z_loss_ > 0);
  LossOutput out;
  out.loss_sum = t.nll.sum();
  out.count = t.real.sum().to(torch::kFloat);
  out.metric_sums["accuracy"] = t.correct.sum().to(torch::kFloat);
  if (z_loss_ > 0) add_z_loss(out, t.log_z_squared, z_loss_);
  return out;
}

ValidationSums AutoregressiveObjective::evaluate(LanguageModelImpl& model, const EvalSource& source) {
  torch::NoGradGuard no_grad;
  ValidationSums totals;
  double& nll = totals.sums["loss_nats"];
  double& correct = totals.sums["accuracy"];
  for (int64_t i = 0; i < source.num_batches(); ++i) {
    auto t = next_token_losses(model, source.batch(i));
    nll += t.nll.to(torch::kDouble).sum().item<double>();
    totals.units += t.real.sum().item<double>();
    correct += t.correct.sum().item<double>();
  }
  return totals;
}

}  // namespace inkstone
