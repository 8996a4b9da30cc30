#include "objectives/diffusion_objective.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "core/counter_hash.h"
#include "core/errors.h"
#include "models/attention_mask.h"
#include "objectives/diffusion_time.h"
#include "objectives/z_loss.h"

namespace inkstone {

torch::Tensor training_weight(const NoiseSchedule& schedule, const DiffusionConfig& config, const torch::Tensor& t) {
  const auto rate = schedule.log_snr_rate(t).abs();
  auto weight = config.weighting == "snr" ? torch::ones_like(rate) : rate;
  if (config.max_weight > 0) weight = weight.clamp_max(config.max_weight);
  return weight / rate;
}

DiffusionObjective::DiffusionObjective(const Config& config, const Tokenizer& tokenizer)
    : diffusion_(config.diffusion),
      z_loss_(config.objective.z_loss),
      time_conditioning_(config.model.time_conditioning),
      padded_windows_(config.data.mode == "pad"),
      eval_seed_(static_cast<uint64_t>(config.run.seed)),
      schedule_(make_noise_schedule(config.diffusion)),
      support_(tokenizer, config.model.vocab_size > 0 ? config.model.vocab_size : tokenizer.vocab_size(),
               config.diffusion.noise_specials) {}

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

torch::Tensor DiffusionObjective::corrupt(const torch::Tensor& x, const torch::Tensor& alpha,
                                          at::Generator* generator) const {
  const auto options = torch::TensorOptions().dtype(alpha.scalar_type()).device(x.device());
  const auto u = generator ? torch::rand(x.sizes(), *generator, options) : torch::rand(x.sizes(), options);
  return torch::where(u < 1.0 - alpha, replacement(x, generator), x);
}

DiffusionScores DiffusionObjective::score(LanguageModelImpl& model, const Batch& batch, const torch::Tensor& t,
                                          const torch::Tensor& z) const {
  ForwardArgs args;
  args.mask = MaskMode::bidirectional;
  // Packed windows are always full; a padding mask there would only cost attention its fused kernel.
  if (padded_windows_) args.key_padding = batch.real;
  args.documents = batch.documents;
  const auto alpha = schedule_->alpha(t);
  if (model.config().time_conditioning) {
    TORCH_CHECK(t.size(1) == 1, "a time-conditioned model takes one t per sequence, not one per token");
    args.noise_level = -torch::log(alpha.squeeze(1));
  }
  torch::Tensor logits;
  if (diffusion_.block_size > 0) {
    // Block diffusion (docs/diffusion.md, "Block diffusion"): the model reads [x_0 | x_t], both halves at positions
    // 0..L−1, under the block-causal rule, and x_t's half gives the logits.
    const int64_t length = z.size(1);
    args.positions = torch::arange(length, batch.tokens.options()).repeat({2}).expand({z.size(0), 2 * length});
    args.allowed = block_diffusion_training_rule(length, diffusion_.block_size, z.device());
    if (args.key_padding.defined()) args.key_padding = torch::cat({batch.real, batch.real}, 1);
    logits = model.forward(torch::cat({batch.tokens, z}, 1), args).logits.narrow(1, length, length).to(torch::kFloat);
  } else {
    logits = model.forward(z, args).logits.to(torch::kFloat);
  }
  DiffusionScores s;
  s.real = batch.real;
  const auto terms = token_terms(logits, batch.tokens, z, alpha, schedule_->alpha_prime(t));
  s.nelbo = terms.nelbo.masked_fill(~s.real, 0.0);
  auto trained = terms.nelbo;
  if (terms.is_divergence.defined() && diffusion_.is_weight != 1.0)
    trained = trained + (diffusion_.is_weight - 1.0) * terms.is_divergence;
  s.weighted = (trained * training_weight(*schedule_, diffusion_, t)).masked_fill(~s.real, 0.0);
  if (z_loss_ > 0) s.log_z_squared = log_z_squared(logits).masked_fill(~s.real, 0.0);
  s.corrupted = z.ne(batch.tokens) & s.real;
  return s;
}

LossOutput DiffusionObjective::loss(LanguageModelImpl& model, const Batch& batch) {
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
  const auto z = torch::where(batch.real, corrupt(x, schedule_->alpha(t), nullptr), x);
  const auto s = score(model, batch, t, z);
  LossOutput out;
  out.loss_sum = s.weighted.sum();
  out.count = s.real.sum().to(torch::kFloat);
  out.metric_sums["nelbo"] = s.nelbo.detach().sum();
  out.metric_sums["corrupted_fraction"] = s.corrupted.sum().to(torch::kFloat);
  if (z_loss_ > 0) add_z_loss(out, s.log_z_squared, z_loss_);
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
    const Batch batch = source.batch(i);
    check_clean_tokens(batch);
    const auto device = batch.tokens.device();
    const auto x = batch.tokens.cpu();
    const int64_t blocks = diffusion_.block_size > 0 ? x.size(1) / diffusion_.block_size : 1;
    auto t = eval_time_grid(diffusion_.t_min, x.size(0) * blocks);
    if (blocks > 1) t = per_block_times(t, x.size(0), x.size(1));
    const auto z = torch::where(batch.real.cpu(), corrupt(x, schedule_->alpha(t), &generator), x);
    const auto s = score(model, batch, t.to(device), z.to(device));
    nelbo += s.nelbo.to(torch::kDouble).sum().item<double>();
    totals.units += s.real.sum().item<double>();
    corrupted += s.corrupted.sum().item<double>();
  }
  return totals;
}

}  // namespace inkstone
