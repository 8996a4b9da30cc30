// The training loop. Each step draws one deterministic batch (a pure function of seed and step), splits it into
// micro-batches, accumulates loss sums, divides by the total count, clips, and applies AdamW.
#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>

#include <unistd.h>

#include <fmt/format.h>

#include "core/counter_hash.h"
#include "core/errors.h"
#include "core/lr_schedule.h"
#include "core/metrics_log.h"
#include "core/module_weights.h"
#include "core/optimizer_state.h"
#include "core/progress.h"
#include "core/resume_check.h"
#include "core/rng_state.h"
#include "core/stop_signal.h"
#include "core/torch_compat.h"
#include "models/auxiliary.h"

namespace inkstone {
namespace {

// On a terminal the progress line is redrawn in place: start a fresh line so the message stays visible.
void print_above_progress(const std::string& message) {
  fmt::print("{}{}\n", ::isatty(::fileno(stdout)) ? "\n" : "", message);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Folds one micro-batch's metrics into the step's with `combine` (sum, min or max).
template <typename Combine>
void merge_metrics(std::map<std::string, torch::Tensor>& into, const std::map<std::string, torch::Tensor>& from,
                   Combine combine) {
  for (const auto& [name, value] : from) {
    auto it = into.find(name);
    if (it == into.end())
      into.emplace(name, value.detach());
    else
      it->second = combine(it->second, value.detach());
  }
}

// Loss, count and metrics of the global batch: sums, minima and maxima over ranks, one collective each, issued in
// the same order on every rank.
void reduce_over_ranks(AccumulatedStep& acc, Distributed& distributed) {
  std::vector<torch::Tensor> sums{acc.loss_sum, acc.count}, mins, maxes;
  for (const auto& [name, value] : acc.metric_sums) sums.push_back(value);
  for (const auto& [name, value] : acc.metric_mins) mins.push_back(value);
  for (const auto& [name, value] : acc.metric_maxes) maxes.push_back(value);
  distributed.all_reduce(sums, ReduceOp::sum);
  distributed.all_reduce(mins, ReduceOp::min);
  distributed.all_reduce(maxes, ReduceOp::max);
}

}  // namespace

NonFiniteError non_finite_update(int64_t step) {
  return NonFiniteError(fmt::format(
      "the update of step {} made weights NaN or inf (check optim.learning_rate, optim.eps, optim.beta1/beta2 and "
      "optim.weight_decay); stopping, the last checkpoint is intact",
      step));
}

Batch token_batch_to_device(const TokenBatch& batch, int64_t row_begin, int64_t row_end, torch::Device device) {
  const int64_t rows = row_end - row_begin;
  auto tokens = torch::from_blob(const_cast<int32_t*>(batch.tokens.data()) + row_begin * batch.cols,
                                 {rows, batch.cols}, torch::kInt32);
  auto real = torch::from_blob(const_cast<uint8_t*>(batch.real.data()) + row_begin * batch.cols,
                               {rows, batch.cols}, torch::kUInt8);
  return {tokens.to(device, torch::kLong), real.to(device, torch::kBool), row_begin, batch.rows};
}

WindowEvalSource::WindowEvalSource(const WindowLoader& loader, int64_t batch_size, int64_t max_batches,
                                   torch::Device device, int64_t document_eos)
    : loader_(loader), batch_size_(batch_size), device_(device), document_eos_(document_eos) {
  const int64_t windows = loader.num_eval_windows();
  num_batches_ = (windows + batch_size - 1) / batch_size;
  if (max_batches > 0) num_batches_ = std::min(num_batches_, max_batches);
}

Batch WindowEvalSource::batch(int64_t index) const {
  const int64_t first = index * batch_size_;
  const int64_t count = std::min(batch_size_, loader_.num_eval_windows() - first);
  Batch batch = token_batch_to_device(loader_.eval_batch(first, count), 0, count, device_);
  if (document_eos_ >= 0) batch.documents = packed_documents(batch.tokens, document_eos_);
  return batch;
}

AccumulatedStep accumulate_gradients(Objective& objective, LanguageModelImpl& model,
                                     const std::vector<Batch>& micro_batches, const NamedTensors& parameters,
                                     bool autocast, GradientSynchroniser* across_ranks) {
  const auto device = micro_batches.front().tokens.device();
  AccumulatedStep acc;
  acc.loss_sum = torch::zeros({}, torch::dtype(torch::kFloat).device(device));
  acc.count = torch::zeros({}, torch::dtype(torch::kFloat).device(device));
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    const Batch& micro = micro_batches[m];
    take_auxiliary(model);  // drop what a forward outside this step left
    LossOutput out = [&] {
      compat::CudaAutocastScope scope(autocast);
      return objective.loss(model, micro);
    }();
    if (across_ranks && m + 1 == micro_batches.size()) across_ranks->arm();
    // The model's own regularisers (MoE balance, z-loss) are per-micro-batch means: weighted by the unit count,
    // they reach the gradient as a count-weighted mean; the logged loss stays the objective's.
    const AuxiliaryOutputs aux = take_auxiliary(model);
    (aux.loss.defined() ? out.loss_sum + aux.loss.to(out.loss_sum.dtype()) * out.count : out.loss_sum).backward();
    for (const auto& [name, value] : aux.metrics) out.metric_sums[name] = value * out.count;
    acc.loss_sum += out.loss_sum.detach().to(torch::kFloat);
    acc.count += out.count;
    merge_metrics(acc.metric_sums, out.metric_sums, [](auto a, auto b) { return a + b; });
    merge_metrics(acc.metric_mins, out.metric_mins, [](auto a, auto b) { return torch::minimum(a, b); });
    merge_metrics(acc.metric_maxes, out.metric_maxes, [](auto a, auto b) { return torch::maximum(a, b); });
  }
  if (across_ranks) {
    across_ranks->finish();
    reduce_over_ranks(acc, across_ranks->distributed());
  }
  // Gradients hold d(sum of unit losses); dividing by the total makes them d(mean) for any micro-batching.
  const auto inverse_count = 1.0 / acc.count.clamp_min(1.0);
  for (const auto& [name, p] : parameters)
    if (p.grad().defined()) p.grad().mul_(inverse_count);
  return acc;
}

void after_optimizer_step_on_all_ranks(LanguageModelImpl& model, Distributed& distributed) {
  if (distributed.active()) {
    auto statistics = rank_statistics(model);
    if (!statistics.empty()) distributed.all_reduce(statistics, ReduceOp::sum);
  }
  after_optimizer_step(model);
}

Trainer::Trainer(Config config, LanguageModel model, std::unique_ptr<Objective> objective,
                 std::shared_ptr<const Tokenizer> tokenizer, std::shared_ptr<const WindowLoader> train_data,
                 std::shared_ptr<const WindowLoader> val_data, std::filesystem::path run_dir, torch::Device device,
                 std::shared_ptr<Distributed> distributed)
    : config_(std::move(config)),
      model_(std::move(model)),
      objective_(std::move(objective)),
      tokenizer_(std::move(tokenizer)),
      train_data_(std::move(train_data)),
      val_data_(std::move(val_data)),
      run_dir_(std::move(run_dir)),
      device_(device) {
  model_->to(device_);
  auto groups = split_parameter_groups(*model_, config_.optim.no_decay);
  optimized_ = groups.decay;
  optimized_.insert(optimized_.end(), groups.no_decay.begin(), groups.no_decay.end());
  optimizer_ = make_adamw(groups, config_.optim);

  distributed_ = distributed ? std::move(distributed) : std::make_shared<Distributed>();
  if (distributed_->active()) {
    const int64_t ranks = distributed_->world_size();
    if (config_.train.batch_size % (ranks * config_.train.grad_accum) != 0)
      throw InputError(fmt::format("train.batch_size = {} must be divisible by the number of ranks ({}) times "
                                   "train.grad_accum ({})",
                                   config_.train.batch_size, ranks, config_.train.grad_accum));
    if (train_data_->options().rank != distributed_->rank())
      throw std::logic_error("a rank's training data must be opened with that rank");
    // Each rank draws its own noise (diffusion times and corruption); rank 0 keeps the single-process stream.
    if (!distributed_->is_main())
      torch::manual_seed(counter_hash({static_cast<uint64_t>(config_.run.seed),
                                       static_cast<uint64_t>(distributed_->rank())}));
    const auto bucket_bytes = static_cast<int64_t>(config_.distributed.bucket_mb * 1024 * 1024);
    synchroniser_ = std::make_unique<GradientSynchroniser>(*distributed_, optimized_, bucket_bytes);
  }
}

void Trainer::resume(const CheckpointData& checkpoint) {
  const std::string origin = fmt::format("checkpoint step {}", checkpoint.step);
  const auto changes =
      check_resume_config(config_from_string(checkpoint.config_toml, origin + " config.toml"), config_, origin);
  if (distributed_->is_main()) print_setting_changes(changes);
  load_module_weights(*model_, checkpoint.model, origin);
  import_adamw_state(*optimizer_, optimized_, checkpoint.optimizer, "optimizer.safetensors");
  restore_rank_rng(checkpoint.state, *distributed_, checkpoint.step);
  step_ = checkpoint.step;
  tokens_seen_ = state_count(checkpoint, "tokens_seen");
  elapsed_before_s_ = state_number(checkpoint, "elapsed_s", 0.0);
}

// `batch` is this rank's share of the global batch; its rows keep their global positions, so stratified draws
// see the same strata whatever the number of ranks.
Batch Trainer::to_device(const TokenBatch& batch, int64_t row_begin, int64_t row_end) const {
  Batch rows = token_batch_to_device(batch, row_begin, row_end, device_);
  rows.first_row += distributed_->rank() * batch.rows;
  rows.total_rows = batch.rows * distributed_->world_size();
  if (config_.data.document_mask) rows.documents = packed_documents(rows.tokens, tokenizer_->specials().eos);
  return rows;
}

std::map<std::string, double> Trainer::evaluate() {
  model_->eval();
  // Validation in the precision the run trains in (a bf16 run's fp32 evaluation cost more than a training step).
  compat::CudaAutocastScope autocast(config_.run.precision == "bf16" && device_.is_cuda());
  WindowEvalSource source(*val_data_, config_.train.batch_size / config_.train.grad_accum,
                          config_.train.eval_batches, device_,
                          config_.data.document_mask ? tokenizer_->specials().eos : -1);
  auto metrics = objective_->evaluate(*model_, source);
  model_->train();
  return metrics;
}

std::filesystem::path Trainer::save(double elapsed_s) {
  const nlohmann::json rank_state = rank_checkpoint_state(*distributed_, step_);
  if (!distributed_->is_main()) return {};
  CheckpointData data;
  data.step = step_;
  data.model = module_weights(*model_);
  data.optimizer = export_adamw_state(*optimizer_, optimized_);
  data.state = {{"tokens_seen", tokens_seen_},
                {"elapsed_s", elapsed_s},
                {"rng", capture_rng_state()},
                {"optimizer", adamw_hyperparameters(*optimizer_)},
                {"objective", objective_->name()},
                {"data_position", {{"step", step_}}}};
  data.state.update(rank_state);
  data.config_toml = config_to_toml(config_);
  data.tokenizer = tokenizer_->to_json();
  return save_checkpoint(run_dir_, data, config_.train.keep_checkpoints);
}

TrainResult Trainer::run() {
  const auto& train = config_.train;
  const int64_t rank_batch = train.batch_size / distributed_->world_size();
  const int64_t micro_batch = rank_batch / train.grad_accum;
  const int64_t tokens_per_step = train.batch_size * config_.data.seq_len;
  const bool autocast = config_.run.precision == "bf16" && device_.is_cuda();
  const bool main = distributed_->is_main();

  // Only rank 0 writes metrics and draws progress.
  std::optional<MetricsLog> log;
  std::optional<ProgressBar> progress;
  const int64_t first_step = step_;
  if (main) {
    std::filesystem::create_directories(run_dir_);
    log.emplace(run_dir_ / "metrics.jsonl", step_);  // drops lines past the resumed step
    progress.emplace("train", train.steps - first_step, ProgressBar::Unit::items);
  }
  TrainResult result;
  model_->train();
  {
    std::vector<torch::Tensor> state = model_->parameters();
    for (const auto& buffer : model_->buffers()) state.push_back(buffer);
    distributed_->broadcast_from_main(state);  // every rank starts from rank 0's weights
  }

  const auto session_start = std::chrono::steady_clock::now();
  auto window_start = session_start;
  int64_t window_tokens = 0;
  int64_t bad_in_a_row = 0;
  double loss_window = 0;  // sum of step losses since the last log line
  int64_t steps_in_window = 0;

  std::vector<torch::Tensor> parameters;
  for (auto& [name, p] : optimized_) parameters.push_back(p);
  torch::Tensor weights_finite = all_finite(parameters);  // after the latest update; read with the next step

  while (step_ < train.steps) {
    const double lr = learning_rate_at(config_.schedule, config_.optim.learning_rate, step_, train.steps);
    set_learning_rate(*optimizer_, lr);
    optimizer_->zero_grad();

    const TokenBatch batch = train_data_->train_batch(step_, rank_batch);
    std::vector<Batch> micro_batches;
    for (int64_t m = 0; m < train.grad_accum; ++m)
      micro_batches.push_back(to_device(batch, m * micro_batch, (m + 1) * micro_batch));
    AccumulatedStep acc =
        accumulate_gradients(*objective_, *model_, micro_batches, optimized_, autocast, synchroniser_.get());
    const torch::Tensor grad_norm = clip_grad_norm(parameters, config_.optim.grad_clip);
    // The skip decision needs both numbers on the host, and the previous update's finiteness rides along: one
    // transfer (one device sync) per step.
    const auto host = torch::stack({(acc.loss_sum / acc.count.clamp_min(1.0)).to(torch::kDouble),
                                    grad_norm.to(torch::kDouble), weights_finite.to(torch::kDouble)})
                          .cpu();
    const double loss = host[0].item<double>();
    const double norm = host[1].item<double>();
    if (host[2].item<double>() == 0.0) throw non_finite_update(step_);
    const int64_t done = ++step_;

    const bool finite = std::isfinite(loss) && std::isfinite(norm);
    if (!finite) {
      ++bad_in_a_row;
      ++result.skipped_steps;
      if (log)
        log->append({{"step", done}, {"split", "train"}, {"event", "skipped_non_finite"},
                     {"loss", loss}, {"grad_norm", norm}});
      if (bad_in_a_row >= train.max_bad_steps)
        throw std::runtime_error(fmt::format(
            "{} consecutive steps had a non-finite loss or gradient (last at step {}); stopping. "
            "Lower optim.learning_rate or check the data",
            bad_in_a_row, done));
    } else {
      bad_in_a_row = 0;
      optimizer_->step();
      after_optimizer_step_on_all_ranks(*model_, *distributed_);
      weights_finite = all_finite(parameters);
      tokens_seen_ += tokens_per_step;
      window_tokens += tokens_per_step;
      loss_window += loss;
      ++steps_in_window;
      if (on_step) on_step(done, loss);
    }

    const bool last = done == train.steps;
    if (steps_in_window > 0 && (done % train.log_interval == 0 || last)) {
      const double window_s = seconds_since(window_start);
      nlohmann::json line = {{"step", done},
                             {"tokens_seen", tokens_seen_},
                             {"split", "train"},
                             {"loss", loss_window / steps_in_window},
                             {"lr", lr},
                             {"grad_norm", norm},
                             {"tokens_per_s", window_tokens / std::max(window_s, 1e-9)},
                             {"elapsed_s", elapsed_before_s_ + seconds_since(session_start)}};
      const double units = std::max(acc.count.item<double>(), 1.0);
      for (auto& [name, value] : acc.metric_sums) line[name] = value.item<double>() / units;
      for (auto& [name, value] : acc.metric_mins) line[name] = value.item<double>();
      for (auto& [name, value] : acc.metric_maxes) line[name] = value.item<double>();
      if (log) {
        log->append(line);
        progress->update(done - first_step,
                         fmt::format("step {}/{}  loss {:.4f}  {:.0f} tok/s", done, train.steps,
                                     line["loss"].get<double>(), line["tokens_per_s"].get<double>()));
      }
      window_start = std::chrono::steady_clock::now();
      window_tokens = 0;
      loss_window = 0;
      steps_in_window = 0;
    }
    if ((train.eval_interval > 0 && done % train.eval_interval == 0) || last) {
      auto metrics = evaluate();  // every rank evaluates the same batches with the same weights
      nlohmann::json line = {{"step", done}, {"tokens_seen", tokens_seen_}, {"split", "val"},
                             {"elapsed_s", elapsed_before_s_ + seconds_since(session_start)}};
      for (auto& [name, value] : metrics) line[name] = value;
      line["loss"] = metrics.at("loss_nats");
      if (log) {
        log->append(line);
        print_above_progress(fmt::format("step {} val loss {:.4f} nats/token, {:.4f} bits/byte", done,
                                         metrics.at("loss_nats"), metrics.at("bits_per_byte")));
      }
      if (last) result.final_eval = metrics;
    }
    const int stop_signal = stop_signal_on_any_rank(*distributed_, device_);
    if ((train.checkpoint_interval > 0 && done % train.checkpoint_interval == 0) || last || stop_signal) {
      result.last_checkpoint = save(elapsed_before_s_ + seconds_since(session_start));
    }
    if (stop_signal) {
      result.stop_signal = stop_signal;
      break;
    }
  }
  if (progress) progress->finish(step_ - first_step, fmt::format("step {}/{}", step_, train.steps));
  result.steps_done = step_;
  return result;
}

}  // namespace inkstone
