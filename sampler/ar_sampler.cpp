#include "sampler/ar_sampler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include <fmt/format.h>
#include <torch/torch.h>

#include "core/errors.h"
#include "core/host_copy.h"
#include "core/platform.h"
#include "models/model_dims.h"
#include "sampler/decode_step.h"
#include "sampler/kernels/token_draw.h"

namespace inkstone {
namespace {

// The batch: every sample, or max_rows of them at a time.
int64_t decode_rows(const ArSampleOptions& options, int64_t prompts) {
  const int64_t samples = prompts * options.num_samples;
  return options.continuous && options.max_rows > 0 ? std::min(options.max_rows, samples) : samples;
}

void check_inputs(const LanguageModel& model, const std::vector<std::vector<int32_t>>& prompts,
                  const ArSampleOptions& options) {
  if (prompts.empty()) throw InputError("sampling needs at least one prompt");
  for (size_t p = 0; p < prompts.size(); ++p) {
    if (prompts[p].empty()) throw InputError(fmt::format("prompt {} is empty; start it with a token (e.g. bos)", p));
    for (int32_t id : prompts[p]) {
      if (id < 0 || id >= model->vocab_size())
        throw InputError(fmt::format("prompt {} has token id {} outside the vocabulary [0, {})", p, id,
                                     model->vocab_size()));
    }
  }
  const auto& s = options.sampling;
  if (options.num_samples < 1) throw InputError("sample.num must be >= 1");
  if (options.max_new_tokens < 1) throw InputError("sample.max_new_tokens must be >= 1");
  if (options.max_rows < 0) throw InputError(fmt::format("sample.batch_size = {} must be >= 0", options.max_rows));
  // Positions past the trained length have no meaning (RoPE never saw them) and the cache would grow unbounded.
  const int64_t max_len = model->config().max_seq_len;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const auto length = static_cast<int64_t>(prompts[p].size());
    if (length + options.max_new_tokens > max_len)
      throw InputError(fmt::format("prompt {} has {} tokens: with max_new_tokens = {} that is {} positions, more than "
                                   "model.max_seq_len = {}; shorten the prompt or lower max_new_tokens",
                                   p, length, options.max_new_tokens, length + options.max_new_tokens, max_len));
  }
  // The KV cache of every row at full length, plus a few [rows, V] float rows of logits per step. A hidden-stream
  // model's shared cache cannot refill rows, so every sample is a row, and each token holds one slot per stream.
  const ModelConfig& m = model->config();
  const int64_t samples = static_cast<int64_t>(prompts.size()) * options.num_samples;
  const auto rows = static_cast<double>(m.hidden_streams > 1 ? samples
                                                              : decode_rows(options, static_cast<int64_t>(prompts.size())));
  size_t longest = 0;
  for (const auto& prompt : prompts) longest = std::max(longest, prompt.size());
  const double length = static_cast<double>(longest) + static_cast<double>(options.max_new_tokens);
  const auto element = static_cast<double>(options.cache_dtype ? c10::elementSize(*options.cache_dtype)
                                                              : model->parameters().front().element_size());
  const double cache = kv_cache_bytes(m, rows, length, element);
  require_memory(cache + 4.0 * rows * model->vocab_size() * 4, model->parameters().front().device(),
                 fmt::format("sampling {} rows of {} positions", rows, length));
  check_sampling_params(s);
  if (options.decode == DecodeMode::cuda_graph) {
    if (!model->parameters().front().device().is_cuda()) throw InputError("CUDA graph decoding needs a CUDA device");
    const auto obstacle = graph_decode_obstacle(m);
    if (!obstacle.empty()) throw InputError("CUDA graph decoding cannot capture this model: " + obstacle);
    if (!options.use_kv_cache) throw InputError("CUDA graph decoding needs the KV cache");
  }
}

// Finished rows are noticed on the host every this many steps. A host read is free on the CPU; on a GPU it
// drains the queue, so there rows run a few steps past their end (the extra draws are dropped) between checks.
int64_t host_check_interval(torch::Device device) { return device.is_cuda() ? kCudaEndCheckInterval : 1; }

// The smallest power of two holding `active` rows, at most `rows`: the sizes a compacted batch takes, so that a
// CUDA graph captured for one serves every later compaction to it.
int64_t bucket_for(int64_t active, int64_t rows) {
  int64_t bucket = 1;
  while (bucket < active) bucket *= 2;
  return std::min(bucket, rows);
}

// One sample_autoregressive call (docs/sampling.md, "Continuous batching"): a queue of samples (prompt-major),
// rows that take the next one as they finish, keyed draws, ends noticed on the device and read on the host every
// host_check_interval steps, and compaction into smaller buckets once the queue is empty.
class DecodeRun {
 public:
  DecodeRun(LanguageModel& model, const std::vector<std::vector<int32_t>>& prompts, const ArSampleOptions& options,
            KeptRowDecoder* kept)
      : prompts_(prompts),
        options_(options),
        device_(model->parameters().front().device()),
        samples_(static_cast<int64_t>(prompts.size()) * options.num_samples),
        interval_(host_check_interval(device_)),
        width_(options.max_new_tokens + interval_),
        filter_{options.sampling.temperature, options.sampling.top_k, options.sampling.top_p, options.sampling.min_p,
                model->head_weight(HeadRows::tokens).size(0)} {
    size_t longest = 0;
    for (const auto& prompt : prompts) longest = std::max(longest, prompt.size());
    RowDecoderSpec spec;
    spec.rows = decode_rows(options, static_cast<int64_t>(prompts.size()));
    spec.capacity = static_cast<int64_t>(longest) + width_;
    spec.use_kv_cache = options.use_kv_cache;
    spec.decode = options.decode;
    spec.cache_dtype = options.cache_dtype;
    auto make = [&] { return kept ? kept->take(model, spec) : make_row_decoder(model, spec); };
    decoder_ = make();
    if (!decoder_->refills() && spec.rows < samples_) {  // (its buffers come with the first prefill: none yet)
      spec.rows = samples_;
      decoder_ = make();
    }
    graphs_before_ = decoder_->graphs_captured();
    rows_ = in_use_ = spec.rows;
    continuous_ = options.continuous && decoder_->refills();
    const auto i64 = torch::TensorOptions().dtype(torch::kLong).device(device_);
    sequence_ = torch::zeros({rows_}, i64);
    generated_ = torch::zeros({rows_}, i64);
    done_ = torch::ones({rows_}, i64.dtype(torch::kBool));
    history_ = torch::zeros({rows_, width_}, i64.dtype(torch::kInt));  // ids fit int32: half the bytes a check reads
    history_log_probs_ = torch::zeros({rows_, width_}, i64.dtype(torch::kFloat));
    if (!options.end_ids.empty()) {
      // A [V] mask read at the drawn ids: one gather whatever the number of end ids (torch::isin sorts, and syncs,
      // past a few dozen). Ids outside the vocabulary are never drawn.
      end_mask_ = torch::zeros({filter_.support_size}, torch::TensorOptions().dtype(torch::kBool));
      for (const int32_t id : options.end_ids)
        if (id >= 0 && id < filter_.support_size) end_mask_[id] = true;
      end_mask_ = end_mask_.to(device_);
    }
    row_sample_.assign(static_cast<size_t>(rows_), -1);
    generated_host_.resize(static_cast<size_t>(rows_));
    out_.resize(static_cast<size_t>(samples_));
  }

