#include "rl/rl_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>
#include <sstream>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "core/checkpoint.h"
#include "core/counter_hash.h"
#include "core/errors.h"
#include "core/lr_schedule.h"
#include "core/metrics_log.h"
#include "core/module_weights.h"
#include "core/optimizer_state.h"
#include "core/progress.h"
#include "core/prompt_format.h"
#include "core/resume_check.h"
#include "core/rng_state.h"
#include "core/stop_signal.h"
#include "train/trainer.h"
#include "models/auxiliary.h"
#include "objectives/policy_log_probs.h"
#include "rl/policy_eval.h"
#include "sampler/rollout.h"

namespace inkstone {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

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
  out.rollout = {pick(r.policy),  pick(r.old_log_probs), pick(r.ref_log_probs), pick(r.rollout_log_probs),
                 pick(r.rewards), pick(r.groups)};
  return out;
}

double mean_of(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return values.empty() ? 0.0 : sum / static_cast<double>(values.size());
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The union of every rank's `names`, sorted, on every rank (`key` names this exchange in the store, so it must
// differ between calls). An objective may log a metric on one rank and not on another (GFlowRL's flow-gap
// percentiles need a non-degenerate group), and every rank must then reduce the same list. Collectives run on
// `device` (NCCL takes CUDA tensors only).
std::vector<std::string> names_on_any_rank(Distributed& distributed, const std::string& key,
                                           const std::vector<std::string>& names, torch::Device device) {
  std::string own;
  for (const auto& name : names) own += name + "\n";
  std::set<std::string> all;
  for (const auto& text : distributed.gather_to_main(key, own)) {
    std::istringstream lines(text);
    for (std::string name; std::getline(lines, name);) all.insert(name);
  }
  std::string joined;
  for (const auto& name : all) joined += name + "\n";
  auto size = torch::tensor({static_cast<int64_t>(joined.size())}, torch::kLong).to(device);
  distributed.broadcast_from_main({size});
  auto bytes = torch::zeros({size.item<int64_t>()}, torch::kUInt8);
  if (distributed.is_main()) std::memcpy(bytes.data_ptr(), joined.data(), joined.size());
  bytes = bytes.to(device);
  distributed.broadcast_from_main({bytes});
  bytes = bytes.cpu();
  std::istringstream lines(std::string(reinterpret_cast<const char*>(bytes.data_ptr()), bytes.numel()));
  std::vector<std::string> result;
  for (std::string name; std::getline(lines, name);) result.push_back(name);
  return result;
}

// One line's numbers over every rank: *_min and *_max take the extreme, throughputs (*_per_s) and `sums` add
// up, the rest are means over equally many rollouts (or problems) per rank, hence the mean of the ranks' values
// (for a per-token mean or a percentile: the mean of the ranks'). A metric some rank lacks is reduced over the
// ranks that have it.
void reduce_line_over_ranks(nlohmann::json& line, Distributed& distributed, const std::string& key,
                            torch::Device device, const std::set<std::string>& sums = {}) {
  if (!distributed.active()) return;
  std::vector<std::string> own;
  for (const auto& [name, value] : line.items())
    if (value.is_number()) own.push_back(name);
  const auto names = names_on_any_rank(distributed, key, own, device);
  const auto count = static_cast<int64_t>(names.size());
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  auto total = torch::zeros({count}, f64), present = torch::zeros({count}, f64);
  auto low = torch::full({count}, INFINITY, f64), high = torch::full({count}, -INFINITY, f64);
  for (int64_t i = 0; i < count; ++i) {
    if (!line.contains(names[i])) continue;
    const double v = line[names[i]].get<double>();
    total[i] = v, present[i] = 1.0, low[i] = v, high[i] = v;
  }
  std::vector<torch::Tensor> reduced = {total.to(device), present.to(device), low.to(device), high.to(device)};
  distributed.all_reduce({reduced[0], reduced[1]}, ReduceOp::sum);
  distributed.all_reduce({reduced[2]}, ReduceOp::min);
  distributed.all_reduce({reduced[3]}, ReduceOp::max);
  total = reduced[0].cpu(), present = reduced[1].cpu(), low = reduced[2].cpu(), high = reduced[3].cpu();
  for (int64_t i = 0; i < count; ++i) {
    const auto& name = names[i];
    if (ends_with(name, "_min")) {
      line[name] = low[i].item<double>();
    } else if (ends_with(name, "_max")) {
      line[name] = high[i].item<double>();
    } else {
      const bool summed = sums.count(name) || ends_with(name, "_per_s");
      line[name] = total[i].item<double>() / (summed ? 1.0 : present[i].item<double>());
    }
  }
}

}  // namespace

