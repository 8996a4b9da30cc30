// Rollout steps for the training session (rl/rollout_source.h).
#include "rl/rollout_source.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "checkpoint/module_weights.h"
#include "core/counter_hash.h"
#include "core/errors.h"
#include "dataset/prompt_format.h"
#include "models/lora.h"
#include "rl/policy_eval.h"
#include "train/rank_metrics.h"

namespace inkstone {
namespace {

// The rows of whole groups `group_order[first_group, first_group + count)` of a rollout batch whose groups are
// `group_size` consecutive rows: a mini-batch never splits a group.
Batch select_groups(const Batch& batch, const torch::Tensor& group_order, int64_t first_group, int64_t count,
                    int64_t group_size) {
  const auto groups = group_order.narrow(0, first_group, count).to(batch.tokens.device());
  const auto offsets = torch::arange(group_size, groups.options());
  const auto rows = (groups.unsqueeze(1) * group_size + offsets).flatten();
  auto pick = [&](const torch::Tensor& t) { return t.defined() ? t.index_select(0, rows) : t; };
  Batch out;
  out.tokens = pick(batch.tokens);
  out.real = pick(batch.real);
  const auto& r = batch.rollout;
  auto& o = out.rollout;
  for (auto [to, from] : {std::pair{&o.policy, &r.policy}, {&o.old_log_probs, &r.old_log_probs},
                          {&o.ref_log_probs, &r.ref_log_probs}, {&o.rollout_log_probs, &r.rollout_log_probs},
                          {&o.rewards, &r.rewards}, {&o.groups, &r.groups}, {&o.noise_keys, &r.noise_keys},
                          {&o.trajectory, &r.trajectory}, {&o.transition_times, &r.transition_times},
                          {&o.transition_levels, &r.transition_levels}})
    *to = pick(*from);
  return out;
}

double mean_of(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return values.empty() ? 0.0 : sum / static_cast<double>(values.size());
}

}  // namespace

// What the updates of one rollout batch report: mean loss and gradient norm over the applied updates, the
// largest norm, the last learning rate, the objective's metrics, and the wall time.
struct RolloutSource::Updates {
  double loss = 0;
  double grad_norm = 0;
  double grad_norm_max = 0;
  double lr = 0;
  double seconds = 0;
  nlohmann::json objective_metrics = nlohmann::json::object();
};

RolloutSource::RolloutSource(TrainingSession& session)
    : rl_(session.config().rl),
      eval_options_(policy_eval_options(session.config())),
      chat_(session.config().chat),
      seed_(static_cast<uint64_t>(session.config().run.seed)),
      steps_(session.config().train.steps),
      cuda_graphs_(session.config().sample.cuda_graphs),
      rank_(session.distributed().rank()),
      world_size_(session.distributed().world_size()) {
  if (session.objective().needs().consumes != BatchKind::rollouts)
    throw InputError(fmt::format("objective '{}' trains on token windows, not rollouts", session.objective().name()));
  if (rl_.prompts_per_step % (world_size_ * rl_.mini_batches) != 0)
    throw InputError(fmt::format("rl.prompts_per_step = {} must be a multiple of {} ranks x rl.mini_batches = {}: "
                                 "each rank gives every mini-batch the same number of whole groups",
                                 rl_.prompts_per_step, world_size_, rl_.mini_batches));
  if (rl_.eval_prompts % world_size_ != 0)
    throw InputError(fmt::format("rl.eval_prompts = {} must be a multiple of the {} ranks that share them",
                                 rl_.eval_prompts, world_size_));
  LanguageModel& policy = session.model();
  // A LoRA policy's initial self is its frozen base with the adapters off (models/lora.h): no second copy.
  reference_is_base_ = rl_.reference == ReferencePolicy::initial && policy->config().lora_rank > 0;
  if (rl_.reference == ReferencePolicy::initial && !reference_is_base_) {
    reference_ = build_language_model(policy->config(), policy->vocab_size());
    cast_parameters(*reference_, parameter_dtype(*policy));  // bf16 weights (run.param_dtype): the same rounding
    load_module_weights(*reference_, module_weights(*policy), "the initial policy");
    reference_->to(session.device());
    reference_->eval();
    for (auto& p : reference_->parameters()) p.requires_grad_(false);
  }
  train_problems_ = make_prompt_source(task_options(rl_, false));
  eval_problems_ = make_prompt_source(task_options(rl_, true));
  rewards_ = weighted_rewards(rl_);
  rollouts_ = policy_rollouts(session.model(), session.config(), session.tokenizer());
  likelihood_ = make_policy_likelihood(session.config(), session.tokenizer());
}

// The prompts of one step on this rank and their rollouts.
struct RolloutSource::Generated {
  std::vector<Prompt> prompts;
  Rollouts rollouts;
};

// A rank draws its own share of the step's prompts (draw_prompts numbers them rank·count + i, so the ranks together
// hold the prompts one process draws) and samples them with the run's seed for this step: draws are keyed by
// global group, so a completion does not depend on the number of ranks.
RolloutSource::Generated RolloutSource::generate(TrainingSession& session, int64_t step) const {
  Generated out;
  out.prompts = draw_prompts(*train_problems_, seed_, step, rank_, rank_prompts());
  std::vector<std::vector<int32_t>> ids;
  const PromptFormat format(chat_, session.tokenizer());
  for (const auto& p : out.prompts) ids.push_back(format.encode(p.text));
  RolloutOptions options;
  options.end_ids = format.end_ids();
  options.group_size = rl_.group_size;
  options.max_new_tokens = rl_.max_new_tokens;
  options.sampling.temperature = rl_.temperature;
  options.sampling.top_p = rl_.top_p;
  const auto step_key = static_cast<uint64_t>(step);
  options.seed = static_cast<int64_t>(counter_hash({seed_, step_key}) >> 1);
  options.stop = rl_.stop;
  options.decode = cuda_graphs_ ? DecodeMode::automatic : DecodeMode::growing_cache;
  options.keep_decoder = rl_.keep_decoder;
  out.rollouts = rollouts_.generate(ids, options, step * rl_.prompts_per_step + rank_ * rank_prompts());
  return out;
}

// Each completion's combined reward, and how many were correct and how many could not be parsed.
RolloutSource::Scored RolloutSource::score(const Generated& generated) const {
  Scored out;
  const auto& completions = generated.rollouts.completions;
  for (size_t i = 0; i < completions.size(); ++i) {
    const CombinedReward reward =
        combine_rewards(rewards_, generated.prompts[i / static_cast<size_t>(rl_.group_size)], completions[i]);
    out.rewards.push_back(reward.total);
    out.correct += reward.correct;
    out.unparsed += !reward.parts.front().parsed;
  }
  return out;
}

// π_old's log-probs of the rollouts (and the reference's), with the entropy, the drift from the sampler's own
// log-probs (docs/rl.md, "Rollout drift") and the KL to the reference as metrics.
nlohmann::json RolloutSource::annotate_log_probs(TrainingSession& session, Batch& batch) {
  torch::NoGradGuard no_grad;
  nlohmann::json line;
  const auto old = likelihood_->log_probs(*session.model(), batch, /*with_entropy=*/true);
  batch.rollout.old_log_probs = old.log_probs;
  const auto policy_tokens = batch.rollout.policy.sum().to(torch::kDouble);
  line["entropy"] = (old.entropy.sum() / policy_tokens).item<double>();
  if (batch.rollout.rollout_log_probs.defined()) {  // a sampler that reports its log-probs (AR decoding)
    const auto drift = (old.log_probs - batch.rollout.rollout_log_probs).sum(1).exp();
    line["rollout_drift_ratio_min"] = drift.min().item<double>();
    line["rollout_drift_ratio_mean"] = drift.mean().item<double>();
    line["rollout_drift_ratio_max"] = drift.max().item<double>();
  }
  if (reference_ || reference_is_base_) {
    if (reference_) {
      batch.rollout.ref_log_probs = likelihood_->log_probs(*reference_, batch).log_probs;
    } else {
      const LoraOff base;
      batch.rollout.ref_log_probs = likelihood_->log_probs(*session.model(), batch).log_probs;
    }
    const auto log_gap = (batch.rollout.ref_log_probs - old.log_probs).masked_select(batch.rollout.policy);
    line["kl_old_ref_k3"] = (log_gap.exp() - log_gap - 1.0).mean().item<double>();
  }
  return line;
}

// The rewards' and completions' statistics of this rank, before they are reduced over the ranks.
void RolloutSource::add_rollout_statistics(nlohmann::json& line, const Scored& scored, const Rollouts& rollouts) const {
  const auto& rewards = scored.rewards;
  const auto rows = static_cast<double>(rewards.size());
  int64_t degenerate = 0;
  for (int64_t g = 0; g < rank_prompts(); ++g) {
    const auto first = rewards.begin() + g * rl_.group_size;
    const auto [low, high] = std::minmax_element(first, first + rl_.group_size);
    degenerate += *low == *high;
  }
  double square_sum = 0;
  for (double r : rewards) square_sum += r * r;
  std::vector<double> lengths(rollouts.lengths.begin(), rollouts.lengths.end());
  line["reward_mean"] = mean_of(rewards);
  line["reward_square_mean"] = square_sum / rows;
  line["accuracy"] = scored.correct / rows;
  line["unparsed_fraction"] = scored.unparsed / rows;
  line["degenerate_groups"] = static_cast<double>(degenerate) / static_cast<double>(rank_prompts());
  line["response_length_mean"] = mean_of(lengths);
  line["response_length_max"] = *std::max_element(lengths.begin(), lengths.end());
  line["truncated_fraction"] =
      static_cast<double>(std::count(rollouts.truncated.begin(), rollouts.truncated.end(), true)) / rows;
  line["rollout_tokens_per_s"] = rollouts.tokens_per_s;
}

// One rollout batch: generate, score, annotate with the trainer's log-probs, update, and describe it.
StepReport RolloutSource::step(TrainingSession& session, int64_t step) {
  // Under ZeRO-3 generation and the log-probs hold the whole policy: the ranks decode different numbers of steps,
  // so they cannot gather weights branch by branch in step.
  std::optional<ResidentUnits> whole_policy;
  whole_policy.emplace(session.model()->whole_parameters());
  Generated generated = generate(session, step);
  const Scored scored = score(generated);
  Batch& batch = generated.rollouts.batch;
  batch.rollout.rewards = torch::tensor(scored.rewards, torch::kDouble).to(session.device(), torch::kFloat);
  nlohmann::json line = annotate_log_probs(session, batch);
  whole_policy.reset();
  for (const auto& [name, value] : session.objective().rollout_metrics(batch)) line[name] = value;

  add_rollout_statistics(line, scored, generated.rollouts);
  reduce_line_over_ranks(line, session.distributed(), fmt::format("rl_rollouts_{}", step), session.device());
  const double mean_reward = line["reward_mean"].get<double>();
  line["reward_std"] = std::sqrt(std::max(line["reward_square_mean"].get<double>() - mean_reward * mean_reward, 0.0));
  line.erase("reward_square_mean");

  const Updates u = update(session, batch, step);
  line["loss"] = u.loss;
  line["grad_norm"] = u.grad_norm;
  line["grad_norm_max"] = u.grad_norm_max;
  line["lr"] = u.lr;
  nlohmann::json throughput = {
      {"train_tokens_per_s",
       batch.real.sum().item<double>() * static_cast<double>(rl_.epochs) / std::max(u.seconds, 1e-9)}};
  reduce_line_over_ranks(throughput, session.distributed(), fmt::format("rl_throughput_{}", step), session.device());
  line.update(throughput);
  line.update(u.objective_metrics);  // reduced over the ranks with the gradients
  if (on_step) on_step(step + 1, line);
  StepReport report;
  report.progress =
      fmt::format("reward {:.3f}  accuracy {:.3f}", line["reward_mean"].get<double>(), line["accuracy"].get<double>());
  report.model_flops_per_s = line["train_tokens_per_s"].get<double>() * 3 *
                             session.model()->forward_flops_per_token(batch.tokens.size(1));
  report.line = std::move(line);
  return report;
}

// rl.epochs passes of rl.mini_batches optimizer updates over one rollout batch; each mini-batch is whole groups,
// drawn in a fresh order every epoch (seeded by run.seed, step and epoch) so that no two epochs see the same
// mini-batches in the same order. With several ranks a mini-batch is each rank's share of its own groups, and
// the loss, unit count and gradient are sums over the ranks, so every rank takes the same step.
RolloutSource::Updates RolloutSource::update(TrainingSession& session, const Batch& rollouts, int64_t step) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t groups_per_mini_batch = rank_prompts() / rl_.mini_batches;
  const int64_t total_optimizer_steps = steps_ * rl_.epochs * rl_.mini_batches;
  Updates u;
  AccumulatedStep metrics;  // over the applied updates, on the device until the end
  double units = 0;
  std::vector<double> losses, norms;
  for (int64_t epoch = 0; epoch < rl_.epochs; ++epoch) {
    auto shuffle = torch::make_generator<torch::CPUGeneratorImpl>(
        counter_hash({seed_, static_cast<uint64_t>(step), static_cast<uint64_t>(epoch)}));
    const auto group_order = torch::randperm(rank_prompts(), shuffle, torch::kLong);
    for (int64_t m = 0; m < rl_.mini_batches; ++m) {
      u.lr = session.learning_rate(optimizer_steps_++, total_optimizer_steps);
      const Batch mini =
          select_groups(rollouts, group_order, m * groups_per_mini_batch, groups_per_mini_batch, rl_.group_size);
      const UpdateResult update = session.update({mini}, u.lr, step, Settle::now).back();  // rollouts wait anyway
      if (!update.applied) continue;
      losses.push_back(update.loss);
      norms.push_back(update.grad_norm);
      units += update.units;
      merge_accumulated_metrics(metrics, update.sums);
    }
  }
  u.loss = mean_of(losses);
  u.grad_norm = mean_of(norms);
  u.grad_norm_max = norms.empty() ? 0.0 : *std::max_element(norms.begin(), norms.end());
  for (auto& [name, v] : metrics.metric_sums) u.objective_metrics[name] = units > 0 ? v.item<double>() / units : 0.0;
  for (auto& [name, v] : metrics.metric_mins) u.objective_metrics[name] = v.item<double>();
  for (auto& [name, v] : metrics.metric_maxes) u.objective_metrics[name] = v.item<double>();
  u.objective_metrics["updates"] = static_cast<double>(losses.size());
  u.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return u;
}

