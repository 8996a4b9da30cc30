#include "objectives/diffusion_policy.h"

#include <ATen/CPUGeneratorImpl.h>

#include "core/counter_hash.h"
#include "objectives/chunked_vocab.h"
#include "objectives/transition_log_prob.h"

namespace inkstone {
namespace {

// One position's term from log x̂ [n, V] (over the support, tempered) of flattened rows [begin, begin + n).
using PositionTerm = std::function<torch::Tensor(const torch::Tensor& log_x_hat, int64_t begin)>;

// The head over hidden [R, W, d] in row chunks (objectives/chunked_vocab.h), differentiable: per position `term`
// and, with_entropy, x̂'s entropy, both 0 where `scored` [R·W] is false. [R, W, 1 or 2].
torch::Tensor position_terms(LanguageModelImpl& model, const torch::Tensor& hidden, const torch::Tensor& scored,
                             const NoiseSupport& support, double temperature, bool with_entropy,
                             int64_t logit_chunk_mib, const PositionTerm& term) {
  const auto restricted = std::make_shared<NoiseSupport>(support);
  // By value: backward calls it again after this function has returned.
  const ChunkTermsFn terms = [=](const torch::Tensor& logits, int64_t begin) {
    const auto off = ~scored.narrow(0, begin, logits.size(0));
    const auto log_x_hat =
        torch::log_softmax(restricted->restrict_logits(logits.to(torch::kFloat)) / temperature, -1);
    std::vector<torch::Tensor> columns = {term(log_x_hat, begin).masked_fill(off, 0.0)};
    if (with_entropy) {
      // exp(−inf) · (−inf) off the support: those ids carry no mass.
      const auto p = log_x_hat.exp();
      columns.push_back(-(p * log_x_hat.masked_fill(p.eq(0), 0.0)).sum(-1).masked_fill(off, 0.0));
    }
    return torch::stack(columns, 1);
  };
  const auto head = model.head_weight();
  return chunked_vocab_terms(hidden.reshape({-1, hidden.size(-1)}), head, terms,
                             chunk_rows_for(head.size(0), logit_chunk_mib, head.is_cuda()))
      .view({hidden.size(0), hidden.size(1), -1});
}

}  // namespace

Config DiffusionPolicy::policy_config(const Config& config) {
  Config policy = policy_model_config(config);
  policy.data.mode = WindowMode::pack;  // denoised rollouts fill their rows: no padding to mask
  return policy;
}

DiffusionPolicy::DiffusionPolicy(const Config& config, const Tokenizer& tokenizer,
                                 std::shared_ptr<const NoiseProcess> noise)
    : denoiser_(policy_config(config), tokenizer, std::move(noise)),
      likelihood_(config.rl.likelihood),
      elbo_samples_(config.rl.elbo_samples),
      prompt_mask_(config.rl.prompt_mask),
      t_min_(config.diffusion.t_min),
      temperature_(config.rl.temperature),
      logit_chunk_mib_(config.objective.logit_chunk_mib),
      sampler_steps_(config.sample.steps) {}

ObjectiveNeeds DiffusionPolicy::needs() const {
  ObjectiveNeeds needs = denoiser_.needs();
  needs.consumes = BatchKind::rollouts;
  return needs;
}

int64_t DiffusionPolicy::copies() const { return likelihood_ == SequenceLikelihood::elbo ? elbo_samples_ : 1; }

int64_t DiffusionPolicy::forward_rows_per_rollout() const {
  return likelihood_ == SequenceLikelihood::transitions ? sampler_steps_ + 1 : copies();
}

DiffusionPolicy::Draws DiffusionPolicy::draw(const Batch& batch) const {
  const auto& rollout = batch.rollout;
  TORCH_CHECK(rollout.noise_keys.defined(), "a diffusion policy's rollouts carry noise keys");
  const auto keys = rollout.noise_keys.cpu().contiguous();
  const auto key_at = keys.accessor<int64_t, 1>();
  const auto tokens = batch.tokens.cpu(), policy = rollout.policy.cpu(), real = batch.real.cpu();
  const int64_t k = copies();
  std::vector<torch::Tensor> times, noisy;
  for (int64_t b = 0; b < tokens.size(0); ++b) {
    auto generator = at::detail::createCPUGenerator(counter_hash({static_cast<uint64_t>(key_at[b])}));
    const auto x = tokens[b].unsqueeze(0).expand({k, tokens.size(1)});
    if (likelihood_ == SequenceLikelihood::elbo) {
      const auto u = torch::rand({1}, generator, torch::kDouble);
      const auto t = (t_min_ + (1.0 - t_min_) * (torch::arange(k, torch::kDouble) + u) / static_cast<double>(k))
                         .to(torch::kFloat)
                         .unsqueeze(1);
      times.push_back(t);
      noisy.push_back(torch::where(policy[b], denoiser_.corrupt(x, t, &generator), x));
    } else {
      // The sampler's first step: the completion drawn whole from the prior at t = 1.
      const auto prompt = real[b] & ~policy[b];
      const auto noised = policy[b] | (prompt & torch::rand({tokens.size(1)}, generator, torch::kDouble).lt(prompt_mask_));
      times.push_back(torch::ones({1, 1}, torch::kFloat));
      noisy.push_back(torch::where(
          noised, prior_tokens(*denoiser_.noise(), denoiser_.support(), denoiser_.ids().mask_id, x, &generator), x));
    }
  }
  return {torch::cat(times), torch::cat(noisy)};
}

PolicyLogProbs DiffusionPolicy::log_probs(LanguageModelImpl& model, const Batch& batch, bool with_entropy,
                                          bool with_hidden) const {
  if (likelihood_ == SequenceLikelihood::transitions) return transition_log_probs(model, batch, with_entropy, with_hidden);
  const int64_t rows = batch.tokens.size(0), width = batch.tokens.size(1), k = copies();
  const auto device = batch.tokens.device();
  const Draws draws = draw(batch);
  const auto t = draws.t.to(device), z = draws.z.to(device);
  const auto& policy = batch.rollout.policy;
  Batch noised;
  noised.tokens = batch.tokens.repeat_interleave(k, 0);
  noised.real = batch.real.repeat_interleave(k, 0);
  noised.loss_mask = policy.repeat_interleave(k, 0);
  const auto hidden = denoiser_.denoiser_hidden(model, noised, t, z);  // [B·K, W, d]

  const bool elbo = likelihood_ == SequenceLikelihood::elbo;
  const auto flat = [&](const torch::Tensor& v) { return v.expand(z.sizes()).reshape(-1); };
  const auto x = flat(noised.tokens), noisy = flat(z), scored = flat(noised.loss_mask);
  const NoiseLevels level = denoiser_.noise()->levels(t), rate = denoiser_.noise()->rates(t);
  const NoiseLevels levels{flat(level.keep), flat(level.mask), flat(level.uniform)};
  const NoiseLevels rates{flat(rate.keep), flat(rate.mask), flat(rate.uniform)};
  const NoiseIds ids = denoiser_.ids();
  const auto noise = denoiser_.noise();
  const PositionTerm term = [=](const torch::Tensor& log_x_hat, int64_t begin) {
    const int64_t n = log_x_hat.size(0);
    const auto part = [&](const torch::Tensor& v) { return v.narrow(0, begin, n); };
    const auto target = part(x);
    if (!elbo) return log_x_hat.gather(-1, target.unsqueeze(-1)).squeeze(-1);
    const NoiseLevels at{part(levels.keep), part(levels.mask), part(levels.uniform)};
    const NoiseLevels by{part(rates.keep), part(rates.mask), part(rates.uniform)};
    return -noise->token_terms(log_x_hat, target, part(noisy), at, by, ids).nelbo;
  };
  const auto per_copy = position_terms(model, hidden, scored, denoiser_.support(), temperature_, with_entropy,
                                       logit_chunk_mib_, term)
                            .view({rows, k, width, -1})
                            .mean(1);  // the K noise levels' mean
  PolicyLogProbs out;
  out.log_probs = per_copy.select(2, 0).masked_fill(~policy, 0.0);
  if (with_entropy) out.entropy = per_copy.select(2, 1).masked_fill(~policy, 0.0);
  if (with_hidden) out.hidden = hidden.view({rows, k, width, -1}).select(1, 0);
  return out;
}

// Each recorded state z_t is denoised once more (all T of a row in one batch), and each position's term is the sum
// over transitions of log q(z_s | z_t, x̂_θ(z_t)) at the state it moved to.
PolicyLogProbs DiffusionPolicy::transition_log_probs(LanguageModelImpl& model, const Batch& batch, bool with_entropy,
                                                     bool with_hidden) const {
  const auto& rollout = batch.rollout;
  TORCH_CHECK(rollout.trajectory.defined(), "rl.likelihood = transitions scores rollouts with a recorded trajectory");
  const int64_t rows = batch.tokens.size(0), width = batch.tokens.size(1);
  const int64_t steps = rollout.transition_times.size(1);
  const auto before = rollout.trajectory.narrow(1, 0, steps).reshape({rows * steps, width});
  const auto after = rollout.trajectory.narrow(1, 1, steps).reshape({rows * steps, width});
  const auto t = rollout.transition_times.reshape({rows * steps, 1}).to(torch::kFloat);
  Batch states;
  states.tokens = after;
  states.real = batch.real.repeat_interleave(steps, 0);
  const auto hidden = denoiser_.denoiser_hidden(model, states, t, before);  // [B·T, W, d]

  const auto flat = [&](const torch::Tensor& v) { return v.expand({rows * steps, width}).reshape(-1); };
  const auto level = rollout.transition_levels.reshape({rows * steps, 1, 6}).to(torch::kFloat);
  const auto level_column = [&](int64_t c) { return flat(level.select(2, c)); };
  const NoiseLevels at_t{level_column(0), level_column(1), level_column(2)};
  const NoiseLevels at_s{level_column(3), level_column(4), level_column(5)};
  const auto from = flat(before), to = flat(after);
  const auto scored = flat(rollout.policy.repeat_interleave(steps, 0));
  const NoiseIds ids = denoiser_.ids();
  const PositionTerm term = [=](const torch::Tensor& log_x_hat, int64_t begin) {
    const int64_t n = log_x_hat.size(0);
    const auto part = [&](const torch::Tensor& v) { return v.narrow(0, begin, n); };
    const auto x_hat_at = [&](const torch::Tensor& ids_at) {
      return log_x_hat.gather(-1, ids_at.unsqueeze(-1)).squeeze(-1).exp();
    };
    const auto z_t = part(from), z_s = part(to);
    const NoiseLevels t_part{part(at_t.keep), part(at_t.mask), part(at_t.uniform)};
    const NoiseLevels s_part{part(at_s.keep), part(at_s.mask), part(at_s.uniform)};
    return transition_log_prob(x_hat_at(z_s), x_hat_at(z_t), z_t, z_s, t_part, s_part, ids.mask_id, ids.support_size);
  };
  const auto per_step = position_terms(model, hidden, scored, denoiser_.support(), temperature_, with_entropy,
                                       logit_chunk_mib_, term)
                            .view({rows, steps, width, -1});
  PolicyLogProbs out;
  out.log_probs = per_step.select(3, 0).sum(1).masked_fill(~rollout.policy, 0.0);
  if (with_entropy) out.entropy = per_step.select(3, 1).mean(1).masked_fill(~rollout.policy, 0.0);
  if (with_hidden) out.hidden = hidden.view({rows, steps, width, -1}).select(1, 0);
  return out;
}

ValidationSums DiffusionPolicy::evaluate(LanguageModelImpl& model, const EvalSource& source) {
  return denoiser_.evaluate(model, source);
}

}  // namespace inkstone