TaskOptions task_options(const RlConfig& rl, bool held_out) {
  TaskOptions o;
  o.name = rl.task;
  o.path = held_out && !rl.eval_path.empty() ? rl.eval_path : rl.task_path;
  o.size = rl.task_size;
  o.difficulty = rl.difficulty;
  o.seed = static_cast<uint64_t>(held_out ? rl.eval_seed : rl.task_seed);
  o.prompt_template = rl.prompt_template;
  return o;
}

PolicyEvalOptions policy_eval_options(const Config& config) {
  PolicyEvalOptions options;
  options.problems = config.rl.eval_prompts;
  options.rollout.group_size = config.rl.eval_samples;
  options.rollout.max_new_tokens = config.rl.max_new_tokens;
  options.rollout.sampling.temperature = config.rl.eval_temperature;
  options.rollout.seed = config.run.seed;
  options.rollout.stop = config.rl.stop;
  options.chat = config.chat;
  return options;
}

std::vector<WeightedReward> weighted_rewards(const RlConfig& rl) {
  std::vector<WeightedReward> rewards;
  for (const auto& entry : rl.rewards) {
    const auto eq = entry.find('=');
    WeightedReward reward;
    if (eq != std::string::npos) {
      try {
        size_t used = 0;
        reward.weight = std::stod(entry.substr(eq + 1), &used);
        if (used != entry.size() - eq - 1 || !std::isfinite(reward.weight)) throw std::invalid_argument(entry);
      } catch (const std::exception&) {
        throw InputError(
            fmt::format("rl.rewards entry '{}' must be \"name\" or \"name=weight\" with a finite weight", entry));
      }
    }
    reward.function = make_reward_function(entry.substr(0, eq), rl.task);
    rewards.push_back(reward);
  }
  if (rewards.empty()) throw InputError("rl.rewards is empty: name at least one reward (e.g. \"correct\")");
  return rewards;
}

struct RlTrainer::Update {
  double loss = 0;
  double grad_norm = 0;
  double grad_norm_max = 0;
  double lr = 0;
  double seconds = 0;
  nlohmann::json objective_metrics = nlohmann::json::object();
};

RlTrainer::RlTrainer(Config config, LanguageModel policy, std::unique_ptr<Objective> objective,
                     std::shared_ptr<const Tokenizer> tokenizer, std::filesystem::path run_dir, torch::Device device,
                     std::shared_ptr<Distributed> distributed)
    : config_(std::move(config)),
      policy_(std::move(policy)),
      objective_(std::move(objective)),
      tokenizer_(std::move(tokenizer)),
      run_dir_(std::move(run_dir)),
      device_(device),
      distributed_(distributed ? std::move(distributed) : std::make_shared<Distributed>()) {
  if (objective_->needs().consumes != BatchKind::rollouts)
    throw InputError(fmt::format("objective '{}' trains on token windows, not rollouts", objective_->name()));
  policy_->to(device_);
  if (config_.rl.reference == "initial") {
    reference_ = build_language_model(policy_->config(), policy_->vocab_size());
    load_module_weights(*reference_, module_weights(*policy_), "the initial policy");
    reference_->to(device_);
    reference_->eval();
    for (auto& p : reference_->parameters()) p.requires_grad_(false);
  }
  train_problems_ = make_prompt_source(task_options(config_.rl, false));
  eval_problems_ = make_prompt_source(task_options(config_.rl, true));
  rewards_ = weighted_rewards(config_.rl);
  auto groups = split_parameter_groups(*policy_, config_.optim.no_decay);
  if (auto own = objective_->trainable()) {
    own->to(device_);
    const auto extra = split_parameter_groups(*own, config_.optim.no_decay);
    for (const auto& [name, p] : extra.decay) groups.decay.emplace_back("objective." + name, p);
    for (const auto& [name, p] : extra.no_decay) groups.no_decay.emplace_back("objective." + name, p);
  }
  optimized_ = groups.decay;
  optimized_.insert(optimized_.end(), groups.no_decay.begin(), groups.no_decay.end());
  optimizer_ = make_adamw(groups, config_.optim);

  if (distributed_->active()) {
    const int64_t ranks = distributed_->world_size();
    const auto& rl = config_.rl;
    if (rl.prompts_per_step % (ranks * rl.mini_batches) != 0)
      throw InputError(fmt::format("rl.prompts_per_step = {} must be a multiple of {} ranks x rl.mini_batches = {}: "
                                   "each rank gives every mini-batch the same number of whole groups",
                                   rl.prompts_per_step, ranks, rl.mini_batches));
    if (rl.eval_prompts % ranks != 0)
      throw InputError(fmt::format("rl.eval_prompts = {} must be a multiple of the {} ranks that share them",
                                   rl.eval_prompts, ranks));
    // Every rank draws its own dropout masks; rank 0 keeps the single-process stream.
    if (!distributed_->is_main())
      torch::manual_seed(counter_hash({static_cast<uint64_t>(config_.run.seed),
                                       static_cast<uint64_t>(distributed_->rank())}));
    const auto bucket_bytes = static_cast<int64_t>(config_.distributed.bucket_mb * 1024 * 1024);
    synchroniser_ = std::make_unique<GradientSynchroniser>(*distributed_, optimized_, bucket_bytes);
  }
}

