// Sumi's adaptive sampler on a hand-made x̂: an end-of-text anchor after the window, and each step commits the open
// position with the largest margin p_max − p(z_t); and the end of a sample's text at its first end of text.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <numeric>

#include "objectives/uniform_noise.h"
#include "sampler/diffusion_sampler.h"

namespace inkstone {
namespace {

constexpr int64_t kEnd = 5;  // outside the support {0..4} of a 7-id vocabulary, as eos is for a real tokenizer

DiffusionProcess toy_uniform_process() {
  DiffusionConfig config;
  config.schedule = NoiseScheduleKind::log_linear;
  config.schedule_eps = 1e-3;
  DiffusionProcess p;
  p.noise = std::make_shared<UniformNoise>(config);
  p.support = std::make_shared<NoiseSupport>(std::vector<int64_t>{0, 1, 2, 3, 4}, 7);
  p.end_id = kEnd;
  return p;
}

// Position i prefers token (i + 1) mod 5 with logit 1 + i, every other token 0, whatever z is.
torch::Tensor hand_made_logits(int64_t rows, int64_t length) {
  auto logits = torch::zeros({rows, length, 7});
  for (int64_t i = 0; i < length; ++i) logits.index_put_({torch::indexing::Slice(), i, (i + 1) % 5}, 1.0 + i);
  return logits;
}

TEST(AdaptiveSampler, CommitsOnePositionAStepInOrderOfTheMarginBehindAnEndAnchor) {
  const int64_t length = 4;
  std::vector<torch::Tensor> seen;
  const Denoiser denoiser = [&](const torch::Tensor& z, const torch::Tensor&) {
    seen.push_back(z.clone());
    return hand_made_logits(z.size(0), z.size(1));
  };
  DiffusionSampleOptions options;
  options.steps = length;
  options.method = DiffusionMethod::adaptive;
  options.filter.temperature = 0;  // commits the argmax
  options.seed = 3;
  std::vector<torch::Tensor> after_step;
  options.trace_every = 1;
  options.on_trace = [&](int64_t, const torch::Tensor& z) { after_step.push_back(z.clone()); };
  const DiffusionCanvas canvas{torch::zeros({1, length}, torch::kLong), torch::zeros({1, length}, torch::kBool)};
  const auto result = sample_diffusion(denoiser, toy_uniform_process(), canvas, options, torch::kCPU);

  // The denoiser sees the window and the anchor; the caller gets the window.
  ASSERT_FALSE(seen.empty());
  ASSERT_EQ(seen.front().size(1), length + 1);
  for (const auto& z : seen) EXPECT_EQ(z[0][length].item<int64_t>(), kEnd);
  ASSERT_EQ(result.tokens.size(1), length);

  // Margins on the starting canvas (uniform noise), in float64 over the support.
  const auto start = seen.front()[0];
  const auto x_hat = hand_made_logits(1, length + 1)[0].narrow(-1, 0, 5).to(torch::kDouble).softmax(-1);
  std::vector<double> margin(length);
  for (int64_t i = 0; i < length; ++i)
    margin[i] = x_hat[i].max().item<double>() - x_hat[i][start[i].item<int64_t>()].item<double>();
  std::vector<int64_t> order(length);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return margin[a] > margin[b]; });
  ASSERT_NE(margin[order[0]], margin[order[1]]);

  ASSERT_EQ(static_cast<int64_t>(after_step.size()), length);
  for (int64_t k = 0; k < length; ++k) {
    SCOPED_TRACE(::testing::Message() << "after step " << k + 1);
    for (int64_t j = 0; j < length; ++j) {
      const int64_t i = order[j];
      const int64_t expected = j <= k ? (i + 1) % 5 : start[i].item<int64_t>();  // committed, or still the noise
      EXPECT_EQ(after_step[k][0][i].item<int64_t>(), expected) << "position " << i;
    }
  }
  for (int64_t i = 0; i < length; ++i) EXPECT_EQ(result.tokens[0][i].item<int64_t>(), (i + 1) % 5);
}

TEST(AdaptiveSampler, ATextEndsAtItsFirstGeneratedEndOfText) {
  const auto row = torch::tensor(std::vector<int64_t>{7, 8, 1, kEnd, 2, kEnd});
  const auto fixed = torch::tensor({true, true, false, false, false, false});
  EXPECT_EQ(generated_until_end(row, fixed, kEnd), (std::vector<int32_t>{1}));
  EXPECT_EQ(generated_until_end(row, fixed, -1), (std::vector<int32_t>{1, kEnd, 2, kEnd}));
  // An end of text in the fixed prompt does not end the generated text.
  const auto prompt_end = torch::tensor(std::vector<int64_t>{kEnd, 3, 4});
  EXPECT_EQ(generated_until_end(prompt_end, torch::tensor({true, false, false}), kEnd), (std::vector<int32_t>{3, 4}));
}

}  // namespace
}  // namespace inkstone
