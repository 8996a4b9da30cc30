#include "objectives/policy_log_probs.h"

#include <torch/nn/functional/padding.h>

namespace inkstone {

PolicyLogProbs policy_log_probs(LanguageModelImpl& model, const Batch& batch, double temperature,
                                bool with_entropy, bool with_hidden) {
  using torch::indexing::Slice;
  ForwardArgs args;
  args.mask = MaskMode::causal;
  args.return_hidden = with_hidden;
  args.token_logits_only = true;  // the distribution rollouts were drawn from
  auto out = model.forward(batch.tokens.index({Slice(), Slice(0, -1)}), args);
  auto log_softmax = torch::log_softmax(out.logits.to(torch::kFloat) / temperature, -1);  // [B, W−1, V]
  auto targets = batch.tokens.index({Slice(), Slice(1, torch::indexing::None)});
  auto scored = log_softmax.gather(-1, targets.unsqueeze(-1)).squeeze(-1);
  // Position 0 is never generated; shifting right aligns each log-prob with the token it scores.
  const auto& policy = batch.rollout.policy;
  PolicyLogProbs result;
  result.log_probs = torch::nn::functional::pad(scored, torch::nn::functional::PadFuncOptions({1, 0}))
                         .masked_fill(~policy, 0.0);
  if (with_entropy) {
    auto entropy = -(log_softmax.exp() * log_softmax).sum(-1);
    result.entropy = torch::nn::functional::pad(entropy, torch::nn::functional::PadFuncOptions({1, 0}))
                         .masked_fill(~policy, 0.0);
  }
  if (with_hidden) result.hidden = out.hidden;
  return result;
}

}  // namespace inkstone
