#include "sampler/generative_perplexity.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>

#include "core/errors.h"

namespace inkstone {

double JudgeScore::perplexity() const {
  return tokens > 0 ? std::exp(nll_sum / static_cast<double>(tokens)) : std::nan("");
}

JudgeScore judge_texts(LanguageModel& judge, const Tokenizer& judge_tokenizer, const std::vector<std::string>& texts,
                       torch::Device device) {
  const int64_t end = judge_tokenizer.specials().eos;
  if (end < 0) throw InputError("the judge's tokenizer has no end-of-text token to separate texts with");
  const int64_t context = judge->config().max_seq_len;
  c10::InferenceMode inference;
  JudgeScore score;
  for (const auto& text : texts) {
    std::vector<int64_t> ids{end};
    for (const int32_t id : judge_tokenizer.encode(text)) ids.push_back(id);
    if (static_cast<int64_t>(ids.size()) > context) {
      ids.resize(static_cast<size_t>(context));
      ++score.truncated;
    } else {
      ids.push_back(end);
    }
    const auto sequence = torch::tensor(ids, torch::kLong).to(device).unsqueeze(0);
    const int64_t length = sequence.size(1);
    const auto logits = judge->forward(sequence.narrow(1, 0, length - 1)).to(torch::kDouble);  // causal
    const auto log_probs = torch::log_softmax(logits, -1);
    const auto targets = sequence.narrow(1, 1, length - 1);
    score.nll_sum -= log_probs.gather(-1, targets.unsqueeze(-1)).sum().item<double>();
    score.tokens += length - 1;
  }
  return score;
}

}  // namespace inkstone
