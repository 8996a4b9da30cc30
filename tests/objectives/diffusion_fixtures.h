// Tiny models, configs and batches the diffusion objective suites share.
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "config/config.h"
#include "core/batch.h"
#include "dataset/byte_tokenizer.h"
#include "models/language_model.h"
#include "objectives/objective.h"

namespace inkstone::testing {

// Tiny models and objectives on the byte tokenizer (support: 256 bytes and eos, N = 257).
inline Config tiny_config(const std::string& objective, bool time_conditioning,
                          const std::vector<std::string>& extra = {}) {
  std::vector<std::string> overrides = {"objective.name=\"" + objective + "\"",
                                        "model.time_conditioning=" + std::string(time_conditioning ? "true" : "false")};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  Config config = config_from_string(
      "[model]\nd_model = 32\nn_layers = 2\nn_heads = 2\nn_kv_heads = 1\nmax_seq_len = 32\ntie_embeddings = false\n"
      "[data]\nseq_len = 16\n"
      "[optim]\nlearning_rate = 3e-3\n"
      "[schedule]\nwarmup_steps = 2\n",
      "test.toml", overrides);
  check_objective_settings(config);  // as `inkstone train` does after loading
  return config;
}

// Gives every parameter a small random value, so that zero-initialised time conditioning reaches the logits.
inline void randomise(LanguageModelImpl& model) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) p.normal_(0.0, 0.1);
}

inline Batch random_batch(int64_t rows, int64_t length) {
  Batch batch{torch::randint(0, 256, {rows, length}, torch::kLong), torch::ones({rows, length}, torch::kBool)};
  batch.real.index_put_({rows - 1, torch::indexing::Slice(length - 3)}, false);  // padding at the end
  batch.tokens.index_put_({rows - 1, torch::indexing::Slice(length - 3)}, ByteTokenizer().specials().pad);
  return batch;
}

}  // namespace inkstone::testing
