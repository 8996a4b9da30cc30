#include "objectives/diffusion_objective.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "core/counter_hash.h"
#include "core/errors.h"
#include "core/host_copy.h"
#include "models/attention_mask.h"
#include "objectives/chunked_vocab.h"
#include "objectives/diffusion_time.h"
#include "objectives/z_loss.h"

namespace inkstone {

torch::Tensor training_weight(const NoiseProcess& noise, const DiffusionConfig& config, const torch::Tensor& t) {
  const auto rate = noise.log_snr_rate(t).abs();
  auto weight = config.weighting == LossWeighting::snr ? torch::ones_like(rate) : rate;
  if (config.max_weight > 0) weight = weight.clamp_max(config.max_weight);
  return weight / rate;
}

Batch with_responses_padded_by_eos(const Batch& batch, int64_t eos_id) {
  if (!batch.loss_mask.defined()) return batch;
  Batch padded = batch;
  const auto padding = ~batch.real & batch.conversations.unsqueeze(1);
  padded.tokens = batch.tokens.masked_fill(padding, eos_id);
  padded.real = batch.real | padding;
  padded.loss_mask = batch.loss_mask | padding;
  return padded;
}

torch::Tensor annealed_attention(int64_t step, int64_t anneal_steps, int64_t length, torch::Device device) {
  if (step < 0 || step >= anneal_steps) return {};
  const double share = static_cast<double>(step) / static_cast<double>(anneal_steps);
  const auto options = torch::TensorOptions().device(device);
  const auto earlier = torch::ones({length, length}, options.dtype(torch::kBool)).tril();
  return earlier | (torch::rand({length, length}, options.dtype(torch::kFloat)) < share);
}

torch::Tensor outputs_shifted_right(const torch::Tensor& per_position, const torch::Tensor& documents) {
  const int64_t length = per_position.size(1);
  if (length < 2) return per_position;
  const auto earlier = per_position.narrow(1, 0, length - 1);
  if (!documents.defined()) return torch::cat({per_position.narrow(1, 0, 1), earlier}, 1);
  auto continues = documents.narrow(1, 1, length - 1).eq(documents.narrow(1, 0, length - 1));  // [B, L − 1]
  if (continues.device() != per_position.device()) continues = to_device_async(continues, per_position.device());
  while (continues.dim() < per_position.dim()) continues = continues.unsqueeze(-1);
  const auto later = torch::where(continues, earlier, per_position.narrow(1, 1, length - 1));
  return torch::cat({per_position.narrow(1, 0, 1), later}, 1);
}

double prior_mask_share(const NoiseProcess& noise) {
  const NoiseLevelsAt at_one = noise.levels_at(1.0);
  return at_one.mask / (at_one.mask + at_one.uniform);
}

torch::Tensor prior_tokens(const NoiseProcess& noise, const NoiseSupport& support, int64_t mask_id,
                           const torch::Tensor& like, at::Generator* generator) {
  const double mask_share = prior_mask_share(noise);
  if (mask_share >= 1.0) return torch::full_like(like, mask_id);
  const auto drawn = support.sample_uniform(like, generator);
  if (mask_share <= 0) return drawn;
  const auto options = torch::TensorOptions().dtype(torch::kDouble).device(like.device());
  const auto u = generator ? torch::rand(like.sizes(), *generator, options) : torch::rand(like.sizes(), options);
  return torch::where(u < mask_share, torch::full_like(drawn, mask_id), drawn);
}

DiffusionObjective::DiffusionObjective(const Config& config, const Tokenizer& tokenizer,
                                       std::shared_ptr<const NoiseProcess> noise)
    : name_(config.objective.name),
      diffusion_(config.diffusion),
      z_loss_(config.objective.z_loss),
      logit_chunk_mib_(config.objective.logit_chunk_mib),
      time_conditioning_(config.model.time_conditioning),
      padded_windows_(config.data.mode == WindowMode::pad),
      eos_id_(tokenizer.specials().eos),
      attention_anneal_steps_(config.diffusion.attention_anneal_steps),
      eval_seed_(static_cast<uint64_t>(config.run.seed)),
      noise_(std::move(noise)),
      support_(tokenizer, config.model.vocab_size > 0 ? config.model.vocab_size : tokenizer.vocab_size(),
               config.diffusion.noise_specials),
      ids_{support_.size(), tokenizer.specials().mask} {
  if (noise_->masks() && ids_.mask_id < 0)
    throw InputError(fmt::format("objective {} needs a tokenizer with a mask token", name_));
}

ObjectiveNeeds DiffusionObjective::needs() const {
  ObjectiveNeeds needs;
  needs.mask = MaskMode::bidirectional;
  needs.time_input = time_conditioning_;
  needs.window_extra = 0;
  return needs;
}

void DiffusionObjective::check_clean_tokens(const Batch& batch) const {
  const auto& x = batch.tokens;
  const auto member = support_.member_mask(x.device());
  const int64_t vocab = member.size(0);
  const auto inside = x.ge(0) & x.lt(vocab) & member.index({x.clamp(0, vocab - 1)});
  const auto outside = batch.real & ~inside;
  if (!outside.any().item<bool>()) return;
  throw InputError(fmt::format(
      "clean token id {} is outside the diffusion noise support of {} ids, so its NELBO would be infinite "
      "(the support holds text ids and eos, other specials only with diffusion.noise_specials = true, never pad "
      "or mask)",
      x.masked_select(outside)[0].item<int64_t>(), support_.size()));
}

torch::Tensor DiffusionObjective::corrupt(const torch::Tensor& x, const torch::Tensor& t,
                                          at::Generator* generator) const {
  const NoiseLevels level = noise_->levels(t);
  const auto options = torch::TensorOptions().dtype(level.keep.scalar_type()).device(x.device());
  const auto u = generator ? torch::rand(x.sizes(), *generator, options) : torch::rand(x.sizes(), options);
  const auto mask = torch::full_like(x, ids_.mask_id);
  torch::Tensor replacement = mask;
  if (noise_->spreads()) {
    const auto drawn = support_.sample_uniform(x, generator);
    replacement = noise_->masks() ? torch::where(u < level.mask, mask, drawn) : drawn;
  }
  return torch::where(u < 1.0 - level.keep, replacement, x);
}

torch::Tensor DiffusionObjective::denoiser_hidden(LanguageModelImpl& model, const Batch& batch,
                                                 const torch::Tensor& t, const torch::Tensor& z) const {
  // Packed windows are always full; a padding mask there would only cost attention its fused kernel.
  const torch::Tensor key_padding = padded_windows_ ? batch.real : torch::Tensor();
  const NoiseLevels level = noise_->levels(t);
  torch::Tensor hidden;
  if (diffusion_.block_size > 0) {
    // Block diffusion (docs/diffusion.md, "Block diffusion"): the model reads [x_0 | x_t], both halves at positions
    // 0..L−1, under the block-causal rule, and x_t's half gives the logits. Its config checks rule out time
    // conditioning and packed documents.
    const int64_t length = z.size(1);
    RuleInputs ruled;
    ruled.positions = torch::arange(length, batch.tokens.options()).repeat({2}).expand({z.size(0), 2 * length});
    ruled.allowed = block_diffusion_training_rule(length, diffusion_.block_size, z.device());
    if (key_padding.defined()) ruled.key_padding = torch::cat({key_padding, key_padding}, 1);
    hidden = model.hidden_states_under_rule(torch::cat({batch.tokens, z}, 1), ruled).narrow(1, length, length);
  } else if (const auto allowed = annealed_attention(batch.step, attention_anneal_steps_, z.size(1), z.device());
             allowed.defined()) {
    RuleInputs ruled;
    ruled.allowed = allowed;
    ruled.key_padding = key_padding;
    hidden = model.hidden_states_under_rule(z, ruled);
  } else {
    WindowInputs window;
    window.mask = MaskMode::bidirectional;
    window.key_padding = key_padding;
    window.documents = batch.documents;
    if (model.config().time_conditioning) {
      TORCH_CHECK(t.size(1) == 1, "a time-conditioned model takes one t per sequence, not one per token");
      window.noise_level = -torch::log(level.keep.squeeze(1));
    }
    hidden = model.hidden_states(z, window);
  }
  return diffusion_.shifted_outputs ? outputs_shifted_right(hidden, batch.documents) : hidden;
}

DiffusionScores DiffusionObjective::score(LanguageModelImpl& model, const Batch& batch, const torch::Tensor& t,
                                          const torch::Tensor& z) const {
  const auto hidden = denoiser_hidden(model, batch, t, z);
  const NoiseLevels level = noise_->levels(t), rate = noise_->rates(t);
  // Per-token inputs of the terms, flattened to the rows the chunks take.
  const auto per_row = [&](const torch::Tensor& v) { return v.expand(z.sizes()).reshape(-1); };
  const auto scored = scored_tokens(batch);
  const auto x = per_row(batch.tokens), noisy = per_row(z), counted = per_row(scored);
  const auto per_row_levels = [&](const NoiseLevels& l) {
    return NoiseLevels{per_row(l.keep), per_row(l.mask), per_row(l.uniform)};
  };
  const NoiseLevels levels = per_row_levels(level), rates = per_row_levels(rate);
  const auto weight = per_row(training_weight(*noise_, diffusion_, t));
  const bool with_z = z_loss_ > 0;
  const double is_extra = diffusion_.is_weight - 1.0;
  const ChunkTermsFn terms = [&](const torch::Tensor& logits, int64_t begin) {
    const int64_t n = logits.size(0);
    const auto rows = [&](const torch::Tensor& v) { return v.narrow(0, begin, n); };
    const auto off = ~rows(counted);
    const auto rows_of = [&](const NoiseLevels& l) { return NoiseLevels{rows(l.keep), rows(l.mask), rows(l.uniform)}; };
    // x̂ over the support: the mask and padded ids at −inf (for masked noise, SUBS's "mask logit at −inf").
    const auto log_x_hat = torch::log_softmax(support_.restrict_logits(logits.to(torch::kFloat)), -1);
    const auto token = noise_->token_terms(log_x_hat, rows(x), rows(noisy), rows_of(levels), rows_of(rates), ids_);
    auto trained = token.nelbo;
    if (token.is_divergence.defined() && is_extra != 0.0) trained = trained + is_extra * token.is_divergence;
    std::vector<torch::Tensor> columns = {(trained * rows(weight)).masked_fill(off, 0.0),
                                          token.nelbo.masked_fill(off, 0.0)};
    if (with_z) columns.push_back(log_z_squared(logits).masked_fill(off, 0.0));
    return torch::stack(columns, 1);
  };
  std::vector<double> coefficients = {1.0, 0.0};
  if (with_z) coefficients.push_back(z_loss_);
  const auto head = model.head_weight();
  const auto out = chunked_vocab_loss(hidden.reshape({-1, hidden.size(-1)}), head, terms, coefficients,
                                      chunk_rows_for(head.size(0), logit_chunk_mib_, head.is_cuda()));
  const auto per_token = [&](int64_t column) { return out.terms.select(1, column).view(z.sizes()); };
  DiffusionScores s;
  s.loss = out.loss;
  s.scored = scored;
  s.weighted = per_token(0);
  s.nelbo = per_token(1);
  if (with_z) s.log_z_squared = per_token(2);
  s.corrupted = z.ne(batch.tokens) & s.scored;
  return s;
}

LossOutput DiffusionObjective::loss(LanguageModelImpl& model, const Batch& given) {
  const Batch batch = with_responses_padded_by_eos(given, eos_id_);
  // Once, not per batch: the check waits on the device, and the data of one tokenizer does not change its ids.
  if (!checked_) {
    check_clean_tokens(batch);
    checked_ = true;
  }
  const auto& x = batch.tokens;
  torch::Tensor t;
  if (diffusion_.block_size > 0) {
    // Each block draws its time as if it were a sequence of its own.
    const int64_t blocks = x.size(1) / diffusion_.block_size;
    t = per_block_times(sample_training_time(diffusion_, x.size(0) * blocks, diffusion_.block_size,
                                             batch.first_row * blocks, batch.total_rows * blocks, x.device()),
                        x.size(0), x.size(1));
  } else {
    t = sample_training_time(diffusion_, x.size(0), x.size(1), batch.first_row, batch.total_rows, x.device());
  }
  const auto z = torch::where(scored_tokens(batch), corrupt(x, t, nullptr), x);
  const auto s = score(model, batch, t, z);
  LossOutput out;
  out.loss_sum = s.loss;
  out.count = s.scored.sum().to(torch::kFloat);
  out.metric_sums["nelbo"] = s.nelbo.sum();
  out.metric_sums["corrupted_fraction"] = s.corrupted.sum().to(torch::kFloat);
  if (z_loss_ > 0) out.metric_sums["log_z_squared"] = s.log_z_squared.sum();
  return out;
}

ValidationSums DiffusionObjective::evaluate(LanguageModelImpl& model, const EvalSource& source) {
  torch::NoGradGuard no_grad;
  ValidationSums totals;
  double& nelbo = totals.sums["loss_nats"];
  double& corrupted = totals.sums["corrupted_fraction"];
  for (int64_t i = 0; i < source.num_batches(); ++i) {
    // Each batch's noise from its place in the whole split: the same whichever rank scores it.
    auto generator = at::detail::createCPUGenerator(
        counter_hash({eval_seed_, static_cast<uint64_t>(source.split_index(i))}));
    const Batch batch = with_responses_padded_by_eos(source.batch(i), eos_id_);
    check_clean_tokens(batch);
    const auto device = batch.tokens.device();
    const auto x = batch.tokens.cpu();
    const int64_t blocks = diffusion_.block_size > 0 ? x.size(1) / diffusion_.block_size : 1;
    auto t = eval_time_grid(diffusion_.t_min, x.size(0) * blocks);
    if (blocks > 1) t = per_block_times(t, x.size(0), x.size(1));
    const auto z = torch::where(scored_tokens(batch).cpu(), corrupt(x, t, &generator), x);
    const auto s = score(model, batch, t.to(device), z.to(device));
    nelbo += s.nelbo.to(torch::kDouble).sum().item<double>();
    totals.units += s.scored.sum().item<double>();
    corrupted += s.corrupted.sum().item<double>();
  }
  return totals;
}

}  // namespace inkstone
