#include "objectives/policy_log_probs.h"

#include <torch/nn/functional/padding.h>

#include "objectives/chunked_vocab.h"

namespace inkstone {

PolicyLogProbs policy_log_probs(LanguageModelImpl& model, const Batch& batch, double temperature,
                                int64_t logit_chunk_mib, bool with_entropy, bool with_hidden) {
  using torch::indexing::Slice;
  const auto hidden = model.hidden_states(batch.tokens.index({Slice(), Slice(0, -1)}));  // [B, W−1, d], causal
  const auto targets = batch.tokens.index({Slice(), Slice(1, torch::indexing::None)}).reshape(-1);
  // The tokenizer's ids only: the distribution rollouts were drawn from.
  const auto head = model.head_weight(HeadRows::tokens);
  // By value: backward calls it again after this function has returned.
  const ChunkTermsFn terms = [targets, temperature, with_entropy](const torch::Tensor& logits, int64_t begin) {
    const auto log_softmax = torch::log_softmax(logits / temperature, -1);  // [n, V]
    const auto target = targets.narrow(0, begin, logits.size(0));
    std::vector<torch::Tensor> columns = {log_softmax.gather(-1, target.unsqueeze(-1)).squeeze(-1)};
    if (with_entropy) columns.push_back(-(log_softmax.exp() * log_softmax).sum(-1));
    return torch::stack(columns, 1);
  };
  const auto scored = chunked_vocab_terms(hidden.reshape({-1, hidden.size(-1)}), head, terms,
                                          chunk_rows_for(head.size(0), logit_chunk_mib, head.is_cuda()))
                          .view({hidden.size(0), hidden.size(1), -1});
  // Position 0 is never generated; shifting right aligns each log-prob with the token it scores.
  const auto& policy = batch.rollout.policy;
  const auto aligned = [&](int64_t column) {
    return torch::nn::functional::pad(scored.select(2, column), torch::nn::functional::PadFuncOptions({1, 0}))
        .masked_fill(~policy, 0.0);
  };
  PolicyLogProbs result;
  result.log_probs = aligned(0);
  if (with_entropy) result.entropy = aligned(1);
  if (with_hidden) result.hidden = hidden;
  return result;
}

CausalPolicy::CausalPolicy(const Config& config)
    : temperature_(config.rl.temperature), logit_chunk_mib_(config.objective.logit_chunk_mib), next_token_(config) {}

ObjectiveNeeds CausalPolicy::needs() const {
  ObjectiveNeeds needs;
  needs.consumes = BatchKind::rollouts;
  needs.mask = MaskMode::causal;
  return needs;
}

PolicyLogProbs CausalPolicy::log_probs(LanguageModelImpl& model, const Batch& batch, bool with_entropy,
                                       bool with_hidden) const {
  return policy_log_probs(model, batch, temperature_, logit_chunk_mib_, with_entropy, with_hidden);
}

ValidationSums CausalPolicy::evaluate(LanguageModelImpl& model, const EvalSource& source) {
  return next_token_.evaluate(model, source);
}

}  // namespace inkstone
