// The training loop shared by every objective (train/session.h): one update primitive, one cadence of logging,
// evaluation and checkpoints, one checkpoint format.
#include "train/session.h"

#include <cmath>
#include <cstdio>

#include <unistd.h>

#include <fmt/format.h>

#include "checkpoint/optimizer_state.h"
#include "checkpoint/rng_state.h"
#include "core/counter_hash.h"
#include "core/device_peak.h"
#include "core/memory_usage.h"
#include "core/progress.h"
#include "core/tensor_memory.h"
#include "core/utf8.h"
#include "models/auxiliary.h"
#include "train/lr_schedule.h"
#include "train/resume_check.h"
#include "train/stop_signal.h"

namespace inkstone {
namespace {

// On a terminal the progress line is redrawn in place: start a fresh line so the message stays visible.
void print_above_progress(const std::string& message) {
  fmt::print("{}{}\n", ::isatty(::fileno(stdout)) ? "\n" : "", message);
}

// The model's own updates after an optimizer step (models/auxiliary.h), from statistics summed over the ranks
// first, so that every rank updates alike (e.g. MoE's router bias from the global expert load).
void after_optimizer_step_on_all_ranks(LanguageModelImpl& model, Distributed& distributed,
                                       const torch::Tensor& applied) {
  if (distributed.active()) {
    auto statistics = rank_statistics(model);
    if (!statistics.empty()) distributed.all_reduce(statistics, ReduceOp::sum);
  }
  after_optimizer_step(model, applied);
}

// Peak resident memory of this process (rank 0's) so far; the most bytes of CPU tensors alive at once since the
// previous line (where the process counts them); on CUDA the allocator's peak since the previous line and what it
// holds now (docs/training.md, "Memory").
void add_memory(nlohmann::json& line, torch::Device device) {
  line["peak_rss_mib"] = peak_resident_mib();
  if (counting_cpu_tensor_memory()) {
    line["cpu_max_allocated_mib"] = cpu_tensor_peak_mib();
    reset_cpu_tensor_peak();
  }
  if (const auto cuda = cuda_memory(device)) {
    line["cuda_max_allocated_mib"] = cuda->max_allocated_mib;
    line["cuda_reserved_mib"] = cuda->reserved_mib;
    reset_cuda_peak(device);
  }
}

// An update's four figures in the order the host reads them (UpdateResult from_figures).
torch::Tensor update_figures(const AccumulatedStep& sums, const torch::Tensor& grad_norm,
                             const torch::Tensor& weights_finite) {
  return torch::stack({sums.loss_sum.to(torch::kDouble), sums.count.to(torch::kDouble), grad_norm.to(torch::kDouble),
                       weights_finite.to(torch::kDouble)});
}

// The update of `step` from its figures on the host; weights found non-finite end the run, naming the update of
// `broken_step` (the host path reads the previous update's finiteness, the device path the update's own).
UpdateResult from_figures(int64_t step, const torch::Tensor& host_figures, AccumulatedStep sums,
                          int64_t broken_step) {
  const double* figures = host_figures.data_ptr<double>();
  if (figures[3] == 0.0) throw non_finite_update(broken_step);
  UpdateResult u;
  u.step = step;
  u.units = figures[1];
  u.loss = figures[0] / std::max(u.units, 1.0);
  u.grad_norm = figures[2];
  u.sums = std::move(sums);
  return u;
}

}  // namespace

NonFiniteError non_finite_update(int64_t step) {
  return NonFiniteError(fmt::format(
      "the update of step {} made weights NaN or inf (check optim.learning_rate, optim.eps, optim.beta1/beta2 and "
      "optim.weight_decay); stopping, the last checkpoint is intact",
      step));
}

TrainingSession::TrainingSession(Config config, LanguageModel model, std::unique_ptr<Objective> objective,
                                 std::shared_ptr<const Tokenizer> tokenizer, std::filesystem::path run_dir,
                                 torch::Device device, std::shared_ptr<Distributed> distributed)
    : config_(std::move(config)),
      model_(std::move(model)),
      objective_(std::move(objective)),
      tokenizer_(std::move(tokenizer)),
      run_dir_(std::move(run_dir)),
      device_(device),
      autocast_(config_.run.precision == FloatFormat::bf16 && device.is_cuda()),
      spike_guard_(config_.train.spike_window, config_.train.spike_loss_z, config_.train.spike_grad_z),
      distributed_(distributed ? std::move(distributed) : std::make_shared<Distributed>()) {
  model_->to(device_);
  if (config_.run.param_dtype == FloatFormat::bf16) cast_parameters(*model_, torch::kBFloat16);
  model_->set_branch_execution(BranchExecution(config_.train.activation_checkpointing, nullptr));
  auto groups = split_parameter_groups(*model_, config_.optim.no_decay);
  if (auto own = objective_->trainable()) {
    own->to(device_);
    const auto extra = split_parameter_groups(*own, config_.optim.no_decay);
    for (const auto& [name, p] : extra.decay) groups.decay.emplace_back("objective." + name, p);
    for (const auto& [name, p] : extra.no_decay) groups.no_decay.emplace_back("objective." + name, p);
  }
  optimized_ = groups.decay;
  optimized_.insert(optimized_.end(), groups.no_decay.begin(), groups.no_decay.end());
  for (auto& [name, p] : optimized_) parameters_.push_back(p);

  std::vector<int64_t> gradient_owners;
  if (distributed_->active() && config_.distributed.zero_stage > 0) {
    const int64_t stage = config_.distributed.zero_stage;
    const auto units = model_->residency_units();
    std::vector<torch::Tensor> gathered;
    if (stage == 3)
      for (const auto& unit : units) gathered.insert(gathered.end(), unit.begin(), unit.end());
    zero_ = std::make_unique<ZeroSharding>(*distributed_, optimized_, stage, gathered);
    groups = {zero_->owned(groups.decay), zero_->owned(groups.no_decay)};
    if (stage >= 2) gradient_owners = zero_->owners();
    if (stage == 3) gathering_ = std::make_shared<ParameterGathering>(*distributed_, *zero_, units);
  }
  stepped_ = groups.decay;
  stepped_.insert(stepped_.end(), groups.no_decay.begin(), groups.no_decay.end());
  if (config_.run.param_dtype == FloatFormat::bf16) {
    masters_.emplace(stepped_);
    groups = masters_->optimized(groups);
  }
  optimizer_ = make_adamw(groups, config_.optim);
  decides_on_device_ = optimizer_->runs_fused_kernel() && !spike_guard_.enabled();

  if (distributed_->active()) {
    if (!distributed_->is_main()) seed_rank_stream(static_cast<uint64_t>(config_.run.seed), distributed_->rank());
    const auto bucket_bytes = static_cast<int64_t>(config_.distributed.bucket_mb * 1024 * 1024);
    synchroniser_ =
        std::make_unique<GradientSynchroniser>(*distributed_, optimized_, bucket_bytes, std::move(gradient_owners));
  }
}

void TrainingSession::resume(const CheckpointData& checkpoint, StepSource& source) {
  const std::string origin = fmt::format("checkpoint step {}", checkpoint.step);
  const auto changes =
      check_resume_config(config_from_string(checkpoint.config_toml, origin + " config.toml"), config_, origin);
  if (distributed_->is_main()) print_setting_changes(changes);
  load_module_weights(*model_, checkpoint.model, origin);
  if (auto own = objective_->trainable()) load_module_weights(*own, checkpoint.objective, origin + " objective");
  restore_optimizer(checkpoint, origin);
  restore_rank_rng(checkpoint.state, distributed_->rank(), distributed_->world_size(), checkpoint.step);
  if (const auto saved = checkpoint.state.find("spike_guard"); saved != checkpoint.state.end())
    spike_guard_.restore(*saved, origin);
  step_ = checkpoint.step;
  elapsed_before_s_ = state_number(checkpoint, "elapsed_s", 0.0);
  source.restore(checkpoint);
}

// A sharded optimizer state resumes on the ranks that wrote it; a whole one (unsharded, or consolidated) on any
// number of ranks, each taking its own shard's entries.
void TrainingSession::restore_optimizer(const CheckpointData& checkpoint, const std::string& origin) {
  if (checkpoint.optimizer_shards > 0) {
    if (!zero_ || checkpoint.optimizer_shards != distributed_->world_size())
      throw InputError(fmt::format(
          "{} holds its optimizer state in {} ZeRO shards, and this run has {} rank(s) with distributed.zero_stage "
          "= {}: resume with {} ranks and zero_stage 1, 2 or 3, or write a whole checkpoint with `inkstone checkpoint "
          "consolidate`",
          origin, checkpoint.optimizer_shards, distributed_->world_size(), config_.distributed.zero_stage,
          checkpoint.optimizer_shards));
    const auto file = optimizer_shard_file(distributed_->rank(), checkpoint.optimizer_shards);
    import_optimizer_state(read_optimizer_shard(checkpoint, distributed_->rank()), file);
    return;
  }
  const std::string file = "optimizer.safetensors";
  import_optimizer_state(adamw_state_subset(checkpoint.optimizer, optimized_, stepped_, file), file);
}

// AdamW's moments and, with bf16 weights, the master weights (train/master_weights.h).
void TrainingSession::import_optimizer_state(const NamedTensors& state, const std::string& file) {
  if (!masters_) {
    import_adamw_state(*optimizer_, stepped_, state, file);
    return;
  }
  import_adamw_state(*optimizer_, masters_->optimized(), state, file);
  masters_->import_values(state, file);
  masters_restored_ = true;
}

NamedTensors TrainingSession::export_optimizer_state() {
  if (!masters_) return export_adamw_state(*optimizer_, stepped_);
  NamedTensors state = export_adamw_state(*optimizer_, masters_->optimized());
  const NamedTensors values = masters_->export_values();
  state.insert(state.end(), values.begin(), values.end());
  return state;
}

double TrainingSession::learning_rate(int64_t k, int64_t total) const {
  return learning_rate_at(config_.schedule, config_.optim.learning_rate, k, total);
}

std::string TrainingSession::precision_label() const {
  if (masters_) return autocast_ ? "bf16 weights, fp32 master, bf16 autocast" : "bf16 weights, fp32 master";
  return autocast_ ? "bf16 autocast, fp32 weights" : "fp32";
}

double TrainingSession::elapsed_s() const {
  return elapsed_before_s_ +
         std::chrono::duration<double>(std::chrono::steady_clock::now() - session_start_).count();
}

void TrainingSession::log(const nlohmann::json& line) {
  if (log_) log_->append(line);
  if (tensorboard_) tensorboard_->append(line);
}

// Every rank samples (the forward of a ZeRO-3 model gathers weights from all of them); rank 0 logs. The samplers
// draw from their own generators, so training's random state is untouched and a resumed run samples alike.
void TrainingSession::log_samples(int64_t step) {
  model_->eval();
  const auto samples = sample_texts_();
  model_->train();
  nlohmann::json listed = nlohmann::json::array();
  for (const auto& [prompt, text] : samples)
    listed.push_back({{"prompt", valid_utf8(prompt)}, {"text", valid_utf8(text)}});
  log({{"step", step}, {"split", "samples"}, {"samples", listed}});
}

void TrainingSession::add_utilisation(nlohmann::json& line, double model_flops_per_s) const {
  if (model_flops_per_s <= 0) return;
  const double per_device_tflops = model_flops_per_s / static_cast<double>(distributed_->world_size()) / 1e12;
  line["tflops_per_s"] = per_device_tflops;
  if (peak_tflops_) line["mfu"] = per_device_tflops / *peak_tflops_;
}

std::vector<UpdateResult> TrainingSession::update(const std::vector<Batch>& micro_batches, double lr, int64_t step,
                                                  Settle settle) {
  if (!decides_on_device_) return {update_deciding_on_host(micro_batches, lr, step)};
  queue_update_deciding_on_device(micro_batches, lr, step);
  return settle_pending(settle == Settle::now ? 0 : 1);
}

std::vector<UpdateResult> TrainingSession::settle_updates() { return settle_pending(0); }

TrainingSession::Gradients TrainingSession::accumulate(const std::vector<Batch>& micro_batches, double lr) {
  set_learning_rate(*optimizer_, lr);
  optimizer_->zero_grad();
  if (masters_)  // the model's own gradients (an update skipped on the host leaves them)
    for (auto& p : parameters_) p.mutable_grad().reset();
  if (zero_) zero_->drop_foreign_gradients();
  Gradients g;
  g.sums = accumulate_gradients(*objective_, *model_, micro_batches, optimized_, autocast_, synchroniser_.get());
  g.grad_norm = zero_ ? zero_->clip_grad_norm(config_.optim.grad_clip)
                      : clip_grad_norm(parameters_, config_.optim.grad_clip);
  return g;
}

std::vector<torch::Tensor> TrainingSession::take_step(const torch::Tensor& skip) {
  if (masters_) masters_->take_gradients();
  std::vector<torch::Tensor> counted;
  if (skip.defined()) {
    counted = optimizer_->step_unless(skip);
  } else {
    optimizer_->step();
  }
  if (masters_) masters_->write_back();
  if (zero_) zero_->share_updated_parameters();
  const auto applied = skip.defined() ? 1 - skip : torch::ones({}, torch::TensorOptions().device(device_));
  after_optimizer_step_on_all_ranks(*model_, *distributed_, applied);
  weights_finite_ = zero_ ? zero_->all_weights_finite() : all_finite(parameters_);
  return counted;
}

bool TrainingSession::judge(const UpdateResult& u) {
  if (!std::isfinite(u.loss) || !std::isfinite(u.grad_norm)) {
    skip_update(u.step, {{"event", "skipped_non_finite"}, {"loss", u.loss}, {"grad_norm", u.grad_norm}},
                "a non-finite loss or gradient");
    return false;
  }
  // A batch without units (e.g. GFlowRL's filter removed every group) has no signal: no step, so weight decay
  // and stale moments do not move the weights.
  if (u.units == 0) {
    bad_in_a_row_ = 0;
    return false;
  }
  if (const SpikeVerdict spike = spike_guard_.check(u.loss, u.grad_norm); spike.skip) {
    skip_update(u.step,
                {{"event", "skipped_spike"}, {"loss", u.loss}, {"grad_norm", u.grad_norm}, {"loss_z", spike.loss_z},
                 {"grad_z", spike.grad_z}},
                "a loss or gradient-norm spike");
    return false;
  }
  bad_in_a_row_ = 0;
  return true;
}

UpdateResult TrainingSession::update_deciding_on_host(const std::vector<Batch>& micro_batches, double lr,
                                                      int64_t step) {
  Gradients g = accumulate(micro_batches, lr);
  // The decision needs these on the host, and the previous update's finiteness rides along: one transfer (one
  // device sync) per update.
  const auto host_figures = update_figures(g.sums, g.grad_norm, weights_finite_).cpu();
  UpdateResult u = from_figures(step, host_figures, std::move(g.sums), step);
  u.applied = judge(u);
  if (u.applied) {
    take_step({});
  } else {
    // The model's own updates see the skip too (e.g. MoE drops the skipped batch's expert loads).
    after_optimizer_step_on_all_ranks(*model_, *distributed_, torch::zeros({}, torch::TensorOptions().device(device_)));
  }
  return u;
}

// The host's rule as a tensor expression: the step is skipped where the loss or the gradient norm is not finite or
// the batch has no units; the kernel then leaves weights and moments (docs/training.md, "A step without host
// synchronisation"). The figures follow in a non-blocking copy, judged by the host when they arrive.
void TrainingSession::queue_update_deciding_on_device(const std::vector<Batch>& micro_batches, double lr,
                                                      int64_t step) {
  Gradients g = accumulate(micro_batches, lr);
  const auto step_taken = g.sums.loss_sum.isfinite().logical_and(g.grad_norm.isfinite()).logical_and(g.sums.count > 0);
  const auto skip = step_taken.logical_not().to(torch::kFloat);
  std::vector<torch::Tensor> counted = take_step(skip);
  pending_.push_back(
      {step, g.sums, HostCopy(update_figures(g.sums, g.grad_norm, weights_finite_)), std::move(counted)});
}

std::vector<UpdateResult> TrainingSession::settle_pending(size_t keep) {
  std::vector<UpdateResult> settled;
  while (pending_.size() > keep) {
    PendingUpdate p = std::move(pending_.front());
    pending_.pop_front();
    UpdateResult u = from_figures(p.step, p.figures.values(), std::move(p.sums), p.step + 1);
    u.applied = judge(u);
    if (!u.applied) optimizer_->uncount(p.counted);
    settled.push_back(std::move(u));
  }
  return settled;
}

void TrainingSession::skip_update(int64_t step, nlohmann::json line, const std::string& why) {
  ++skipped_updates_;
  line["step"] = step + 1;
  line["split"] = "train";
  log(line);
  if (++bad_in_a_row_ >= config_.train.max_bad_steps)
    throw std::runtime_error(fmt::format(
        "{} consecutive steps had {} (last at step {}); stopping. Lower optim.learning_rate or check the data",
        bad_in_a_row_, why, step + 1));
}

std::filesystem::path TrainingSession::save(const StepSource& source) {
  // Every rank's generators, gathered on rank 0 through the store.
  const auto rank_rng = distributed_->gather_to_main(fmt::format("rng/{}", step_), capture_rng_state().dump());
  const ResidentUnits whole = model_->whole_parameters();  // ZeRO-3: rank 0 writes every weight
  CheckpointData data;
  if (zero_) {
    // Each rank stages its shard; rank 0 collects them once every rank is done (the all-reduce is the barrier).
    data.optimizer_shards = distributed_->world_size();
    stage_optimizer_shard(run_dir_, step_, distributed_->rank(), data.optimizer_shards,
                          export_optimizer_state());
    distributed_->all_reduce({torch::ones({1}, torch::TensorOptions().device(device_))}, ReduceOp::sum);
  }
  if (!distributed_->is_main()) return {};
  data.step = step_;
  data.model = module_weights(*model_);
  if (auto own = objective_->trainable()) data.objective = module_weights(*own);
  if (!zero_) data.optimizer = export_optimizer_state();
  data.state = {{"elapsed_s", elapsed_s()},
                {"optimizer", adamw_hyperparameters(*optimizer_)},
                {"objective", objective_->name()},
                {"spike_guard", spike_guard_.state()}};
  data.state.update(source.checkpoint_state());
  data.state.update(run_rng_record(rank_rng));
  data.config_toml = config_to_toml(config_);
  data.tokenizer = tokenizer_->to_json();
  return save_checkpoint(run_dir_, data, config_.train.keep_checkpoints);
}

TrainResult TrainingSession::run(StepSource& source) {
  const auto& train = config_.train;
  session_start_ = std::chrono::steady_clock::now();
  // Only rank 0 writes metrics and draws progress.
  const int64_t first_step = step_;
  std::optional<ProgressBar> progress;
  if (distributed_->is_main()) {
    std::filesystem::create_directories(run_dir_);
    log_.emplace(run_dir_ / "metrics.jsonl", step_);  // a resumed run drops the lines past its checkpoint
    if (config_.metrics.tensorboard) {
      tensorboard_.emplace(run_dir_, step_ > 0 ? std::optional<int64_t>(step_) : std::nullopt);
      if (step_ == 0) tensorboard_->text(0, "config", config_to_toml(config_));
    }
    progress.emplace(source.name(), train.steps - first_step, ProgressBar::Unit::items);
  }
  TrainResult result;
  peak_tflops_ = bf16_peak_tflops(device_, config_.metrics.peak_tflops);
  model_->train();
  {
    std::vector<torch::Tensor> state = model_->parameters();
    for (const auto& buffer : model_->buffers()) state.push_back(buffer);
    if (auto own = objective_->trainable())
      for (const auto& p : own->parameters()) state.push_back(p);
    distributed_->broadcast_from_main(state);  // every rank starts from rank 0's weights
  }
  if (masters_ && !masters_restored_) masters_->adopt_parameters();
  weights_finite_ = all_finite(parameters_);
  if (gathering_) {
    // From here each rank keeps its own branch weights only (docs/training.md, "ZeRO").
    gathering_->release_foreign_weights();
    model_->set_branch_execution(BranchExecution(config_.train.activation_checkpointing, gathering_));
  }

  auto evaluate = [&](int64_t done) {
    EvalReport report = source.evaluate(*this);
    report.line["step"] = done;
    report.line["elapsed_s"] = elapsed_s();
    log(report.line);
    if (progress) print_above_progress(fmt::format("step {} {}", done, report.summary));
    return report.metrics;
  };
  if (step_ == 0 && source.evaluates_before_training()) evaluate(0);

  StopVote stop_vote(*distributed_, device_);
  while (step_ < train.steps) {
    StepReport report = source.step(*this, step_);
    const int64_t done = ++step_;
    if (report.line) {
      nlohmann::json& line = *report.line;
      line["step"] = done;
      line["split"] = "train";
      line["elapsed_s"] = elapsed_s();
      line["precision"] = precision_label();
      add_memory(line, device_);
      add_utilisation(line, report.model_flops_per_s);
      log(line);
      if (progress) progress->update(done - first_step, report.progress);
    }
    const bool last = done == train.steps;
    const bool samples = sample_texts_ && config_.metrics.sample_interval > 0 && done % config_.metrics.sample_interval == 0;
    const bool evaluates = (train.eval_interval > 0 && done % train.eval_interval == 0) || last;
    const int stop_signal = stop_vote.cast();
    const bool saves = (train.checkpoint_interval > 0 && done % train.checkpoint_interval == 0) || last || stop_signal;
    if (samples || evaluates || saves) source.settle(*this);  // every step done is judged before it is looked at
    if (samples) log_samples(done);
    if (evaluates) {
      auto metrics = evaluate(done);
      if (last) result.final_eval = metrics;
    }
    if (saves) result.last_checkpoint = save(source);
    if (stop_signal) {
      result.stop_signal = stop_signal;
      break;
    }
  }
  if (gathering_) {
    gathering_->make_whole_for_good();
    model_->set_branch_execution(BranchExecution(config_.train.activation_checkpointing, nullptr));
  }
  if (progress) progress->finish(step_ - first_step, fmt::format("step {}/{}", step_, train.steps));
  log_.reset();
  tensorboard_.reset();
  result.steps_done = step_;
  result.skipped_updates = skipped_updates_;
  return result;
}

}  // namespace inkstone