  std::vector<ArSample> run() {
    logits_ = torch::empty({rows_, filter_.support_size}, torch::TensorOptions().dtype(torch::kFloat).device(device_));
    std::vector<int64_t> all(static_cast<size_t>(rows_));
    for (int64_t r = 0; r < rows_; ++r) all[static_cast<size_t>(r)] = r;
    start(all);
    for (int64_t since_check = 1;; ++since_check) {
      auto tokens = draw();
      if (since_check % interval_ == 0) {
        if (!check()) break;
        if (continuous_ && next_sample_ == samples_) tokens = compact_if_sparse(tokens);
      }
      logits_ = decoder_->step(tokens);
      if (next_sample_ < samples_) start(idle_rows());
    }
    return std::move(out_);
  }

  bool graphed() const { return decoder_->graphed(); }
  int64_t graphs_captured() const { return decoder_->graphs_captured() - graphs_before_; }
  // After run(): the decoder goes back to `kept` for the next call.
  void hand_back(KeptRowDecoder& kept, const LanguageModel& model) { kept.keep(std::move(decoder_), model); }

 private:
  std::vector<int64_t> idle_rows() const {
    std::vector<int64_t> idle;
    for (int64_t r = 0; r < in_use_; ++r)
      if (row_sample_[static_cast<size_t>(r)] < 0) idle.push_back(r);
    return idle;
  }

