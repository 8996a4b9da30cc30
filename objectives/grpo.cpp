#include "objectives/grpo.h"

#include "objectives/group_stats.h"

namespace inkstone {
GrpoObjective::GrpoObjective(const Config& config, const Tokenizer& tokenizer)
    : config_(config.grpo),
      max_new_tokens_(config.rl.max_new_tokens),
      policy_(make_policy_likelihood(config, tokenizer)) {}

ObjectiveNeeds GrpoObjective::needs() const {
  return policy_->needs();
}

LossOutput GrpoObjective::loss(LanguageModelImpl& model, const Batch& batch) {
  const auto& rollout = batch.rollout;
  const auto mask = rollout.policy.to(torch::kFloat);
  const auto lengths = mask.sum(1).clamp_min(1.0);  // |y_i|

  torch::Tensor advantage;  // [B, 1], broadcast to every token of the rollout
  {
    torch::NoGradGuard no_grad;
    const RolloutGroups groups(rollout.groups);
    const auto rewards = rollout.rewards.to(torch::kFloat);
    advantage = rewards - groups.mean(rewards);
    if (config_.scale_rewards == RewardScale::group) advantage = advantage / (groups.std(rewards) + config_.adv_eps);
    advantage = advantage.unsqueeze(1);
  }

  const auto theta = policy_->log_probs(model, batch).log_probs;
  // The log-ratio is clamped to ±20 as verl does, so one wild token cannot overflow exp.
  const auto ratio = (theta - rollout.old_log_probs).clamp(-20.0, 20.0).exp();
  const auto clipped_ratio = ratio.clamp(1.0 - config_.eps_low, 1.0 + config_.eps_high);
  auto per_token = -torch::minimum(ratio * advantage, clipped_ratio * advantage);
  torch::Tensor k3;
  if (config_.kl_coef > 0) {
    // k3 = e^Δ − Δ − 1 with Δ = log π_ref − log π_θ, clamped to [−10, 10] as verl's low_var_kl.
    const auto log_gap = rollout.ref_log_probs - theta;
    k3 = (log_gap.exp() - log_gap - 1.0).clamp(-10.0, 10.0);
    per_token = per_token + config_.kl_coef * k3;
  }

  // Per-token weights of the loss and of the metrics so that summing them over a batch and dividing by the
  // unit count gives each mode of docs/rl.md, "Loss aggregation"; metrics are per-token fractions for token_mean
  // and per-sequence fractions otherwise.
  const auto num_sequences = torch::full({}, static_cast<double>(batch.tokens.size(0)), mask.options());
  torch::Tensor loss_weight, metric_weight, count;
  if (config_.aggregation == LossAggregation::token_mean) {
    loss_weight = mask;
    metric_weight = mask;
    count = mask.sum();
  } else {
    metric_weight = mask / lengths.unsqueeze(1);
    count = num_sequences;
    if (config_.aggregation == LossAggregation::seq_mean_token_mean) loss_weight = metric_weight;
    else if (config_.aggregation == LossAggregation::seq_mean_token_sum) loss_weight = mask;
    else loss_weight = mask / static_cast<double>(max_new_tokens_);  // dr_grpo: Σ J / (N · L_max)
  }

  LossOutput out;
  out.loss_sum = (loss_weight * per_token).sum();
  out.count = count;
  const auto ratio_now = ratio.detach();
  const auto low = (ratio_now < 1.0 - config_.eps_low) & (advantage < 0);
  const auto high = (ratio_now > 1.0 + config_.eps_high) & (advantage > 0);
  auto& m = out.metric_sums;
  m["clip_fraction_low"] = (metric_weight * low.to(torch::kFloat)).sum();
  m["clip_fraction_high"] = (metric_weight * high.to(torch::kFloat)).sum();
  m["clip_fraction"] = (metric_weight * (low | high).to(torch::kFloat)).sum();
  m["advantage_abs"] = (metric_weight * advantage.abs()).sum();
  if (k3.defined()) m["kl_ref"] = (metric_weight * k3.detach()).sum();
  return out;
}

ValidationSums GrpoObjective::evaluate(LanguageModelImpl& model, const EvalSource& source) {
  return policy_->evaluate(model, source);
}

}  // namespace inkstone
