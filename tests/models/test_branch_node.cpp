// Branch nodes change memory, not mathematics: for every zoo variant, under a causal AR forward and a
// bidirectional time-conditioned one, recomputing every block (k = 1) or every other block (k = 2) in backward,
// and releasing each branch's weights between uses (ZeRO stage 3's residency), alone and together, give the
// gradients, auxiliary losses and expert-load statistics of the ordinary forward.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/tensor_storage.h"
#include "models/auxiliary.h"
#include "models/language_model.h"
#include "models/parameter_residency.h"
#include "tests/zoo_fixtures.h"

namespace inkstone {
namespace {

constexpr int64_t kVocab = 61;

// Frees each unit's weights whenever no one holds them and restores their values from a copy on acquisition, as
// a stage-3 rank does for a foreign branch; records how many units were ever held at once.
class ReleasingResidency : public ParameterResidency {
 public:
  explicit ReleasingResidency(std::vector<std::vector<torch::Tensor>> units) : units_(std::move(units)) {
    torch::NoGradGuard no_grad;
    for (const auto& unit : units_) {
      copies_.emplace_back();
      for (const auto& w : unit) {
        EXPECT_TRUE(owns_whole_storage(w));
        copies_.back().push_back(w.detach().clone());
        free_storage(w);
      }
    }
    holds_.assign(units_.size(), 0);
  }
  void acquire(int64_t unit) override {
    if (holds_[unit]++ == 0) {
      for (size_t k = 0; k < units_[unit].size(); ++k) {
        allocate_storage(units_[unit][k]);
        units_[unit][k].variable_data().copy_(copies_[unit][k]);  // no version bump, as a broadcast
      }
      ++held_;
      most_held_ = std::max(most_held_, held_);
    }
  }
  void release(int64_t unit) override {
    ASSERT_GT(holds_[unit], 0);
    if (--holds_[unit] == 0) {
      for (const auto& w : units_[unit]) free_storage(w);
      --held_;
    }
  }
  int64_t held() const { return held_; }
  int64_t most_held() const { return most_held_; }

 private:
  std::vector<std::vector<torch::Tensor>> units_;
  std::vector<std::vector<torch::Tensor>> copies_;
  std::vector<int64_t> holds_;
  int64_t held_ = 0;
  int64_t most_held_ = 0;
};

struct Pass {
  double loss = 0;
  std::map<std::string, torch::Tensor> grads;
  std::map<std::string, double> aux_metrics;
  std::vector<torch::Tensor> statistics;  // expert loads counted by the forward
};

// One forward and backward of a freshly built (seeded) model on fixed tokens: cross-entropy plus the model's
// auxiliary loss.
Pass forward_backward(const ModelConfig& config, int64_t checkpoint_every, bool diffusion, bool released = false) {
  torch::manual_seed(7);
  auto model = build_language_model(config, kVocab);
  model->train();
  std::shared_ptr<ReleasingResidency> residency;
  if (released) residency = std::make_shared<ReleasingResidency>(model->residency_units());
  model->set_branch_execution(BranchExecution(checkpoint_every, residency));
  const auto tokens = torch::randint(kVocab, {3, 24}, torch::kLong);
  const auto targets = torch::randint(kVocab, {3, 24}, torch::kLong);
  WindowInputs args;
  if (diffusion) {
    args.mask = MaskMode::bidirectional;
    args.noise_level = torch::rand({3});
  }
  const auto logits = model->forward(tokens, args);
  const auto aux = take_auxiliary(*model);
  auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, kVocab}), targets.flatten());
  if (aux.loss.defined()) loss = loss + aux.loss;
  loss.backward();
  if (residency) {
    EXPECT_EQ(residency->held(), 0);       // every branch gave its weights back
    EXPECT_EQ(residency->most_held(), 1);  // one branch's at a time
    const auto whole = model->whole_parameters();
    EXPECT_EQ(residency->held(), 2 * config.n_layers);
  }
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

class BranchNodeZoo : public ::testing::TestWithParam<std::string> {};

TEST_P(BranchNodeZoo, RecomputedAndReleasedBranchesGiveTheOrdinaryGradients) {
  const auto path = testing::zoo_config_path(GetParam()).string();
  const Config base = load_config(path);
  for (const bool diffusion : {false, true}) {
    auto overrides = testing::tiny_zoo_model_overrides(base);
    overrides.push_back(diffusion ? "model.time_conditioning=true" : "model.time_conditioning=false");
    if (diffusion) overrides.push_back("model.tie_embeddings=false");
    const ModelConfig config = load_config(path, overrides).model;
    const Pass plain = forward_backward(config, 0, diffusion);
    ASSERT_FALSE(plain.grads.empty());
    for (const int64_t every : {0, 1, 2})
      for (const bool released : {false, true}) {
        if (every == 0 && !released) continue;
        const std::string what =
            fmt::format("{} diffusion={} every={} released={}", GetParam(), diffusion, every, released);
        expect_same(plain, forward_backward(config, every, diffusion, released), what);
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Zoo, BranchNodeZoo, ::testing::ValuesIn(testing::zoo_config_names()),
                         [](const auto& info) { return testing::zoo_test_name(info.param); });

// A model's auxiliary losses are defined only when it has an MoE layer: the comparison above covers them only
// if some zoo variant routes experts.
TEST(BranchNodeZoo, SomeVariantHasExperts) {
  bool experts = false;
  for (const auto& name : testing::zoo_config_names())
    experts |= load_config(testing::zoo_config_path(name).string()).model.ffn_pattern.find('M') != std::string::npos;
  EXPECT_TRUE(experts);
}

}  // namespace
}  // namespace inkstone
