// Generative perplexity (docs/diffusion.md, "Generative perplexity"): how likely a judge autoregressive model finds
// a sampler's texts. Each text is re-tokenised with the judge's tokenizer, preceded by the judge's end of text
// (the document separator it was trained with), and every token of the text plus one closing end of text is
// scored: Gen PPL = exp(Σ nll / Σ scored tokens). Low entropy (repetition) lowers Gen PPL, so it is always
// reported next to the samples' unigram entropy.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "dataset/tokenizer.h"
#include "models/language_model.h"

namespace inkstone {

struct JudgeScore {
  double nll_sum = 0;     // nats, float64 accumulation
  int64_t tokens = 0;     // scored tokens
  int64_t truncated = 0;  // texts cut to the judge's context
  double perplexity() const;
};

// The judge's score of `texts`, one forward each on the judge's device (under InferenceMode). A text longer than
// the judge's context (model.max_seq_len − 1 tokens plus its end of text) keeps its first tokens and counts as
// truncated. An empty text scores only its end of text.
JudgeScore judge_texts(LanguageModel& judge, const Tokenizer& judge_tokenizer, const std::vector<std::string>& texts,
                       torch::Device device);

}  // namespace inkstone
