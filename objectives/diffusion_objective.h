// The diffusion objectives (uniform, masked, mixture noise): one objective over a noise process
// (objectives/noise_process.h) that says what a corrupted token becomes and what one token's NELBO is. Shared here:
// time sampling, the model call (bidirectional, with σ_t = −log α_t when the model is time-conditioned), the
// training weight, the metrics and the fixed-seed NELBO evaluation (docs/diffusion.md: "Time sampling", "Training
// weights", "Time conditioning", "NELBO perplexity").
#pragma once
#include <memory>
#include <string>

#include <ATen/core/Generator.h>

#include "objectives/noise_process.h"
#include "objectives/noise_support.h"
#include "objectives/objective.h"

namespace inkstone {

// The training loss is (ℓ + (β_IS − 1)·IS)·w(t), β_IS = diffusion.is_weight (docs/diffusion.md, "Training weights"). On the integrand of "Log-SNR form" the
// ELBO puts the weight |dλ/dt|; `snr` replaces it by 1 (GIDD's SNR weighting), and max_weight > 0 clips whichever
// of the two is chosen, so w = min(weight, max_weight) / |dλ/dt|.
// λ is the process's own log-SNR (NoiseProcess::log_snr_rate).
torch::Tensor training_weight(const NoiseProcess& noise, const DiffusionConfig& config, const torch::Tensor& t);

// Per-token results of one batch at given times and noisy tokens.
// The per-token tensors are detached: the head and the terms run in row chunks (objectives/chunked_vocab.h), and
// only their weighted sum carries a gradient.
struct DiffusionScores {
  torch::Tensor loss;       // 0-d: Σ weighted + objective.z_loss · Σ log_z_squared; differentiable
  torch::Tensor nelbo;      // [B, L] ℓ, 0 off scored tokens
  torch::Tensor weighted;   // [B, L] the training loss, 0 off scored tokens
  torch::Tensor log_z_squared;  // [B, L] (log Σ exp logits)², 0 off scored tokens; only with objective.z_loss > 0
  torch::Tensor corrupted;  // [B, L] bool: z_t ≠ x on a scored token
  torch::Tensor scored;     // [B, L] bool: scored_tokens of the batch (core/batch.h)
};

// Fine-tuning on conversations (a batch with a loss mask; docs/diffusion.md, "Fine-tuning on conversations"), as
// LLaDA's SFT: only the trained tokens (the responses) are noised and scored, the prompt stays clean and visible;
// in padded windows the padding after a conversation becomes end-of-text tokens that are part of the response, so
// the model learns where its answer ends inside a longer canvas (what the adaptive sampler reads). Rows of plain
// text beside them (a data mixture) keep their padding; a batch without a loss mask is returned as it is.
Batch with_responses_padded_by_eos(const Batch& batch, int64_t eos_id);

// AR -> diffusion adaptation with shifted outputs (Dream, Ye et al. 2025, "Dream 7B", section 3): an AR model's
// output at position i predicts token i + 1, so a diffusion model adapted from it keeps that alignment and predicts
// token i from the output at i − 1: out[:, i] = per_position[:, i − 1]. Position 0 has no output before it and reads
// its own, as does the first token of a packed document (`documents` defined), whose predecessor belongs to another
// document it cannot see. per_position is [B, L, ...] (hidden states or logits); documents on its device or the host.
torch::Tensor outputs_shifted_right(const torch::Tensor& per_position, const torch::Tensor& documents = {});

// AR -> diffusion adaptation (DiffuLLaMA's attention mask annealing, Gong et al. 2025): at training step
// s < N = diffusion.attention_anneal_steps a query attends to every earlier key and, beyond them, to each later key
// with probability s / N (one draw per (query, key) pair, shared by the micro-batch's rows), so the causal attention
// an AR checkpoint was trained with opens gradually; from step N on, and in evaluation, attention is bidirectional.
// Undefined when attention is bidirectional.
torch::Tensor annealed_attention(int64_t step, int64_t anneal_steps, int64_t length, torch::Device device);

// The prior the sampler starts from (docs/diffusion.md, "Prior"): the noise's own mix at t = 1 with the signal left
// there set aside, the mask with probability μ_1 / (μ_1 + υ_1), else a uniform draw from the support.
double prior_mask_share(const NoiseProcess& noise);
// Draws from it shaped like `like`, on like's device from `generator` (nullptr: the default one).
torch::Tensor prior_tokens(const NoiseProcess& noise, const NoiseSupport& support, int64_t mask_id,
                           const torch::Tensor& like, at::Generator* generator);

class DiffusionObjective : public Objective {
 public:
  // InputError when the noise masks and the tokenizer has no mask token.
  DiffusionObjective(const Config& config, const Tokenizer& tokenizer, std::shared_ptr<const NoiseProcess> noise);
  std::string name() const override { return name_; }
  ObjectiveNeeds needs() const override;
  LossOutput loss(LanguageModelImpl& model, const Batch& batch) override;
  // The forward process, which a sampler inverts.
  const std::shared_ptr<const NoiseProcess>& noise() const { return noise_; }
  // NELBO summed over the whole source, t on eval_time_grid and z_t drawn from a CPU generator seeded with
  // (run.seed, the batch's place in the split). perplexity and bits_per_byte are upper bounds (docs/diffusion.md,
  // "Evaluation").
  ValidationSums evaluate(LanguageModelImpl& model, const EvalSource& source) override;

  // z_t for clean tokens x [B, L] at times t (float, broadcastable to x): with u ~ U[0, 1) per token, a token is
  // replaced where u < 1 − α_t, by the mask where u < μ_t and by a uniform draw from the support otherwise. Drawn
  // on x's device from `generator` (nullptr: the default one); the uniform draws only where the noise spreads.
  torch::Tensor corrupt(const torch::Tensor& x, const torch::Tensor& t, at::Generator* generator) const;
  // The model's scores of noisy tokens z at times t ([B, 1] or [B, L], float32 on the batch's device).
  DiffusionScores score(LanguageModelImpl& model, const Batch& batch, const torch::Tensor& t,
                        const torch::Tensor& z) const;

  // The head's input for noisy tokens z at times t: the bidirectional forward (block-causal over [x_0 | z] for
  // block diffusion, annealed while diffusion.attention_anneal_steps last), read as the model was trained
  // (shifted with diffusion.shifted_outputs). [B, L, d].
  torch::Tensor denoiser_hidden(LanguageModelImpl& model, const Batch& batch, const torch::Tensor& t,
                                const torch::Tensor& z) const;

  const NoiseSchedule& schedule() const { return noise_->schedule(); }
  const NoiseSupport& support() const { return support_; }
  const NoiseIds& ids() const { return ids_; }

 private:
  // InputError naming the first real clean token outside the support, whose NELBO would be infinite.
  void check_clean_tokens(const Batch& batch) const;

  std::string name_;        // objective.name
  DiffusionConfig diffusion_;
  double z_loss_;           // objective.z_loss
  int64_t logit_chunk_mib_; // objective.logit_chunk_mib
  bool time_conditioning_;  // the model reads σ_t (model.time_conditioning)
  bool padded_windows_;     // data.mode = pad: padding keys are masked out
  int64_t eos_id_;
  int64_t attention_anneal_steps_;  // diffusion.attention_anneal_steps
  uint64_t eval_seed_;      // run.seed: the evaluation's noise
  std::shared_ptr<const NoiseProcess> noise_;
  NoiseSupport support_;
  NoiseIds ids_;
  bool checked_ = false;
};

}  // namespace inkstone