// One rollout batch: generate, score, annotate with the trainer's log-probs, update, and describe it. A rank
// draws its own share of the step's prompts (draw_prompts numbers them rank·count + i, so the ranks together
// hold the prompts one process draws) and samples them with its own seed.
nlohmann::json RlTrainer::rollout_step(int64_t step) {
  const auto& rl = config_.rl;
  const int64_t group = rl.group_size;
  const int64_t rank = distributed_->rank();
  const auto prompts = draw_prompts(*train_problems_, static_cast<uint64_t>(config_.run.seed), step, rank,
                                    rank_prompts());
  std::vector<std::vector<int32_t>> ids;
  const PromptFormat format(config_.chat, *tokenizer_);
  for (const auto& p : prompts) ids.push_back(format.encode(p.text));
  RolloutOptions options;
  options.end_ids = format.end_ids();
  options.group_size = group;
  options.max_new_tokens = rl.max_new_tokens;
  options.sampling.temperature = rl.temperature;
  options.sampling.top_p = rl.top_p;
  const auto seed = static_cast<uint64_t>(config_.run.seed);
  const uint64_t rollout_hash = rank == 0 ? counter_hash({seed, static_cast<uint64_t>(step)})
                                          : counter_hash({seed, static_cast<uint64_t>(step), static_cast<uint64_t>(rank)});
  options.seed = static_cast<int64_t>(rollout_hash >> 1);
  options.stop = rl.stop;
  options.decode = config_.sample.cuda_graphs ? DecodeMode::automatic : DecodeMode::growing_cache;
  Rollouts rollouts =
      generate_rollouts(policy_, *tokenizer_, ids, options, step * rl.prompts_per_step + rank * rank_prompts());

  const int64_t rows = static_cast<int64_t>(rollouts.completions.size());
  std::vector<double> rewards;
  double correct = 0, unparsed = 0;
  for (int64_t i = 0; i < rows; ++i) {
    const CombinedReward reward = combine_rewards(rewards_, prompts[i / group], rollouts.completions[i]);
    rewards.push_back(reward.total);
    correct += reward.correct;
    unparsed += !reward.parts.front().parsed;
  }
  Batch& batch = rollouts.batch;
  batch.rollout.rewards = torch::tensor(rewards, torch::kDouble).to(device_, torch::kFloat);

  nlohmann::json line;
  {
    torch::NoGradGuard no_grad;
    const auto old = policy_log_probs(*policy_, batch, rl.temperature, /*with_entropy=*/true);
    batch.rollout.old_log_probs = old.log_probs;
    const auto policy_tokens = batch.rollout.policy.sum().to(torch::kDouble);
    line["entropy"] = (old.entropy.sum() / policy_tokens).item<double>();
    // docs/rl.md, "Rollout drift": the sampler's and the trainer's log-probs of the same tokens at the same weights.
    const auto drift = (old.log_probs - batch.rollout.rollout_log_probs).sum(1).exp();
    line["rollout_drift_ratio_min"] = drift.min().item<double>();
    line["rollout_drift_ratio_mean"] = drift.mean().item<double>();
    line["rollout_drift_ratio_max"] = drift.max().item<double>();
    if (reference_) {
      batch.rollout.ref_log_probs = policy_log_probs(*reference_, batch, rl.temperature).log_probs;
      const auto log_gap = (batch.rollout.ref_log_probs - old.log_probs).masked_select(batch.rollout.policy);
      line["kl_old_ref_k3"] = (log_gap.exp() - log_gap - 1.0).mean().item<double>();
    }
  }
  for (const auto& [name, value] : objective_->rollout_metrics(batch)) line[name] = value;

  int64_t degenerate = 0;
  for (int64_t g = 0; g < rank_prompts(); ++g) {
    const auto first = rewards.begin() + g * group;
    const auto [low, high] = std::minmax_element(first, first + group);
    degenerate += *low == *high;
  }
  double square_sum = 0;
  for (double r : rewards) square_sum += r * r;
  std::vector<double> lengths(rollouts.lengths.begin(), rollouts.lengths.end());
  line["reward_mean"] = mean_of(rewards);
  line["reward_square_mean"] = square_sum / static_cast<double>(rows);
  line["accuracy"] = correct / static_cast<double>(rows);
  line["unparsed_fraction"] = unparsed / static_cast<double>(rows);
  line["degenerate_groups"] = static_cast<double>(degenerate) / static_cast<double>(rank_prompts());
  line["response_length_mean"] = mean_of(lengths);
  line["response_length_max"] = *std::max_element(lengths.begin(), lengths.end());
  line["truncated_fraction"] =
      static_cast<double>(std::count(rollouts.truncated.begin(), rollouts.truncated.end(), true)) /
      static_cast<double>(rows);
  line["rollout_tokens_per_s"] = rollouts.tokens_per_s;
  reduce_line_over_ranks(line, *distributed_, fmt::format("rl_rollouts_{}", step), device_);
  const double mean_reward = line["reward_mean"].get<double>();
  line["reward_std"] = std::sqrt(std::max(line["reward_square_mean"].get<double>() - mean_reward * mean_reward, 0.0));
  line.erase("reward_square_mean");

  const Update u = update(batch, step);
  line["loss"] = u.loss;
  line["grad_norm"] = u.grad_norm;
  line["grad_norm_max"] = u.grad_norm_max;
  line["lr"] = u.lr;
  nlohmann::json throughput = {
      {"train_tokens_per_s",
       batch.real.sum().item<double>() * static_cast<double>(rl.epochs) / std::max(u.seconds, 1e-9)}};
  reduce_line_over_ranks(throughput, *distributed_, fmt::format("rl_throughput_{}", step), device_);
  line.update(throughput);
  line.update(u.objective_metrics);  // reduced over the ranks with the gradients
  return line;
}

