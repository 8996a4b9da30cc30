// Masked (absorbing) discrete diffusion, MDLM (docs/diffusion.md, "Masked NELBO"): with probability 1 − α_t a
// token becomes the mask token, and the model is trained on the continuous-time NELBO of the SUBS parameterisation.
#pragma once
#include "objectives/diffusion_objective.h"

namespace inkstone {

// ℓ = (−α'/(1 − α)) · (−log x̂_x) · [z = m]  (MDLM, Sahoo et al. 2024).
// log_x_hat: [..., V] log x̂ under SUBS, i.e. −inf at the mask and at every id outside the support; x, z: [...]
// int64; alpha, alpha_prime: broadcastable to x, 0 < α < 1. Returns ℓ [...] in log_x_hat's dtype.
torch::Tensor masked_nelbo_per_token(const torch::Tensor& log_x_hat, const torch::Tensor& x, const torch::Tensor& z,
                                     int64_t mask_id, const torch::Tensor& alpha, const torch::Tensor& alpha_prime);

class MaskedDiffusionObjective : public DiffusionObjective {
 public:
  // InputError when the tokenizer has no mask token.
  MaskedDiffusionObjective(const Config& config, const Tokenizer& tokenizer);
  std::string name() const override { return "masked_diffusion"; }
  DiffusionNoise noise() const override { return DiffusionNoise::masked; }

 protected:
  // The mask token (docs/diffusion.md, "Masked noise").
  torch::Tensor replacement(const torch::Tensor& x, at::Generator* generator) const override;
  DiffusionTokenTerms token_terms(const torch::Tensor& logits, const torch::Tensor& x, const torch::Tensor& z,
                                  const torch::Tensor& alpha, const torch::Tensor& alpha_prime) const override;

 private:
  int64_t mask_id_;
};

}  // namespace inkstone
