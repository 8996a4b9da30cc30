// A diffusion model as an RL policy (docs/rl.md, "Diffusion policies"): the completion's log-likelihood given its
// prompt has no closed form, so the per-position terms are an estimate, read one of two ways (rl.likelihood):
//   elbo: −ℓ of the completion's tokens averaged over K noise levels t_k = t_min + (1 − t_min)(k + u)/K, one
//     u ~ U[0, 1) per completion (stratified), each with its own corruption z_{t_k} of the completion; the prompt
//     stays clean. Its expectation is the ELBO the objective trains (the negative of docs/diffusion.md's NELBO with
//     t ~ U[t_min, 1]), a lower bound on log p(y | x): unbiased for the bound, biased low for log p. Its variance
//     falls as 1/K and more with stratification (VRPO, Zhu et al. 2025, "LLaDA 1.5").
//   one_step: diffu-GRPO's estimate (Zhao et al. 2025, "d1"): the completion fully noised (the prior's draw
//     at t = 1), each prompt token noised with probability rl.prompt_mask, and log x̂_θ(y_i | z) per position. One
//     forward, not a bound: it scores each token as if it were decoded first.
//   transitions: the rollout's recorded denoising trajectory scored step by step, Σ_steps log q(z_s | z_t, x̂_θ(z_t))
//     at the states the sampler moved to (objectives/transition_log_prob.h): the exact log-likelihood of the
//     trajectory, which is what the sampler's policy generated (the text is its last state), at the cost of one
//     forward per sampler step. The ancestral sampler only, with temperature and no truncating filter.
// The draws of the estimates come from a generator keyed by its batch.rollout.noise_keys entry, so the current, old and
// reference policies score a row under the same noise: their ratios are coupled, and exactly 1 when the weights
// are the same. The logits are divided by rl.temperature, the temperature the rollouts were denoised at.
#pragma once
#include <memory>

#include "objectives/diffusion_objective.h"
#include "objectives/policy_likelihood.h"

namespace inkstone {

class DiffusionPolicy : public PolicyLikelihood {
 public:
  // config.rl.policy names the diffusion objective that trained the policy; `noise` is its process.
  DiffusionPolicy(const Config& config, const Tokenizer& tokenizer, std::shared_ptr<const NoiseProcess> noise);
  ObjectiveNeeds needs() const override;
  PolicyLogProbs log_probs(LanguageModelImpl& model, const Batch& batch, bool with_entropy,
                           bool with_hidden) const override;
  ValidationSums evaluate(LanguageModelImpl& model, const EvalSource& source) override;

  // The noise levels [B·K, 1] and noisy rows [B·K, W] (row b's K copies adjacent) the estimate scores, drawn on
  // the CPU from each row's key.
  struct Draws {
    torch::Tensor t;
    torch::Tensor z;
  };
  Draws draw(const Batch& batch) const;
  // How many noisy copies of each row the estimate scores: K for elbo, 1 for one_step.
  int64_t copies() const;
  // elbo: K; one_step: 1; transitions: the recorded steps, at most sample.steps + 1 (the last step to clean text).
  int64_t forward_rows_per_rollout() const override;

 private:
  static Config policy_config(const Config& config);
  PolicyLogProbs transition_log_probs(LanguageModelImpl& model, const Batch& batch, bool with_entropy,
                                      bool with_hidden) const;

  DiffusionObjective denoiser_;
  SequenceLikelihood likelihood_;  // rl.likelihood
  int64_t elbo_samples_;           // rl.elbo_samples
  double prompt_mask_;             // rl.prompt_mask
  double t_min_;                   // diffusion.t_min
  double temperature_;             // rl.temperature
  int64_t logit_chunk_mib_;        // objective.logit_chunk_mib
  int64_t sampler_steps_;          // sample.steps
};

}  // namespace inkstone