// rl.epochs passes of rl.mini_batches optimizer steps over one rollout batch; each mini-batch is whole groups,
// drawn in a fresh order every epoch (seeded by run.seed, step and epoch) so that no two epochs see the same
// mini-batches in the same order. With several ranks a mini-batch is each rank's share of its own groups, and
// the loss, unit count and gradient are sums over the ranks, so every rank takes the same step.
RlTrainer::Update RlTrainer::update(const Batch& rollouts, int64_t step) {
  const auto start = std::chrono::steady_clock::now();
  const auto& rl = config_.rl;
  const int64_t groups_per_mini_batch = rank_prompts() / rl.mini_batches;
  const int64_t total_optimizer_steps = config_.train.steps * rl.epochs * rl.mini_batches;
  const bool autocast = config_.run.precision == "bf16" && device_.is_cuda();
  std::vector<torch::Tensor> parameters;
  for (auto& [name, p] : optimized_) parameters.push_back(p);
  if (!weights_finite_.defined()) weights_finite_ = all_finite(parameters);

  Update u;
  std::map<std::string, torch::Tensor> sums, mins, maxes;  // on the device until the end of the update
  double count = 0;
  std::vector<double> losses, norms;
  for (int64_t epoch = 0; epoch < rl.epochs; ++epoch) {
    auto shuffle = torch::make_generator<torch::CPUGeneratorImpl>(counter_hash(
        {static_cast<uint64_t>(config_.run.seed), static_cast<uint64_t>(step), static_cast<uint64_t>(epoch)}));
    const auto group_order = torch::randperm(rank_prompts(), shuffle, torch::kLong);
    for (int64_t m = 0; m < rl.mini_batches; ++m) {
      u.lr = learning_rate_at(config_.schedule, config_.optim.learning_rate, optimizer_steps_++,
                              total_optimizer_steps);
      set_learning_rate(*optimizer_, u.lr);
      optimizer_->zero_grad();
      const Batch mini =
          select_groups(rollouts, group_order, m * groups_per_mini_batch, groups_per_mini_batch, rl.group_size);
      AccumulatedStep acc =
          accumulate_gradients(*objective_, *policy_, {mini}, optimized_, autocast, synchroniser_.get());
      // The step-or-skip decision needs these three on the host, and the previous update's finiteness rides
      // along: one transfer per mini-batch.
      const auto host = torch::stack({clip_grad_norm(parameters, config_.optim.grad_clip).to(torch::kDouble),
                                      acc.count.to(torch::kDouble), acc.loss_sum.to(torch::kDouble),
                                      weights_finite_.to(torch::kDouble)})
                            .cpu();
      if (host[3].item<double>() == 0.0) throw non_finite_update(step);
      const double norm = host[0].item<double>();
      const double units = host[1].item<double>();
      const double loss = host[2].item<double>() / std::max(units, 1.0);
      if (!std::isfinite(loss) || !std::isfinite(norm)) {
        ++skipped_updates_;
        if (++bad_in_a_row_ >= config_.train.max_bad_steps)
          throw std::runtime_error(fmt::format("{} consecutive updates had a non-finite loss or gradient; "
                                               "stopping. Lower optim.learning_rate or gflowrl.beta",
                                               bad_in_a_row_));
        continue;
      }
      bad_in_a_row_ = 0;
      // A mini-batch of degenerate groups only (GFlowRL's filter) has no units and no signal: no step, so
      // weight decay and stale moments do not move the policy.
      if (units == 0) continue;
      optimizer_->step();
      after_optimizer_step_on_all_ranks(*policy_, *distributed_);  // e.g. MoE's aux-loss-free router bias
      weights_finite_ = all_finite(parameters);
      losses.push_back(loss);
      norms.push_back(norm);
      count += units;
      for (auto& [name, v] : acc.metric_sums) sums[name] = sums.count(name) ? sums[name] + v : v;
      for (auto& [name, v] : acc.metric_mins) mins[name] = mins.count(name) ? torch::minimum(mins[name], v) : v;
      for (auto& [name, v] : acc.metric_maxes) maxes[name] = maxes.count(name) ? torch::maximum(maxes[name], v) : v;
    }
  }
  u.loss = mean_of(losses);
  u.grad_norm = mean_of(norms);
  u.grad_norm_max = norms.empty() ? 0.0 : *std::max_element(norms.begin(), norms.end());
  for (auto& [name, v] : sums) u.objective_metrics[name] = count > 0 ? v.item<double>() / count : 0.0;
  for (auto& [name, v] : mins) u.objective_metrics[name] = v.item<double>();
  for (auto& [name, v] : maxes) u.objective_metrics[name] = v.item<double>();
  u.objective_metrics["updates"] = static_cast<double>(losses.size());
  u.seconds = seconds_since(start);
  return u;
}

