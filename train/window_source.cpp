// Token-window steps for the training session (train/window_source.h).
#include "train/window_source.h"

#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/errors.h"
#include "core/host_copy.h"
#include "core/torch_compat.h"
#include "train/rank_metrics.h"

namespace inkstone {

namespace {

// An asynchronous copy the step does not wait for, then the dtype the batch holds.
torch::Tensor upload(const torch::Tensor& host, torch::Device device, torch::Dtype dtype) {
  return to_device_async(host, device).to(dtype);
}

}  // namespace

Batch token_batch_to_device(const TokenBatch& batch, int64_t row_begin, int64_t row_end, torch::Device device,
                            DocumentSplit documents) {
  const int64_t rows = row_end - row_begin;
  auto tokens = torch::from_blob(const_cast<int32_t*>(batch.tokens.data()) + row_begin * batch.cols,
                                 {rows, batch.cols}, torch::kInt32);
  const auto flags = [&](const std::vector<uint8_t>& values) {
    const auto host = torch::from_blob(const_cast<uint8_t*>(values.data()) + row_begin * batch.cols,
                                       {rows, batch.cols}, torch::kUInt8);
    return upload(host, device, torch::kBool);
  };
  Batch out{upload(tokens, device, torch::kLong), flags(batch.real), row_begin, batch.rows};
  if (documents.active()) out.documents = packed_documents(tokens, documents);
  if (!batch.trained.empty()) {
    out.loss_mask = flags(batch.trained);
    const auto host = torch::from_blob(const_cast<uint8_t*>(batch.conversations.data()) + row_begin, {rows},
                                       torch::kUInt8);
    out.conversations = upload(host, device, torch::kBool);
  }
  return out;
}

WindowEvalSource::WindowEvalSource(const WindowLoader& loader, int64_t batch_size, int64_t max_batches,
                                   torch::Device device, DocumentSplit documents, int64_t rank, int64_t ranks)
    : loader_(loader), batch_size_(batch_size), device_(device), documents_(documents), rank_(rank),
      ranks_(ranks) {
  const int64_t windows = loader.num_eval_windows();
  int64_t split_batches = (windows + batch_size - 1) / batch_size;
  if (max_batches > 0) split_batches = std::min(split_batches, max_batches);
  num_batches_ = std::max<int64_t>(0, (split_batches - rank + ranks - 1) / ranks);
}

Batch WindowEvalSource::batch(int64_t index) const {
  const int64_t first = split_index(index) * batch_size_;
  const int64_t count = std::min(batch_size_, loader_.num_eval_windows() - first);
  return token_batch_to_device(loader_.eval_batch(first, count), 0, count, device_, documents_);
}

WindowSource::WindowSource(TrainingSession& session, std::shared_ptr<const WindowLoader> train_data,
                           std::shared_ptr<const WindowLoader> val_data)
    : WindowSource(session, train_data, {{"", 1.0, train_data, std::move(val_data)}}) {}

WindowSource::WindowSource(TrainingSession& session, std::shared_ptr<const TrainWindows> train_data,
                           std::vector<MixtureSource> sources)
    : train_data_(std::move(train_data)),
      sources_(std::move(sources)),
      injection_(session.config().data, session.tokenizer(), train_data_->options().window_len),
      train_(session.config().train),
      seq_len_(session.config().data.seq_len),
      documents_(document_split(session.config().data, session.tokenizer(), session.objective().needs())),
      rank_(session.distributed().rank()),
      world_size_(session.distributed().world_size()),
      device_(session.device()) {
  if (session.objective().needs().consumes != BatchKind::windows)
    throw InputError(fmt::format("objective '{}' trains on rollouts, not token windows", session.objective().name()));
  if (train_.batch_size % (world_size_ * train_.grad_accum) != 0)
    throw InputError(fmt::format("train.batch_size = {} must be divisible by the number of ranks ({}) times "
                                 "train.grad_accum ({})",
                                 train_.batch_size, world_size_, train_.grad_accum));
  if (train_data_->options().rank != rank_)
    throw std::logic_error("a rank's training data must be opened with that rank");
  const auto& watch_text = session.config().metrics.watch_text;
  if (!watch_text.empty())
    watched_ = std::make_unique<TextEvalSource>(watch_text, session.tokenizer(), device_,
                                                session.model()->config().max_seq_len);
}

// `batch` is this rank's share of the global batch; its rows keep their global positions, so stratified draws
// see the same strata whatever the number of ranks.
Batch WindowSource::to_device(const TokenBatch& batch, int64_t row_begin, int64_t row_end) const {
  Batch rows = token_batch_to_device(batch, row_begin, row_end, device_, documents_);
  rows.first_row += rank_ * batch.rows;
  rows.total_rows = batch.rows * world_size_;
  return rows;
}

TokenBatch WindowSource::take_batch(int64_t step, int64_t rows) {
  TokenBatch batch = ahead_step_ == step && ahead_.valid() ? ahead_.get() : train_data_->train_batch(step, rows);
  ahead_step_ = -1;
  if (step + 1 < train_.steps) {
    ahead_step_ = step + 1;
    ahead_ = std::async(std::launch::async,
                        [data = train_data_, next = step + 1, rows] { return data->train_batch(next, rows); });
  }
  return batch;
}

// Between log lines the figures of an update are read one update late (Settle::later), so the host queues the
// next step while the device runs this one; a step that closes a log window reads every figure up to its own.
StepReport WindowSource::step(TrainingSession& session, int64_t step) {
  const auto started = std::chrono::steady_clock::now();
  const int64_t rank_batch = train_.batch_size / world_size_;
  const int64_t micro_batch = rank_batch / train_.grad_accum;
  const double lr = session.learning_rate(step, train_.steps);
  const int64_t done = step + 1;
  const bool closes_window = done % train_.log_interval == 0 || done == train_.steps;

  TokenBatch batch = take_batch(step, rank_batch);
  if (injection_.due(step)) batch = injection_.apply(std::move(batch), rank_);
  std::vector<Batch> micro_batches;
  for (int64_t m = 0; m < train_.grad_accum; ++m) {
    micro_batches.push_back(to_device(batch, m * micro_batch, (m + 1) * micro_batch));
    micro_batches.back().step = step;
  }
  for (UpdateResult& u : session.update(micro_batches, lr, step, closes_window ? Settle::now : Settle::later))
    count(std::move(u));

  window_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  StepReport report;
  if (window_steps_ == 0 || !closes_window) return report;
  nlohmann::json line = {{"tokens_seen", tokens_seen_},
                         {"loss", window_loss_ / static_cast<double>(window_steps_)},
                         {"lr", lr},
                         {"grad_norm", latest_.grad_norm},
                         {"tokens_per_s", static_cast<double>(window_tokens_) / std::max(window_seconds_, 1e-9)}};
  const double units = std::max(latest_.units, 1.0);
  for (auto& [name, value] : latest_.sums.metric_sums) line[name] = value.item<double>() / units;
  for (auto& [name, value] : latest_.sums.metric_mins) line[name] = value.item<double>();
  for (auto& [name, value] : latest_.sums.metric_maxes) line[name] = value.item<double>();
  report.progress = fmt::format("step {}/{}  loss {:.4f}  {:.0f} tok/s", done, train_.steps,
                                line["loss"].get<double>(), line["tokens_per_s"].get<double>());
  report.model_flops_per_s =
      line["tokens_per_s"].get<double>() * 3 * session.model()->forward_flops_per_token(seq_len_);
  report.line = std::move(line);
  window_seconds_ = 0;
  window_tokens_ = 0;
  window_loss_ = 0;
  window_steps_ = 0;
  return report;
}

void WindowSource::settle(TrainingSession& session) {
  for (UpdateResult& u : session.settle_updates()) count(std::move(u));
}

void WindowSource::count(UpdateResult u) {
  if (u.applied) {
    const int64_t tokens_per_step = train_.batch_size * seq_len_;
    tokens_seen_ += tokens_per_step;
    window_tokens_ += tokens_per_step;
    window_loss_ += u.loss;
    ++window_steps_;
    if (on_step) on_step(u.step + 1, u.loss);
  }
  latest_ = std::move(u);
}

// Each rank scores its share of the batches (docs/training.md, "Sharded validation") and the totals are summed
// over the ranks, in the precision the run trains in (a bf16 run's fp32 evaluation cost more than a training step).
std::map<std::string, double> WindowSource::evaluate_source(TrainingSession& session, const WindowLoader& val) {
  Distributed& distributed = session.distributed();
  WindowEvalSource source(val, train_.batch_size / train_.grad_accum, train_.eval_batches, device_, documents_,
                          distributed.rank(), distributed.world_size());
  ValidationSums totals = session.objective().evaluate(*session.model(), source);
  sum_over_ranks(totals, distributed, device_);
  return validation_metrics(totals, source.bytes_per_token());
}

// A mixture's figures are the weighted means of its sources' (the expected per-token figure of a window drawn as
// training draws them), each source's also on the line as val_<source>_<figure>.
EvalReport WindowSource::evaluate(TrainingSession& session) {
  LanguageModelImpl& model = *session.model();
  model.eval();
  compat::CudaAutocastScope autocast(session.autocast());
  EvalReport report;
  std::map<std::string, double> watched;
  std::vector<std::map<std::string, double>> per_source;
  {
    // Under ZeRO-3 the ranks score different numbers of batches, so they cannot gather weights branch by branch.
    const ResidentUnits whole = model.whole_parameters();
    for (const auto& source : sources_) per_source.push_back(evaluate_source(session, *source.val));
    // Every rank scores the watched text alike; it is not summed over ranks.
    if (watched_)
      watched = validation_metrics(session.objective().evaluate(model, *watched_), watched_->bytes_per_token());
  }
  model.train();
  double total_weight = 0;
  for (const auto& source : sources_) total_weight += source.weight;
  for (size_t i = 0; i < sources_.size(); ++i)
    for (const auto& [name, value] : per_source[i]) report.metrics[name] += sources_[i].weight / total_weight * value;
  // Not means: the tokens scored add up, and perplexity is that of the mean loss.
  report.metrics["tokens"] = 0;
  for (const auto& figures : per_source) report.metrics["tokens"] += figures.at("tokens");
  report.metrics["perplexity"] = std::exp(report.metrics.at("loss_nats"));
  report.line = {{"split", "val"}, {"tokens_seen", tokens_seen_}, {"loss", report.metrics.at("loss_nats")}};
  for (const auto& [name, value] : report.metrics) report.line[name] = value;
  if (sources_.size() > 1)
    for (size_t i = 0; i < sources_.size(); ++i)
      for (const auto& [name, value] : per_source[i]) report.line["val_" + sources_[i].name + "_" + name] = value;
  if (watched_) {
    report.line["watch_loss_nats"] = watched.at("loss_nats");
    report.line["watch_bits_per_byte"] = watched.at("bits_per_byte");
  }
  report.summary = fmt::format("val loss {:.4f} nats/token, {:.4f} bits/byte", report.metrics.at("loss_nats"),
                               report.metrics.at("bits_per_byte"));
  if (sources_.size() > 1) {
    std::vector<std::string> parts;
    for (size_t i = 0; i < sources_.size(); ++i)
      parts.push_back(fmt::format("{} {:.4f}", sources_[i].name, per_source[i].at("loss_nats")));
    report.summary += fmt::format(" ({})", fmt::join(parts, ", "));
  }
  return report;
}

nlohmann::json WindowSource::checkpoint_state() const {
  return {{"tokens_seen", tokens_seen_}};
}

void WindowSource::restore(const CheckpointData& checkpoint) {
  tokens_seen_ = state_count(checkpoint, "tokens_seen");
}

}  // namespace inkstone
