// What a window objective trains on besides plain windows (docs/training.md): with a loss mask (fine-tuning on
// conversations) the AR objective scores only the masked targets, whose context includes the prompt, and the
// diffusion objectives noise and score only the response, the prompt staying clean, with padding turned into
// trained end-of-text tokens; under attention annealing (AR -> diffusion) attention opens from causal.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "objectives/ar.h"
#include "objectives/diffusion_objective.h"
#include "objectives/diffusion_time.h"
#include "objectives/noise_support.h"
#include "tests/fixtures.h"
#include "tests/objectives/diffusion_fixtures.h"

namespace inkstone {
namespace {

using testing::random_batch;
using testing::randomise;
using testing::tiny_config;
using torch::indexing::None;
using torch::indexing::Slice;

// Row r's first 3 + r tokens are the prompt; the rest is the response. The last row ends in padding.
Batch conversation_batch(int64_t rows, int64_t length) {
  Batch batch = random_batch(rows, length);
  batch.loss_mask = torch::ones({rows, length}, torch::kBool);
  for (int64_t r = 0; r < rows; ++r) batch.loss_mask.index_put_({r, Slice(0, 3 + r)}, false);
  batch.loss_mask &= batch.real;
  batch.conversations = torch::ones({rows}, torch::kBool);
  return batch;
}

TEST(LossMasks, ArScoresTheResponseTargetsGivenTheWholeConversation) {
  torch::manual_seed(51);
  const Config config = tiny_config("ar", false);
  AutoregressiveObjective objective(config);
  auto model = build_language_model(config.model, 260);
  randomise(*model);
  const Batch batch = conversation_batch(3, 14);
  const auto out = objective.loss(*model, batch);

  // float64 oracle: the negative log-likelihood of every target the mask trains on, from full logits.
  torch::NoGradGuard no_grad;
  const auto logits = model->forward(batch.tokens.index({Slice(), Slice(0, -1)})).to(torch::kDouble);
  const auto targets = batch.tokens.index({Slice(), Slice(1, None)});
  const auto counted = batch.loss_mask.index({Slice(), Slice(1, None)}) & batch.real.index({Slice(), Slice(0, -1)});
  const auto nll = -torch::log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1);
  const double want = nll.masked_select(counted).sum().item<double>();
  EXPECT_NEAR(out.loss_sum.item<double>(), want, 1e-5 * std::abs(want));
  EXPECT_EQ(out.count.item<double>(), counted.sum().item<double>());
  // Row 0 trains on targets 3..13 (11), row 1 on 4..13 (10), row 2 on 5..10 (its last 3 are padding).
  EXPECT_EQ(out.count.item<double>(), 11 + 10 + 6);