  // Starts idle rows on the next waiting samples and puts their first logits in place.
  void start(const std::vector<int64_t>& idle) {
    std::vector<int64_t> rows, keys;
    std::vector<const std::vector<int32_t>*> prompts;
    for (const int64_t row : idle) {
      if (next_sample_ == samples_) break;
      const int64_t sample = next_sample_++;
      const int64_t prompt = sample / options_.num_samples;
      rows.push_back(row);
      prompts.push_back(&prompts_[static_cast<size_t>(prompt)]);
      keys.push_back((options_.first_prompt + prompt) * options_.num_samples + sample % options_.num_samples);
      row_sample_[static_cast<size_t>(row)] = sample;
      generated_host_[static_cast<size_t>(row)].clear();
    }
    if (rows.empty()) return;
    const auto first_logits = decoder_->start(rows, prompts);
    const auto index = torch::tensor(rows, torch::kLong).to(device_);
    sequence_.index_copy_(0, index, torch::tensor(keys, torch::kLong).to(device_));
    generated_.index_fill_(0, index, 0);
    done_.index_fill_(0, index, false);
    logits_.index_copy_(0, index, first_logits);
  }

  // One keyed draw per row in use, recorded in its history; rows that drew an end id or reached the length are
  // marked done on the device.
  torch::Tensor draw() {
    const auto generated = generated_.narrow(0, 0, in_use_);
    const auto drawn = keyed_token_draw(logits_.narrow(0, 0, in_use_), sequence_.narrow(0, 0, in_use_), generated,
                                        filter_, static_cast<uint64_t>(options_.seed));
    const auto column = generated.clamp_max(width_ - 1).unsqueeze(1);
    history_.narrow(0, 0, in_use_).scatter_(1, column, drawn.tokens.to(torch::kInt).unsqueeze(1));
    history_log_probs_.narrow(0, 0, in_use_).scatter_(1, column, drawn.log_probs.unsqueeze(1));
    generated.add_(1).clamp_max_(width_);
    auto ended = generated >= options_.max_new_tokens;
    if (end_mask_.defined()) ended |= end_mask_.index_select(0, drawn.tokens);
    done_.narrow(0, 0, in_use_) |= ended;
    return drawn.tokens;
  }

  // `packed` as the host reads it: on CUDA one transfer into pinned memory (the queue drains once per read, not
  // once per tensor); on the CPU the tensor itself.
  static torch::Tensor on_host(const torch::Tensor& packed) {
    return packed.is_cuda() ? HostCopy(packed).values() : packed;
  }

  // Reads the rows' ends on the host, where stop strings are checked too; finished rows hand their sample out and
  // fall idle. Returns whether any row is still running or any sample waits. Two reads at most: every row's end
  // mark and count [rows, 2] int32, then, where a row ended or stop strings are checked, the histories (on CUDA
  // tokens and log-prob bits side by side, [rows, 2·width] int32).
  bool check() {
    const auto rows = [&](const torch::Tensor& state) { return state.narrow(0, 0, in_use_); };
    const auto marks =
        on_host(torch::stack({rows(done_).to(torch::kInt), rows(generated_).to(torch::kInt)}, 1));
    const auto marks_at = marks.accessor<int32_t, 2>();
    bool any_done = false, running = false;
    for (int64_t r = 0; r < in_use_; ++r) {
      const bool busy = row_sample_[static_cast<size_t>(r)] >= 0;
      any_done |= busy && marks_at[r][0] != 0;
      running |= busy;
    }
    if (!any_done && !options_.stop_when) return running || next_sample_ < samples_;
    torch::Tensor tokens = rows(history_), log_probs = rows(history_log_probs_);
    if (device_.is_cuda()) {
      const auto both = on_host(torch::cat({tokens, log_probs.view(torch::kInt)}, 1));
      tokens = both.narrow(1, 0, width_);
      log_probs = both.narrow(1, width_, width_).view(torch::kFloat);
    }
    const auto tokens_at = tokens.accessor<int32_t, 2>();
    running = false;
    for (int64_t r = 0; r < in_use_; ++r) {
      if (row_sample_[static_cast<size_t>(r)] < 0) continue;
      const bool scan = marks_at[r][0] != 0 || options_.stop_when;
      running |= !scan || !scan_row(r, tokens_at[r], log_probs[r], marks_at[r][1]);
    }
    return running || next_sample_ < samples_;
  }

