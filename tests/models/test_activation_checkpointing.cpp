// Activation checkpointing changes memory, not mathematics: for every zoo variant, under a causal AR forward and a
// bidirectional time-conditioned one, recomputing every block (k = 1) or every other block (k = 2) in backward
// gives the gradients, auxiliary losses and expert-load statistics of the ordinary forward.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/auxiliary.h"
#include "models/language_model.h"
#include "tests/zoo_fixtures.h"

namespace inkstone {
namespace {

constexpr int64_t kVocab = 61;

struct Pass {
  double loss = 0;
  std::map<std::string, torch::Tensor> grads;
  std::map<std::string, double> aux_metrics;
  std::vector<torch::Tensor> statistics;  // expert loads counted by the forward
};

// One forward and backward of a freshly built (seeded) model on fixed tokens: cross-entropy plus the model's
// auxiliary loss.
Pass forward_backward(const ModelConfig& config, int64_t checkpoint_every, bool diffusion) {
  torch::manual_seed(7);
  auto model = build_language_model(config, kVocab);
  model->train();
  model->set_activation_checkpointing(checkpoint_every);
  const auto tokens = torch::randint(kVocab, {3, 24}, torch::kLong);
  const auto targets = torch::randint(kVocab, {3, 24}, torch::kLong);
  ForwardArgs args;
  if (diffusion) {
    args.mask = MaskMode::bidirectional;
    args.noise_level = torch::rand({3});
  }
  const auto logits = model->forward(tokens, args).logits;
  const auto aux = take_auxiliary(*model);
  auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, kVocab}), targets.flatten());
  if (aux.loss.defined()) loss = loss + aux.loss;
  loss.backward();
  Pass pass;
  pass.loss = loss.item<double>();
  for (const auto& item : model->named_parameters())
    if (item.value().grad().defined()) pass.grads.emplace(item.key(), item.value().grad().clone());
  for (const auto& [name, value] : aux.metrics) pass.aux_metrics[name] = value.item<double>();
  for (const auto& s : rank_statistics(*model)) pass.statistics.push_back(s.clone());
  return pass;
}

void expect_same(const Pass& plain, const Pass& recomputed, const std::string& what) {
  EXPECT_NEAR(plain.loss, recomputed.loss, 1e-6 * std::abs(plain.loss)) << what;
  ASSERT_EQ(plain.grads.size(), recomputed.grads.size()) << what;
  for (const auto& [name, grad] : plain.grads) {
    const auto& other = recomputed.grads.at(name);
    const double scale = grad.abs().max().item<double>() + 1e-12;
    EXPECT_LE((grad - other).abs().max().item<double>(), 1e-5 * scale) << what << " " << name;
  }
  ASSERT_EQ(plain.aux_metrics.size(), recomputed.aux_metrics.size()) << what;
  for (const auto& [name, value] : plain.aux_metrics)
    EXPECT_NEAR(value, recomputed.aux_metrics.at(name), 1e-6 * (1 + std::abs(value))) << what << " " << name;
  ASSERT_EQ(plain.statistics.size(), recomputed.statistics.size()) << what;
  for (size_t i = 0; i < plain.statistics.size(); ++i)
    EXPECT_TRUE(torch::equal(plain.statistics[i], recomputed.statistics[i])) << what << " statistic " << i;
}

class CheckpointedZoo : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointedZoo, RecomputedBlocksGiveTheOrdinaryGradients) {
  const auto path = testing::zoo_config_path(GetParam()).string();
  const Config base = load_config(path);
  for (const bool diffusion : {false, true}) {
    auto overrides = testing::tiny_zoo_model_overrides(base);
    overrides.push_back(diffusion ? "model.time_conditioning=true" : "model.time_conditioning=false");
    if (diffusion) overrides.push_back("model.tie_embeddings=false");
    const ModelConfig config = load_config(path, overrides).model;
    const Pass plain = forward_backward(config, 0, diffusion);
    ASSERT_FALSE(plain.grads.empty());
    for (const int64_t every : {1, 2}) {
      const std::string what = fmt::format("{} diffusion={} every={}", GetParam(), diffusion, every);
      expect_same(plain, forward_backward(config, every, diffusion), what);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Zoo, CheckpointedZoo, ::testing::ValuesIn(testing::zoo_config_names()),
                         [](const auto& info) { return testing::zoo_test_name(info.param); });

// A model's auxiliary losses are defined only when it has an MoE layer: the comparison above covers them only
// if some zoo variant routes experts.
TEST(CheckpointedZoo, SomeVariantHasExperts) {
  bool experts = false;
  for (const auto& name : testing::zoo_config_names())
    experts |= load_config(testing::zoo_config_path(name).string()).model.ffn_pattern.find('M') != std::string::npos;
  EXPECT_TRUE(experts);
}

}  // namespace
}  // namespace inkstone