  // The prompt is context: changing a prompt token changes the response's loss.
  Batch other = batch;
  other.tokens = batch.tokens.clone();
  other.tokens.index_put_({0, 0}, (batch.tokens.index({0, 0}) + 1) % 256);
  torch::GradMode::set_enabled(true);
  EXPECT_NE(objective.loss(*model, other).loss_sum.item<double>(), out.loss_sum.item<double>());
}

TEST(LossMasks, PaddingAfterAConversationBecomesTrainedEndOfText) {
  const int64_t eos = ByteTokenizer().specials().eos;
  const Batch batch = conversation_batch(3, 14);
  const Batch padded = with_responses_padded_by_eos(batch, eos);
  EXPECT_TRUE(padded.real.all().item<bool>());
  EXPECT_TRUE(padded.tokens.index({2, Slice(11)}).eq(eos).all().item<bool>());
  EXPECT_TRUE(padded.tokens.index({Slice(), Slice(0, 11)}).equal(batch.tokens.index({Slice(), Slice(0, 11)})));
  EXPECT_TRUE(padded.loss_mask.equal(batch.loss_mask | ~batch.real));
  // A row of plain text in a mixture (trained on every real token) keeps its padding.
  Batch mixed = batch;
  mixed.loss_mask = batch.loss_mask.clone();
  mixed.loss_mask.index_put_({2}, batch.real.index({2}));
  mixed.conversations = torch::tensor({true, true, false});
  const Batch kept = with_responses_padded_by_eos(mixed, eos);
  EXPECT_TRUE(kept.real.equal(batch.real));
  EXPECT_TRUE(kept.tokens.equal(batch.tokens));
  EXPECT_TRUE(kept.loss_mask.equal(mixed.loss_mask));
  // Pretraining batches (no loss mask) are left as they are.
  const Batch plain = random_batch(2, 8);
  EXPECT_TRUE(with_responses_padded_by_eos(plain, eos).tokens.equal(plain.tokens));
  EXPECT_FALSE(with_responses_padded_by_eos(plain, eos).loss_mask.defined());
}

// The loss equals the one of a z that corrupts the response only (the same draws); corrupting the prompt as well
// gives another loss, so the comparison can tell the two apart.
void expect_only_the_response_is_noised(const std::string& name) {
  const Config config = tiny_config(name, false, {"data.mode=\"pad\""});
  const auto built = make_objective(config, ByteTokenizer());
  auto& objective = dynamic_cast<DiffusionObjective&>(*built);
  auto model = build_language_model(config.model, 260);
  randomise(*model);
  const Batch given = conversation_batch(3, 14);

  torch::manual_seed(7);
  const auto out = objective.loss(*model, given);

  const Batch batch = with_responses_padded_by_eos(given, ByteTokenizer().specials().eos);
  const auto scored = scored_tokens(batch);
  const auto composite = [&](const torch::Tensor& noised) {
    torch::manual_seed(7);
    const auto t = sample_training_time(config.diffusion, 3, 14, 0, 0, torch::kCPU);
    const auto z = torch::where(noised, objective.corrupt(batch.tokens, t, nullptr), batch.tokens);
    return objective.score(*model, batch, t, z);
  };
  const auto response_only = composite(scored);
  EXPECT_NEAR(out.loss_sum.item<double>(), response_only.loss.item<double>(), 1e-6);
  EXPECT_EQ(out.count.item<double>(), scored.sum().item<double>());
  EXPECT_EQ(out.count.item<double>(), 11 + 10 + 9);  // row 2: 6 response tokens and 3 end-of-text
  EXPECT_TRUE((response_only.corrupted & ~scored).sum().item<int64_t>() == 0);
  EXPECT_GT(response_only.corrupted.sum().item<int64_t>(), 0);
  EXPECT_NE(composite(batch.real).loss.item<double>(), response_only.loss.item<double>());
}

TEST(LossMasks, MaskedDiffusionNoisesAndScoresOnlyTheResponse) {
  expect_only_the_response_is_noised("masked_diffusion");
}

TEST(LossMasks, UniformDiffusionNoisesAndScoresOnlyTheResponse) {
  expect_only_the_response_is_noised("uniform_diffusion");
}

// AR -> diffusion adaptation: step 0 of the annealing is causal attention, the share of later keys grows with the
// step, and from diffusion.attention_anneal_steps on (and in evaluation) attention is bidirectional.
TEST(AttentionAnnealing, OpensFromCausalToBidirectional) {
  EXPECT_FALSE(annealed_attention(-1, 10, 8, torch::kCPU).defined());
  EXPECT_FALSE(annealed_attention(10, 10, 8, torch::kCPU).defined());
  EXPECT_TRUE(annealed_attention(0, 10, 8, torch::kCPU).equal(torch::ones({8, 8}, torch::kBool).tril()));
  torch::manual_seed(3);
  const auto half = annealed_attention(5, 10, 64, torch::kCPU);
  EXPECT_TRUE((half | ~torch::ones({64, 64}, torch::kBool).tril()).all().item<bool>());  // every earlier key
  // 2,016 later pairs at p = 1/2: the open share lies within 5 standard deviations (0.056) of one half.
  const double open = half.triu(1).sum().item<double>() / 2016.0;
  EXPECT_NEAR(open, 0.5, 5 * std::sqrt(0.25 / 2016.0));
}

TEST(AttentionAnnealing, AtItsFirstStepAPositionIsScoredWithoutTheTokensAfterIt) {
  const Config config =
      tiny_config("masked_diffusion", false, {"diffusion.attention_anneal_steps=100"});
  const auto built = make_objective(config, ByteTokenizer());
  auto& objective = dynamic_cast<DiffusionObjective&>(*built);
  auto model = build_language_model(config.model, 260);
  randomise(*model);
  torch::NoGradGuard no_grad;
  Batch batch = random_batch(2, 12);
  batch.real.fill_(true);
  const auto t = torch::full({2, 1}, 0.7f);
  const auto z = objective.corrupt(batch.tokens, t, nullptr);
  auto changed = z.clone();
  changed.index_put_({Slice(), 11}, ByteTokenizer().specials().mask);
  changed.index_put_({Slice(), 10}, (z.index({Slice(), 10}) + 1) % 256);
  const auto earlier = [&](const torch::Tensor& nelbo) { return nelbo.index({Slice(), Slice(0, 10)}); };
  for (const int64_t step : {int64_t{0}, int64_t{-1}}) {
    batch.step = step;
    const auto before = objective.score(*model, batch, t, z), after = objective.score(*model, batch, t, changed);
    if (step == 0)  // causal: positions 0..9 never see 10 and 11
      EXPECT_TRUE(earlier(before.nelbo).equal(earlier(after.nelbo)));
    else  // evaluation: bidirectional
      EXPECT_FALSE(earlier(before.nelbo).equal(earlier(after.nelbo)));
  }
}

// AR -> diffusion with shifted outputs (Dream): token j is read from the output at j − 1; position 0 and the first
// token of a packed document read their own.
TEST(ShiftedOutputs, TokenJReadsTheOutputAtJMinusOne) {
  const auto values = torch::tensor({1.0, 2.0, 3.0, 4.0}).view({1, 4, 1});
  EXPECT_TRUE(outputs_shifted_right(values).equal(torch::tensor({1.0, 1.0, 2.0, 3.0}).view({1, 4, 1})));
  const auto documents = torch::tensor({0, 0, 1, 1}, torch::kLong).view({1, 4});
  EXPECT_TRUE(outputs_shifted_right(values, documents).equal(torch::tensor({1.0, 1.0, 3.0, 3.0}).view({1, 4, 1})));
}

// At the first annealing step attention is causal, so with shifted outputs the adapted model is still the AR model
// it starts from: the NELBO of a masked last token is the AR next-token loss of that token (over the noise support)
// times masked diffusion's ELBO weight −α'/(1 − α). Unshifted, the same position reads its own mask instead.
TEST(ShiftedOutputs, AtTheFirstAnnealingStepTheAdaptedModelIsTheArModel) {
  const Config config = tiny_config("masked_diffusion", false,
                                    {"diffusion.attention_anneal_steps=100", "diffusion.shifted_outputs=true"});
  const auto built = make_objective(config, ByteTokenizer());
  auto& objective = dynamic_cast<DiffusionObjective&>(*built);
  auto model = build_language_model(config.model, 260);
  randomise(*model);
  torch::NoGradGuard no_grad;
  Batch batch{torch::randint(0, 256, {2, 12}, torch::kLong), torch::ones({2, 12}, torch::kBool)};
  batch.step = 0;
  const auto t = torch::full({2, 1}, 0.7, torch::kFloat);
  auto z = batch.tokens.clone();
  z.index_put_({Slice(), 11}, ByteTokenizer().specials().mask);
  const auto nelbo = objective.score(*model, batch, t, z).nelbo.index({Slice(), 11}).to(torch::kDouble);

  WindowInputs causal;
  causal.mask = MaskMode::causal;
  const auto logits = model->forward(batch.tokens.narrow(1, 0, 11), causal).select(1, 10).to(torch::kDouble);
  const NoiseSupport support(ByteTokenizer(), 260, false);
  const auto log_p = torch::log_softmax(support.restrict_logits(logits), -1);
  const auto ar_loss = -log_p.gather(-1, batch.tokens.index({Slice(), Slice(11, 12)})).squeeze(-1);
  const auto t64 = t.to(torch::kDouble);
  const auto levels = objective.noise()->levels(t64), rates = objective.noise()->rates(t64);
  const auto weight = (-rates.keep / (1.0 - levels.keep)).squeeze(-1);
  EXPECT_LT((nelbo - weight * ar_loss).abs().max().item<double>(), 1e-4 * ar_loss.abs().max().item<double>());

  const Config unshifted = tiny_config("masked_diffusion", false, {"diffusion.attention_anneal_steps=100"});
  const auto plain_built = make_objective(unshifted, ByteTokenizer());
  auto& plain = dynamic_cast<DiffusionObjective&>(*plain_built);
  const auto own = plain.score(*model, batch, t, z).nelbo.index({Slice(), 11}).to(torch::kDouble);
  EXPECT_GT((own - weight * ar_loss).abs().max().item<double>(), 1e-3);
}

}  // namespace
}  // namespace inkstone
