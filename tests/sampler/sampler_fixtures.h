// The model the AR sampler suites decode with.
#pragma once
#include <torch/torch.h>

#include <cstdint>

#include "models/language_model.h"
#include "tests/fixtures.h"

namespace inkstone::testing {

inline constexpr int64_t kSamplerVocab = 29;

// init_std 0.3: peaked next-token distributions, so greedy ties are vanishingly unlikely.
inline ModelConfig peaked_model_config() { return tiny_model_config(/*init_std=*/0.3); }

// The same weights at every call.
inline LanguageModel peaked_tiny_model() {
  torch::manual_seed(11);
  return build_language_model(peaked_model_config(), kSamplerVocab);
}

}  // namespace inkstone::testing
