#include "objectives/gflowrl.h"

#include <cmath>

#include <fmt/format.h>

#include "objectives/group_stats.h"

namespace inkstone {

FlowGaps flow_gaps(const GflowrlConfig& config, const Batch& batch) {
  torch::NoGradGuard no_grad;
  const auto& rollout = batch.rollout;
  const RolloutGroups groups(rollout.groups);
  FlowGaps f;
  f.lengths = rollout.policy.sum(1).to(torch::kFloat).clamp_min(1.0);
  f.old_seq = rollout.old_log_probs.sum(1);
  const auto ref_seq = rollout.ref_log_probs.defined() ? rollout.ref_log_probs.sum(1) : f.old_seq;
  const auto drift = ref_seq - f.old_seq;  // d_i; 0 when the reference is π_old (docs/rl.md, "Reference model")
  const auto reward = config.beta * rollout.rewards.to(torch::kFloat);
  // docs/rl.md, "Length normalisation": `both` divides d by |y| inside log Ẑ and g; `paper` only inside g, so
  // its gaps need not sum to zero.
  const auto z_drift = config.norm == LengthNorm::both ? drift / f.lengths : drift;
  const auto gap_drift = config.norm == LengthNorm::none ? drift : drift / f.lengths;
  f.log_z = groups.mean(reward + z_drift);
  f.gap = f.log_z - gap_drift - reward;
  f.clipped = f.gap.clamp(-config.push_up, config.push_down);
  f.reward_part = groups.mean(reward) - reward;
  f.kept = config.filter_degenerate ? groups.varies(rollout.rewards) : torch::ones_like(rollout.policy.select(1, 0));
  return f;
}

GflowrlObjective::GflowrlObjective(const Config& config, const Tokenizer& tokenizer)
    : config_(config.gflowrl), policy_(make_policy_likelihood(config, tokenizer)) {
  // The asymmetric clip: correct answers are under-sampled early, so raising them should be allowed the larger step.
  if (config_.push_up < config_.push_down)
    fmt::print(stderr, "warning: gflowrl.push_up = {} < gflowrl.push_down = {}: good samples get the smaller step\n",
               config_.push_up, config_.push_down);
}

ObjectiveNeeds GflowrlObjective::needs() const {
  return policy_->needs();
}

// docs/rl.md, "One update", per mini-batch: L = Σ_kept w_i (g̃_i + n_ρ(ρ_i))² / G_kept.
LossOutput GflowrlObjective::loss(LanguageModelImpl& model, const Batch& batch) {
  const FlowGaps f = flow_gaps(config_, batch);
  const auto theta_seq = policy_->log_probs(model, batch).log_probs.sum(1);
  const auto rho = theta_seq - f.old_seq;
  const auto delta = f.clipped + (config_.norm == LengthNorm::none ? rho : rho / f.lengths);

  // docs/rl.md, "Importance correction": the weight is a constant of the update; the exponent is clamped before
  // exp so long sequences cannot overflow it.
  const auto log_ratio = (config_.is_ratio == ImportanceRatio::geometric ? rho / f.lengths : rho).detach();
  auto weight = log_ratio.clamp_max(10.0).exp().clamp_max(1.0 + config_.is_eps);
  const auto& rollout = batch.rollout;
  const bool truncated_is = config_.tis_cap > 0 && rollout.rollout_log_probs.defined();
  torch::Tensor tis;
  if (truncated_is) {
    // docs/rl.md, "Rollout drift": c_i = min(exp(ℓ^old − ℓ^roll), C), with the cap applied to the exponent so
    // it cannot overflow.
    tis = (f.old_seq - rollout.rollout_log_probs.sum(1)).clamp_max(std::log(config_.tis_cap)).exp();
    weight = weight * tis;
  }

  const auto kept = f.kept.to(torch::kFloat);
  LossOutput out;
  out.loss_sum = (kept * weight * delta.square()).sum();
  out.count = kept.sum();
  auto& m = out.metric_sums;
  m["log_z"] = (kept * f.log_z).sum();
  m["flow_gap_abs"] = (kept * f.gap.abs()).sum();
  m["reward_gap_abs"] = (kept * f.reward_part.abs()).sum();
  m["drift_gap_abs"] = (kept * (f.gap - f.reward_part).abs()).sum();
  m["saturated_push_up"] = (kept * (f.gap <= -config_.push_up).to(torch::kFloat)).sum();
  m["saturated_push_down"] = (kept * (f.gap >= config_.push_down).to(torch::kFloat)).sum();
  m["delta_abs"] = (kept * delta.detach().abs()).sum();
  m["is_weight"] = (kept * weight).sum();
  m["is_capped"] = (kept * (log_ratio >= std::log1p(config_.is_eps)).to(torch::kFloat)).sum();
  // Extremes over kept rollouts only; a batch without any reports the neutral weight 1.
  const auto kept_weights = torch::where(f.kept, weight, torch::ones_like(weight));
  out.metric_mins["is_weight_min"] = kept_weights.min();
  out.metric_maxes["is_weight_max"] = kept_weights.max();
  if (truncated_is) {
    m["tis_ratio"] = (kept * tis).sum();
    out.metric_maxes["tis_ratio_max"] = torch::where(f.kept, tis, torch::ones_like(tis)).max();
  }
  return out;
}

ValidationSums GflowrlObjective::evaluate(LanguageModelImpl& model, const EvalSource& source) {
  return policy_->evaluate(model, source);
}

std::map<std::string, double> GflowrlObjective::rollout_metrics(const Batch& batch) const {
  const FlowGaps f = flow_gaps(config_, batch);
  const auto kept_gaps = f.gap.masked_select(f.kept).abs().to(torch::kDouble);
  if (kept_gaps.numel() == 0) return {};
  const auto q = torch::quantile(kept_gaps, torch::tensor({0.5, 0.9, 0.99}, torch::kDouble));
  return {{"flow_gap_abs_p50", q[0].item<double>()},
          {"flow_gap_abs_p90", q[1].item<double>()},
          {"flow_gap_abs_p99", q[2].item<double>()}};
}

}  // namespace inkstone