  // Walks row r's tokens drawn since its last check (`generated` drawn so far); at its first end id, stop or length
  // it hands the sample out and returns true.
  bool scan_row(int64_t r, const at::TensorAccessor<int32_t, 1>& tokens, const torch::Tensor& log_probs,
                int64_t generated) {
    const auto row = static_cast<size_t>(r);
    auto& so_far = generated_host_[row];
    const int64_t last = std::min(generated, options_.max_new_tokens);
    for (auto i = static_cast<int64_t>(so_far.size()); i < last; ++i) {
      so_far.push_back(tokens[i]);
      FinishReason finish = FinishReason::length;
      bool ended = std::find(options_.end_ids.begin(), options_.end_ids.end(), so_far.back()) != options_.end_ids.end();
      if (ended) {
        finish = FinishReason::eos;
      } else if (options_.stop_when && options_.stop_when(so_far)) {
        ended = true;
        finish = FinishReason::stop;
      }
      if (ended || i + 1 == options_.max_new_tokens) {
        auto& sample = out_[static_cast<size_t>(row_sample_[row])];
        sample.prompt_index = row_sample_[row] / options_.num_samples;
        sample.tokens = so_far;
        const auto lp = log_probs.narrow(0, 0, i + 1).contiguous();
        sample.log_probs.assign(lp.data_ptr<float>(), lp.data_ptr<float>() + i + 1);
        sample.finish = finish;
        row_sample_[row] = -1;
        return true;
      }
    }
    return false;
  }

  // With no sample waiting, rows still running move to the front of the smallest bucket that holds them once
  // they fill half of the batch or less; returns the tokens the moved rows feed next.
  torch::Tensor compact_if_sparse(const torch::Tensor& tokens) {
    std::vector<int64_t> kept;
    for (int64_t r = 0; r < in_use_; ++r)
      if (row_sample_[static_cast<size_t>(r)] >= 0) kept.push_back(r);
    const auto active = static_cast<int64_t>(kept.size());
    if (active == 0 || 2 * active > in_use_) return tokens;
    const int64_t bucket = bucket_for(active, rows_);
    decoder_->compact(kept, bucket);
    const auto index = torch::tensor(kept, torch::kLong).to(device_);
    for (auto* state : {&sequence_, &generated_, &done_, &history_, &history_log_probs_})
      state->narrow(0, 0, active).copy_(state->index_select(0, index));
    done_.narrow(0, active, rows_ - active).fill_(true);
    for (int64_t i = 0; i < active; ++i) {
      const auto from = static_cast<size_t>(kept[static_cast<size_t>(i)]);
      if (from == static_cast<size_t>(i)) continue;
      row_sample_[static_cast<size_t>(i)] = row_sample_[from];
      generated_host_[static_cast<size_t>(i)] = std::move(generated_host_[from]);
    }
    std::fill(row_sample_.begin() + active, row_sample_.end(), -1);
    in_use_ = bucket;
    auto next = torch::zeros({bucket}, tokens.options());
    next.narrow(0, 0, active).copy_(tokens.index_select(0, index));
    return next;
  }

  const std::vector<std::vector<int32_t>>& prompts_;
  const ArSampleOptions& options_;
  torch::Device device_;
  int64_t samples_;
  int64_t interval_;
  int64_t width_;  // history columns: max_new_tokens and the steps a row may run past its end before a check
  kernels::FilterParams filter_;
  std::unique_ptr<RowDecoder> decoder_;
  int64_t graphs_before_ = 0;  // graphs the decoder had captured in earlier calls
  int64_t rows_ = 0, in_use_ = 0;
  bool continuous_ = true;
  int64_t next_sample_ = 0;
  // Per row, on the device: its sample's key, tokens drawn, whether it ended, and what it drew.
  torch::Tensor sequence_, generated_, done_, history_, history_log_probs_;
  torch::Tensor end_mask_;  // [V] bool: the end ids
  torch::Tensor logits_;  // [rows in use, V]: what the next draw reads
  // Per row, on the host: its sample (−1: idle) and the tokens checked so far.
  std::vector<int64_t> row_sample_;
  std::vector<std::vector<int32_t>> generated_host_;
  std::vector<ArSample> out_;
};

}  // namespace

std::string to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::eos: return "eos";
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
  }
  return "length";
}

ArSampleResult sample_autoregressive(LanguageModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                     const ArSampleOptions& options, KeptRowDecoder* kept) {
  check_inputs(model, prompts, options);
  const auto start_time = std::chrono::steady_clock::now();
  c10::InferenceMode inference;
  DecodeRun run(model, prompts, options, kept);
  ArSampleResult result;
  result.samples = run.run();
  for (const auto& sample : result.samples) result.generated_tokens += static_cast<int64_t>(sample.tokens.size());
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  result.tokens_per_s = result.generated_tokens / std::max(result.seconds, 1e-9);
  result.cuda_graph = run.graphed();
  result.graphs_captured = run.graphs_captured();
  if (kept) run.hand_back(*kept, model);
  return result;
}

}  // namespace inkstone
