// The fused diffusion step (sampler/kernels/): Philox against the published known answers, the same token as the
// float64 reference posterior from the same uniforms, the draw distribution against the posterior (chi-square),
// bf16 logits, and samples that do not depend on the batch they run in.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <cmath>
#include <numeric>

#include "sampler/diffusion_posterior.h"
#include "sampler/diffusion_sampler.h"
#include "sampler/kernels/diffusion_step.h"
#include "sampler/sampling.h"
#include "tests/sampler/noise_fixtures.h"

namespace inkstone {
namespace {

using kernels::DiffusionRowParams;

// Random123's known-answer vectors for Philox4x32-10 (counter words, key words -> output words).
TEST(Philox, MatchesThePublishedKnownAnswers) {
  auto check = [](uint64_t offset, uint64_t subsequence, uint64_t seed, std::array<uint32_t, 4> expected) {
    const auto block = kernels::philox4x32_10(seed, subsequence, offset);
    EXPECT_EQ(block.x, expected[0]);
    EXPECT_EQ(block.y, expected[1]);
    EXPECT_EQ(block.z, expected[2]);
    EXPECT_EQ(block.w, expected[3]);
  };
  check(0, 0, 0, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  check(~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}, {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  check(0x85a308d3243f6a88ull, 0x0370734413198a2eull, 0x299f31d0a4093822ull,
        {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

struct Case {
  const char* name;
  DiffusionRowParams params;
};

enum class Noise { uniform, absorbing, mixture };

// The noise's levels at t and s: uniform (μ = 0), absorbing (υ = 0), or a mixture whose mask share is 0.6 at t and
// 0.75 at s (γ ≥ 0 for both kinds of z).
void set_levels(DiffusionRowParams& p, Noise noise) {
  const double share_t = noise == Noise::uniform ? 0.0 : noise == Noise::absorbing ? 1.0 : 0.6;
  const double share_s = noise == Noise::uniform ? 0.0 : noise == Noise::absorbing ? 1.0 : 0.75;
  p.mask_t = share_t * (1 - p.alpha_t);
  p.uniform_t = (1 - share_t) * (1 - p.alpha_t);
  p.mask_s = share_s * (1 - p.alpha_s);
  p.uniform_s = (1 - share_s) * (1 - p.alpha_s);
}

bool masks(const DiffusionRowParams& p) { return p.mask_t > 0; }

std::vector<Case> cases(int64_t n) {
  auto make = [n](double temperature, int64_t top_k, double top_p, double alpha_t, double alpha_s, Noise noise) {
    DiffusionRowParams p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.alpha_t = alpha_t;
    p.alpha_s = alpha_s;
    set_levels(p, noise);
    p.support_size = n;
    p.seed = 99;
    p.step = 3;
    return p;
  };
  return {{"uniform", make(1.0, 0, 1.0, 0.3, 0.55, Noise::uniform)},
          {"uniform_filtered", make(0.7, 5, 0.8, 0.3, 0.55, Noise::uniform)},
          {"uniform_final", make(1.3, 0, 0.9, 0.2, 1.0, Noise::uniform)},
          {"uniform_greedy_x_hat", make(0.0, 0, 1.0, 0.4, 0.8, Noise::uniform)},
          {"absorbing", make(1.0, 3, 1.0, 0.25, 0.6, Noise::absorbing)},
          {"mixture", make(1.0, 0, 1.0, 0.25, 0.6, Noise::mixture)},
          {"mixture_filtered", make(0.8, 4, 0.9, 0.35, 0.5, Noise::mixture)}};
}

// x̂ as the eager sampler forms it (float64, filters on x̂), the float64 posterior, and the race with the fused
// step's own uniforms.
int64_t reference_token(const torch::Tensor& logits, const torch::Tensor& support, int64_t z,
                        const DiffusionRowParams& p, uint64_t sequence, int64_t position) {
  const auto restricted = logits.to(torch::kDouble).masked_fill(~support, -INFINITY);
  torch::Tensor x_hat;
  if (p.temperature == 0) {
    x_hat = torch::zeros_like(restricted).scatter_(-1, restricted.argmax(-1, true), 1.0);
  } else {
    x_hat = top_p_filter(top_k_filter(restricted / p.temperature, p.top_k), p.top_p).softmax(-1);
  }
  const auto z_t = torch::tensor({z});
  const auto q = interpolating_posterior(x_hat.unsqueeze(0), z_t, {p.alpha_t, p.mask_t, p.uniform_t},
                                         {p.alpha_s, p.mask_s, p.uniform_s}, support, p.mask_id)[0];
  kernels::PhiloxUniforms uniforms{p.seed, kernels::position_subsequence(sequence, static_cast<uint64_t>(position)),
                                   p.step};
  int64_t best = -1;
  double best_score = -1;
  for (int64_t v = 0; v < logits.size(0); ++v) {
    const double weight = q[v].item<double>();
    if (!(weight > 0)) continue;
    const double score = weight / -std::log(uniforms.at(v));
    if (score > best_score) {
      best_score = score;
      best = v;
    }
  }
  return best;
}

TEST(FusedDiffusionStep, DrawsTheReferencePosteriorsTokenFromTheSameUniforms) {
  torch::manual_seed(12);
  const int64_t rows = 3, length = 6, vocab = 23;
  auto support = torch::ones({vocab}, torch::kBool);
  support[4] = false;
  support[17] = false;
  const int64_t mask_id = 22;
  const auto logits = (2.0 * torch::randn({rows, length, vocab})).contiguous();
  const auto sequences = torch::tensor({40, 7, 1000003}, torch::kLong);
  for (auto [name, p] : cases(21)) {  // 23 ids less 4 and 17
    auto z = torch::randint(0, vocab, {rows, length}, torch::kLong);
    z = torch::where(support.index({z}), z, torch::zeros_like(z));  // every z in the support
    auto step_support = support.clone();
    if (masks(p)) {
      step_support[mask_id] = false;  // the absorbing state is not a token x̂ can name
      p.mask_id = mask_id;
      p.support_size = 20;
      z.index_put_({torch::indexing::Slice(), torch::indexing::Slice(0, 4)}, mask_id);
    }
    const auto next = fused_diffusion_step(logits, z, step_support, sequences, p);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < length; ++i)
        EXPECT_EQ(next[r][i].item<int64_t>(),
                  reference_token(logits[r][i], step_support, z[r][i].item<int64_t>(), p,
                                  static_cast<uint64_t>(sequences[r].item<int64_t>()), i))
            << name << " row " << r << " position " << i;
  }
}

// Pearson's chi-square of 20,000 fused draws at one position (each draw its own stream) from z against the exact
// float64 posterior, 7 degrees of freedom.
double chi_square_of_draws(uint64_t seed, int64_t z, bool float32) {
  const int64_t draws = 20000, vocab = 8;
  const auto support = torch::ones({vocab}, torch::kBool);
  const auto row_logits = torch::tensor({0.3f, -1.2f, 2.0f, 0.1f, -0.5f, 1.1f, 0.0f, -2.0f});
  DiffusionRowParams p;
  p.alpha_t = 0.35;
  p.alpha_s = 0.7;
  set_levels(p, Noise::uniform);
  p.support_size = vocab;
  p.seed = seed;
  p.float32 = float32;
  const auto next =
      fused_diffusion_step(row_logits.expand({1, draws, vocab}).contiguous(), torch::full({1, draws}, z, torch::kLong),
                           support, torch::zeros({1}, torch::kLong), p);
  const auto counts = torch::bincount(next.flatten(), {}, vocab).to(torch::kDouble);
  const auto q = testing::uniform_posterior(row_logits.to(torch::kDouble).softmax(-1).unsqueeze(0),
                                            torch::tensor({z}), p.alpha_t, p.alpha_s, support)[0];
  const auto expected = q * draws;
  return ((counts - expected).pow(2) / expected).sum().item<double>();
}

// A correct sampler stays below 24.3 (p = 0.001); the seeds are fixed, so the tests cannot flake.
TEST(FusedDiffusionStep, DrawFrequenciesFollowThePosterior) {
  EXPECT_LT(chi_square_of_draws(5, 6, /*float32=*/false), 24.3);
}

// The same with x̂, the posterior and the race in float (sample.posterior = "float32").
TEST(FusedDiffusionStep, Float32DrawFrequenciesFollowThePosterior) {
  EXPECT_LT(chi_square_of_draws(8, 1, /*float32=*/true), 24.3);
}

// float and double see the same uniforms, so they differ only where two ids' race scores agree to float's
// precision: at most 1 position in 100 over every case of the reference test.
TEST(FusedDiffusionStep, Float32AndFloat64PickTheSameTokenAlmostEverywhere) {
  torch::manual_seed(13);
  const int64_t rows = 8, length = 50, vocab = 301;
  const auto support = torch::ones({vocab}, torch::kBool);
  const auto logits = (2.0 * torch::randn({rows, length, vocab})).contiguous();
  const auto sequences = torch::arange(rows, torch::kLong);
  int64_t differ = 0, total = 0;
  for (auto [name, p] : cases(vocab)) {
    if (masks(p)) continue;  // the mask id of noise that masks is set up in the reference test
    const auto z = torch::randint(0, vocab, {rows, length}, torch::kLong);
    const auto wide = fused_diffusion_step(logits, z, support, sequences, p);
    p.float32 = true;
    const auto narrow = fused_diffusion_step(logits, z, support, sequences, p);
    differ += wide.ne(narrow).sum().item<int64_t>();
    total += rows * length;
  }
  EXPECT_LE(differ * 100, total) << differ << " of " << total;
}

TEST(FusedDiffusionStep, Bf16LogitsDrawAsTheirFloatValues) {
  torch::manual_seed(4);
  const auto logits = torch::randn({2, 5, 31}).to(torch::kBFloat16);
  const auto z = torch::randint(0, 31, {2, 5}, torch::kLong);
  const auto support = torch::ones({31}, torch::kBool);
  const auto sequences = torch::tensor({3, 4}, torch::kLong);
  DiffusionRowParams p = cases(31)[1].params;
  EXPECT_TRUE(torch::equal(fused_diffusion_step(logits, z, support, sequences, p),
                           fused_diffusion_step(logits.to(torch::kFloat), z, support, sequences, p)));
}

// A toy denoiser whose logits depend on z, so that batches interact through nothing but the sampler.
Denoiser toy_denoiser(int64_t vocab) {
  return [vocab](const torch::Tensor& z, const torch::Tensor&) {
    const auto ids = torch::arange(vocab, torch::kFloat);
    return torch::sin(z.unsqueeze(-1).to(torch::kFloat) * 0.7 + ids * 1.3) * 2.0;
  };
}

TEST(FusedDiffusionStep, ASequenceSamplesTheSameInAnyBatch) {
  const int64_t vocab = 17, rows = 6, length = 9;
  DiffusionProcess process;
  process.noise = testing::toy_noise(testing::ToyNoise::uniform);
  std::vector<int64_t> ids(vocab - 2);
  std::iota(ids.begin(), ids.end(), 0);  // ids 15 and 16 outside the support
  process.support = std::make_shared<NoiseSupport>(ids, vocab);
  DiffusionSampleOptions options;
  options.steps = 5;
  options.seed = 21;
  options.filter.top_p = 0.9;
  DiffusionCanvas canvas{torch::zeros({rows, length}, torch::kLong), torch::zeros({rows, length}, torch::kBool)};
  const auto whole = sample_diffusion(toy_denoiser(vocab), process, canvas, options, torch::kCPU).tokens;
  for (int64_t first : {0, 2, 5}) {
    const int64_t count = first == 5 ? 1 : 3;
    options.first_sequence = first;
    const DiffusionCanvas part{canvas.tokens.narrow(0, first, count), canvas.fixed.narrow(0, first, count)};
    const auto alone = sample_diffusion(toy_denoiser(vocab), process, part, options, torch::kCPU).tokens;
    EXPECT_TRUE(torch::equal(alone, whole.narrow(0, first, count))) << first;
  }
}

}  // namespace
}  // namespace inkstone
