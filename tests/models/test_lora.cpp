// LoRA (models/lora.h): an adapted model starts as its base exactly and trains only its adapters; its output is
// that of the base with W + (α / r) B A in every targeted projection (float64, the merge `export hf` writes); with
// the adapters off it is the base (RL's reference policy). The memory plan's count: tests/train/test_memory_plan.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "checkpoint/module_weights.h"
#include "core/errors.h"
#include "models/language_model.h"
#include "models/lora.h"
#include "tests/fixtures.h"

namespace inkstone {
namespace {

using testing::max_abs_diff;

constexpr int64_t kLoraVocab = 23;

// `c` adapted at `rank`; its own lora_targets unless others are given.
ModelConfig lora_config(ModelConfig c, int64_t rank, std::vector<std::string> targets = {}) {
  c.lora_rank = rank;
  c.lora_alpha = 6.0;
  if (!targets.empty()) c.lora_targets = std::move(targets);
  return c;
}

LanguageModel seeded_model(const ModelConfig& c, uint64_t seed) {
  torch::manual_seed(seed);
  return build_language_model(c, kLoraVocab);
}

// Every adapter's B drawn at random, so that the adapters change the output.
void randomise_adapters(LanguageModelImpl& model) {
  torch::NoGradGuard no_grad;
  for (auto& item : model.named_parameters())
    if (item.key().find(".lora.b") != std::string::npos) item.value().normal_(0.0, 0.3);
}

struct LoraVariant {
  const char* name;
  std::function<void(ModelConfig&)> apply;
};

class LoraModels : public ::testing::TestWithParam<LoraVariant> {
 protected:
  ModelConfig base_config() const {
    ModelConfig c = testing::tiny_model_config(/*init_std=*/0.2);
    GetParam().apply(c);
    return c;
  }
};

TEST_P(LoraModels, StartsAsItsBaseAndTrainsOnlyItsAdapters) {
  const ModelConfig base_c = base_config();
  auto base = seeded_model(base_c, 5);
  auto adapted = seeded_model(lora_config(base_c, 4), 5);
  const auto tokens = torch::randint(0, kLoraVocab, {2, 9}, torch::kLong);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(adapted->forward(tokens).equal(base->forward(tokens))) << GetParam().name;
  int64_t adapters = 0;
  for (const auto& item : adapted->named_parameters()) {
    const bool adapter = item.key().find(".lora.") != std::string::npos;
    EXPECT_EQ(item.value().requires_grad(), adapter) << item.key();
    adapters += adapter;
  }
  EXPECT_GT(adapters, 0) << GetParam().name;
}

// In float64 the adapted model equals its base with every adapter folded into its projection.
TEST_P(LoraModels, EqualsItsBaseWithTheAdaptersMerged) {
  const ModelConfig base_c = base_config(), adapted_c = lora_config(base_c, 3);
  auto adapted = seeded_model(adapted_c, 7);
  randomise_adapters(*adapted);
  adapted->to(torch::kDouble);
  auto weights = module_weights(*adapted);
  std::map<std::string, torch::Tensor> merged(weights.begin(), weights.end());
  merge_lora_adapters(merged, adapted_c);
  for (const auto& [name, tensor] : merged) EXPECT_EQ(name.find(".lora."), std::string::npos) << name;
  auto base = seeded_model(base_c, 8);
  base->to(torch::kDouble);
  load_module_weights(*base, NamedTensors(merged.begin(), merged.end()), "merged");
  const auto tokens = torch::randint(0, kLoraVocab, {2, 9}, torch::kLong);
  torch::NoGradGuard no_grad;
  const auto logits = adapted->forward(tokens);
  EXPECT_LT(max_abs_diff(logits, base->forward(tokens)), 1e-10) << GetParam().name;
  // The adapters do change the output, and with them off the model is its base again.
  const auto base_weights = module_weights(*adapted);
  auto plain = seeded_model(base_c, 9);
  plain->to(torch::kDouble);
  NamedTensors without_adapters;
  for (const auto& [name, tensor] : base_weights)
    if (name.find(".lora.") == std::string::npos) without_adapters.emplace_back(name, tensor);
  load_module_weights(*plain, without_adapters, "base");
  const auto reference = plain->forward(tokens);
  EXPECT_GT(max_abs_diff(logits, reference), 1e-3) << GetParam().name;
  const LoraOff off;
  EXPECT_TRUE(adapted->forward(tokens).equal(reference)) << GetParam().name;
}

INSTANTIATE_TEST_SUITE_P(
    Zoo, LoraModels,
    ::testing::Values(LoraVariant{"dense", [](ModelConfig&) {}},
                      LoraVariant{"moe",
                              [](ModelConfig& c) {
                                c.ffn_pattern = "M";
                                c.moe_experts = 3;
                                c.moe_top_k = 2;
                                c.moe_shared_experts = 1;
                              }},
                      LoraVariant{"shortconv_hybrid", [](ModelConfig& c) { c.mixer_pattern = "CA"; }},
                      LoraVariant{"biased", [](ModelConfig& c) { c.attention_bias = AttentionBias::all; }},
                      LoraVariant{"some_targets",
                                  [](ModelConfig& c) { c.lora_targets = {"k_proj", "o_proj", "up_proj"}; }}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(LoraSettings, TargetsAreCheckedByName) {
  const ModelConfig c = testing::tiny_model_config(0.02);
  const auto refusal = [&](const ModelConfig& config) {
    try {
      build_language_model(config, kLoraVocab);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(refusal(lora_config(c, 2, {"qproj"})),
            "model.lora_targets has 'qproj', allowed: down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj");
  ModelConfig conv = lora_config(c, 2, {"q_proj"});
  conv.mixer_pattern = "C";
  EXPECT_EQ(refusal(conv), "model.lora_targets has 'q_proj', which no layer of this model has (model.mixer_pattern = "
                           "'C', model.ffn_pattern = 'D')");
}

}  // namespace
}  // namespace inkstone