void RlTrainer::resume(const CheckpointData& checkpoint) {
  const std::string origin = fmt::format("checkpoint step {}", checkpoint.step);
  const auto changes =
      check_resume_config(config_from_string(checkpoint.config_toml, origin + " config.toml"), config_, origin);
  if (distributed_->is_main()) print_setting_changes(changes);
  load_module_weights(*policy_, checkpoint.model, origin);
  if (auto own = objective_->trainable()) load_module_weights(*own, checkpoint.objective, origin + " objective");
  import_adamw_state(*optimizer_, optimized_, checkpoint.optimizer, "optimizer.safetensors");
  restore_rank_rng(checkpoint.state, *distributed_, checkpoint.step);
  step_ = checkpoint.step;
  optimizer_steps_ = state_count(checkpoint, "optimizer_steps");
  elapsed_before_s_ = state_number(checkpoint, "elapsed_s", 0.0);
}

// Each rank takes an equal slice of the held-out problems (rl.eval_prompts is a multiple of the ranks), so the
// means over problems are the means of the ranks' means.
std::map<std::string, double> RlTrainer::evaluate() {
  auto options = policy_eval_options(config_);
  const int64_t share = options.problems / distributed_->world_size();
  options.first_problem = distributed_->rank() * share;
  options.problems = share;
  const auto metrics = evaluate_policy(policy_, *tokenizer_, *eval_problems_, rewards_, options);
  nlohmann::json line(metrics);
  reduce_line_over_ranks(line, *distributed_, fmt::format("rl_eval_{}", step_), device_, {"problems"});
  return line.get<std::map<std::string, double>>();
}

