// Generative perplexity: a judge scoring its own greedy samples has NLL −log p_max at every generated token, so its
// Gen PPL is exp of the mean of those (plus the closing end of text); long texts are cut to the judge's context.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "dataset/byte_tokenizer.h"
#include "sampler/generative_perplexity.h"
#include "tests/fixtures.h"

namespace inkstone {
namespace {

// log-softmax of the judge's float64 logits for `ids` [T] (causal), [T, V].
torch::Tensor log_probs_of(LanguageModel& judge, const std::vector<int64_t>& ids) {
  torch::NoGradGuard no_grad;
  WindowInputs args;
  args.mask = MaskMode::causal;
  const auto logits = judge->forward(torch::tensor(ids, torch::kLong).unsqueeze(0), args)[0];
  return torch::log_softmax(logits.to(torch::kDouble), -1);
}

TEST(GenerativePerplexity, AJudgeOnItsOwnGreedySamplesScoresMinusLogPMax) {
  torch::manual_seed(51);
  const ByteTokenizer tokenizer;
  LanguageModel judge = build_language_model(testing::tiny_model_config(0.2), tokenizer.vocab_size());
  const int64_t end = tokenizer.specials().eos;
  std::vector<std::string> texts;
  double expected_nll = 0;
  int64_t expected_tokens = 0;
  for (int64_t first : {65, 97, 120}) {
    // Greedy over the byte ids (specials do not survive decoding), from the end of text the judge starts with.
    std::vector<int64_t> ids{end, first};
    double nll = -log_probs_of(judge, {end})[0][first].item<double>();
    for (int step = 0; step < 12; ++step) {
      const auto next = log_probs_of(judge, ids)[-1].narrow(0, 0, 256);
      const int64_t argmax = next.argmax().item<int64_t>();
      nll -= next[argmax].item<double>();  // −log p_max over the bytes
      ids.push_back(argmax);
    }
    nll -= log_probs_of(judge, ids)[-1][end].item<double>();  // the closing end of text
    expected_nll += nll;
    expected_tokens += static_cast<int64_t>(ids.size());  // the text's bytes and one end of text
    const std::vector<int32_t> bytes(ids.begin() + 1, ids.end());
    texts.push_back(tokenizer.decode(bytes, false));
  }
  const JudgeScore score = judge_texts(judge, tokenizer, texts, torch::kCPU);
  EXPECT_EQ(score.tokens, expected_tokens);
  EXPECT_EQ(score.truncated, 0);
  EXPECT_NEAR(score.nll_sum, expected_nll, 1e-6 * expected_nll);
  EXPECT_NEAR(score.perplexity(), std::exp(expected_nll / static_cast<double>(expected_tokens)),
              1e-6 * score.perplexity());
}

TEST(GenerativePerplexity, TextsLongerThanTheContextKeepTheirStart) {
  torch::manual_seed(52);
  const ByteTokenizer tokenizer;
  LanguageModel judge = build_language_model(testing::tiny_model_config(0.2), tokenizer.vocab_size());
  const int64_t context = judge->config().max_seq_len;
  const std::string long_text(static_cast<size_t>(context) + 10, 'a');
  const JudgeScore whole = judge_texts(judge, tokenizer, {long_text}, torch::kCPU);
  EXPECT_EQ(whole.truncated, 1);
  EXPECT_EQ(whole.tokens, context - 1);
  const JudgeScore start = judge_texts(judge, tokenizer, {long_text.substr(0, context - 1)}, torch::kCPU);
  EXPECT_EQ(start.tokens, context);  // fits, so it also scores its end of text
  const JudgeScore empty = judge_texts(judge, tokenizer, {""}, torch::kCPU);
  EXPECT_EQ(empty.tokens, 1);
}

}  // namespace
}  // namespace inkstone
