#include "objectives/flowrl.h"

#include <cmath>

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "objectives/group_stats.h"

namespace inkstone {

LogZHeadImpl::LogZHeadImpl(int64_t width, double dropout) {
  auto block = [&](torch::nn::Sequential& s) {
    s->push_back(torch::nn::Linear(width, width));
    s->push_back(torch::nn::GELU());
    s->push_back(torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
    s->push_back(torch::nn::Dropout(dropout));
  };
  torch::nn::Sequential layers;
  block(layers);
  block(layers);
  layers->push_back(torch::nn::Linear(width, 1));
  layers_ = register_module("layers", layers);
}

torch::Tensor LogZHeadImpl::forward(const torch::Tensor& pooled) { return layers_->forward(pooled).squeeze(-1); }

FlowrlObjective::FlowrlObjective(const Config& config, const Tokenizer& tokenizer)
    : config_(config.flowrl),
      head_(config.model.d_model, config.flowrl.head_dropout),
      policy_(make_policy_likelihood(config, tokenizer)) {}

ObjectiveNeeds FlowrlObjective::needs() const {
  return policy_->needs();
}

torch::Tensor FlowrlObjective::log_z(const torch::Tensor& hidden, const Batch& batch) {
  const int64_t positions = hidden.size(1);
  const auto prompt = (batch.real & ~batch.rollout.policy).narrow(1, 0, positions).to(hidden.scalar_type());
  const auto pooled = (hidden * prompt.unsqueeze(-1)).sum(1) / prompt.sum(1, true).clamp_min(1.0);
  return head_->forward(pooled);
}

// δ_i = log Z_φ(x) + ℓθ_i/|y_i| − β r̂_i − ℓref_i/|y_i|, w_i = sg[min(exp(ρ_i), cap)] with ρ the token sum.
LossOutput FlowrlObjective::loss(LanguageModelImpl& model, const Batch& batch) {
  const auto& rollout = batch.rollout;
  const auto lengths = rollout.policy.sum(1).to(torch::kFloat).clamp_min(1.0);
  const auto old_seq = rollout.old_log_probs.sum(1);
  const auto ref_seq = rollout.ref_log_probs.defined() ? rollout.ref_log_probs.sum(1) : old_seq;
  torch::Tensor shaped;  // r̂: the group z-score (verl's GRPO advantage, ε = 1e-6)
  {
    torch::NoGradGuard no_grad;
    const RolloutGroups groups(rollout.groups);
    const auto rewards = rollout.rewards.to(torch::kFloat);
    shaped = (rewards - groups.mean(rewards)) / (groups.std(rewards) + 1e-6);
  }

  const auto policy = policy_->log_probs(model, batch, /*with_entropy=*/false, /*with_hidden=*/true);
  const auto theta_seq = policy.log_probs.sum(1);
  const auto z = log_z(policy.hidden, batch);
  const auto delta = z + theta_seq / lengths - config_.beta * shaped - ref_seq / lengths;
  // The cap is applied to the exponent, so a long sequence's ratio cannot overflow.
  const auto weight = (theta_seq - old_seq).detach().clamp_max(std::log(config_.is_cap)).exp();

  LossOutput out;
  out.loss_sum = (weight * delta.square()).sum();
  out.count = torch::full({}, static_cast<double>(batch.tokens.size(0)), lengths.options());
  out.metric_sums["log_z"] = z.detach().sum();
  out.metric_sums["delta_abs"] = delta.detach().abs().sum();
  out.metric_sums["is_weight"] = weight.sum();
  out.metric_mins["is_weight_min"] = weight.min();
  out.metric_maxes["is_weight_max"] = weight.max();
  return out;
}

ValidationSums FlowrlObjective::evaluate(LanguageModelImpl& model, const EvalSource& source) {
  return policy_->evaluate(model, source);
}

}  // namespace inkstone
