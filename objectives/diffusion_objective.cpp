#include "objectives/diffusion_objective.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "core/counter_hash.h"
#include "core/errors.h"
#include "objectives/diffusion_time.h"

namespace inkstone {

torch::Tensor training_weight(const NoiseSchedule& schedule, const DiffusionConfig& config, const torch::Tensor& t) {
  const auto rate = schedule.log_snr_rate(t).abs();
  auto weight = config.weighting == "snr" ? torch::ones_like(rate) : rate;
  if (config.max_weight > 0) weight = weight.clamp_max(config.max_weight);
  return weight / rate;
}

DiffusionObjective::DiffusionObjective(const Config& config, const Tokenizer& tokenizer)
    : diffusion_(config.diffusion),
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
  const auto logits = model.forward(z, args).logits.to(torch::kFloat);
  DiffusionScores s;
  s.real = batch.real;
  s.nelbo = token_nelbo(logits, batch.tokens, z, alpha, schedule_->alpha_prime(t)).masked_fill(~s.real, 0.0);
  s.weighted = s.nelbo * training_weight(*schedule_, diffusion_, t);
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
  const int64_t per_row = diffusion_.per_token_t ? x.size(1) : 1;
  const auto t = sample_training_time(diffusion_, x.size(0), per_row, batch.first_row, batch.total_rows,
                                      x.device());
  const auto z = torch::where(batch.real, corrupt(x, schedule_->alpha(t), nullptr), x);
  const auto s = score(model, batch, t, z);
  LossOutput out;
  out.loss_sum = s.weighted.sum();
  out.count = s.real.sum().to(torch::kFloat);
  out.metric_sums["nelbo"] = s.nelbo.detach().sum();
  out.metric_sums["corrupted_fraction"] = s.corrupted.sum().to(torch::kFloat);
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
    const auto t = eval_time_grid(diffusion_.t_min, x.size(0));
    const auto z = torch::where(batch.real.cpu(), corrupt(x, schedule_->alpha(t), &generator), x);
    const auto s = score(model, batch, t.to(device), z.to(device));
    nelbo += s.nelbo.to(torch::kDouble).sum().item<double>();
    totals.units += s.real.sum().item<double>();
    corrupted += s.corrupted.sum().item<double>();
  }
  return totals;
}

}  // namespace inkstone