// Each rank takes an equal slice of the held-out problems (rl.eval_prompts is a multiple of the ranks), so the
// means over problems are the means of the ranks' means.
EvalReport RolloutSource::evaluate(TrainingSession& session) {
  auto options = eval_options_;
  const int64_t share = options.problems / world_size_;
  options.first_problem = rank_ * share;
  options.problems = share;
  const ResidentUnits whole_policy = session.model()->whole_parameters();  // see step()
  nlohmann::json line(evaluate_policy(rollouts_, session.tokenizer(), *eval_problems_, rewards_, options));
  reduce_line_over_ranks(line, session.distributed(), fmt::format("rl_eval_{}", session.step()), session.device(),
                         {"problems"});
  EvalReport report;
  report.metrics = line.get<std::map<std::string, double>>();
  report.line = line;
  report.line["split"] = "eval";
  report.summary = fmt::format("held-out pass@1 {:.4f}", report.metrics.at("pass@1"));
  return report;
}

nlohmann::json RolloutSource::checkpoint_state() const {
  return {{"optimizer_steps", optimizer_steps_}, {"init_checkpoint", rl_.init_checkpoint}};
}

void RolloutSource::restore(const CheckpointData& checkpoint) {
  optimizer_steps_ = state_count(checkpoint, "optimizer_steps");
}

}  // namespace inkstone
