#include "objectives/masked_diffusion.h"

#include "core/errors.h"

namespace inkstone {

torch::Tensor masked_nelbo_per_token(const torch::Tensor& log_x_hat, const torch::Tensor& x, const torch::Tensor& z,
                                     int64_t mask_id, const torch::Tensor& alpha, const torch::Tensor& alpha_prime) {
  const auto a = alpha.to(log_x_hat.scalar_type());
  const auto a_prime = alpha_prime.to(log_x_hat.scalar_type());
  const auto nll = -log_x_hat.gather(-1, x.unsqueeze(-1)).squeeze(-1);
  // Unmasked positions carry z over (SUBS) and score nothing; selected, so no 0 · inf can reach the sum.
  return (-a_prime / (1.0 - a) * nll).masked_fill(z.ne(mask_id), 0.0);
}

MaskedDiffusionObjective::MaskedDiffusionObjective(const Config& config, const Tokenizer& tokenizer)
    : DiffusionObjective(config, tokenizer), mask_id_(tokenizer.specials().mask) {
  if (mask_id_ < 0) throw InputError("objective masked_diffusion needs a tokenizer with a mask token");
}

torch::Tensor MaskedDiffusionObjective::replacement(const torch::Tensor& x, at::Generator*) const {
  return torch::full_like(x, mask_id_);
}

DiffusionTokenTerms MaskedDiffusionObjective::token_terms(const torch::Tensor& logits, const torch::Tensor& x,
                                                          const torch::Tensor& z, const torch::Tensor& alpha,
                                                          const torch::Tensor& alpha_prime) const {
  // The support never holds the mask, so restricting to it is SUBS's "mask logit at −inf".
  const auto log_x_hat = torch::log_softmax(support().restrict_logits(logits.to(torch::kFloat)), -1);
  DiffusionTokenTerms terms;
  terms.nelbo = masked_nelbo_per_token(log_x_hat, x, z, mask_id_, alpha, alpha_prime);
  return terms;
}

}  // namespace inkstone