std::filesystem::path RlTrainer::save(double elapsed_s) {
  const nlohmann::json rank_state = rank_checkpoint_state(*distributed_, step_);
  if (!distributed_->is_main()) return {};
  CheckpointData data;
  data.step = step_;
  data.model = module_weights(*policy_);
  data.optimizer = export_adamw_state(*optimizer_, optimized_);
  if (auto own = objective_->trainable()) data.objective = module_weights(*own);
  data.state = {{"elapsed_s", elapsed_s},
                {"optimizer_steps", optimizer_steps_},
                {"rng", capture_rng_state()},
                {"optimizer", adamw_hyperparameters(*optimizer_)},
                {"objective", objective_->name()},
                {"init_checkpoint", config_.rl.init_checkpoint}};
  data.state.update(rank_state);
  data.config_toml = config_to_toml(config_);
  data.tokenizer = tokenizer_->to_json();
  return save_checkpoint(run_dir_, data, config_.train.keep_checkpoints);
}

RlResult RlTrainer::run() {
  const auto& train = config_.train;
  // Only rank 0 writes metrics and draws progress.
  std::optional<MetricsLog> log;
  std::optional<ProgressBar> progress;
  if (distributed_->is_main()) {
    std::filesystem::create_directories(run_dir_);
    log.emplace(run_dir_ / "metrics.jsonl", step_);  // a resumed run drops the lines past its checkpoint
    progress.emplace("rl", train.steps, ProgressBar::Unit::items);
  }
  const auto session_start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return elapsed_before_s_ + seconds_since(session_start); };
  RlResult result;
  policy_->train();
  {
    std::vector<torch::Tensor> state = policy_->parameters();
    for (const auto& buffer : policy_->buffers()) state.push_back(buffer);
    if (auto own = objective_->trainable())
      for (const auto& p : own->parameters()) state.push_back(p);
    distributed_->broadcast_from_main(state);  // every rank starts from rank 0's weights
  }

  auto log_eval = [&](int64_t done) {
    auto metrics = evaluate();
    nlohmann::json line = {{"step", done}, {"split", "eval"}, {"elapsed_s", elapsed()}};
    for (const auto& [name, value] : metrics) line[name] = value;
    if (log) {
      log->append(line);
      fmt::print("step {} held-out pass@1 {:.4f}\n", done, metrics.at("pass@1"));
    }
    return metrics;
  };
  if (step_ == 0) log_eval(0);

  while (step_ < train.steps) {
    nlohmann::json line = rollout_step(step_);
    const int64_t done = ++step_;
    line["step"] = done;
    line["split"] = "train";
    line["elapsed_s"] = elapsed();
    if (on_step) on_step(done, line);
    if (log) {
      log->append(line);
      progress->update(done, fmt::format("reward {:.3f}  accuracy {:.3f}", line["reward_mean"].get<double>(),
                                         line["accuracy"].get<double>()));
    }
    const bool last = done == train.steps;
    if ((train.eval_interval > 0 && done % train.eval_interval == 0) || last) {
      auto metrics = log_eval(done);
      if (last) result.final_eval = metrics;
    }
    const int stop_signal = stop_signal_on_any_rank(*distributed_, device_);
    if ((train.checkpoint_interval > 0 && done % train.checkpoint_interval == 0) || last || stop_signal)
      result.last_checkpoint = save(elapsed());
    if (stop_signal) {
      result.stop_signal = stop_signal;
      break;
    }
  }
  if (progress) progress->finish(step_, fmt::format("step {}/{}", step_, train.steps));
  result.steps_done = step_;
  result.skipped_updates = skipped_updates_;
  return result;
}

}  // namespace inkstone
