// Unsupervised signals of a model's feed-forward activations on given prompts (docs/probe.md): per layer, how
// concentrated each token's post-SwiGLU activation vector is (inverse participation ratio) and how many directions
// the prompt's activations spread over (spectral entropy of the tokens x features matrix).
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dataset/tokenizer.h"
#include "models/language_model.h"

namespace inkstone {

// Per row a of a [T, F] matrix: Σ a_i⁴ / (Σ a_i²)², in [1/F, 1] (1: one active unit; 1/F: all equally). [T] float64.
torch::Tensor inverse_participation_ratio(const torch::Tensor& activations);

// Of a [T, F] matrix with singular values σ_k: −Σ p_k ln p_k with p_k = σ_k² / Σ σ², in nats (0: rank one;
// ln min(T, F): all directions equal). Computed in float64.
double spectral_entropy(const torch::Tensor& activations);

struct LayerProbe {
  int64_t layer = 0;
  int64_t width = 0;            // F, the feed-forward's hidden width
  double ipr_mean = 0;          // over the prompt's tokens
  double ipr_last = 0;          // of its last token
  double spectral_entropy = 0;  // nats
  double effective_rank = 0;    // exp(spectral_entropy)
};

struct PromptProbe {
  std::string prompt;
  int64_t tokens = 0;
  std::vector<LayerProbe> layers;
};

// Each prompt alone (no padding reaches the statistics) through `model` under `mask` (causal for an autoregressive
// model, bidirectional for a diffusion one). InputError for an empty prompt, one longer than the model's context,
// or a model with a feed-forward that reports no hidden activations.
std::vector<PromptProbe> probe_prompts(LanguageModel model, const Tokenizer& tokenizer,
                                       const std::vector<std::string>& prompts, MaskMode mask, torch::Device device);

}  // namespace inkstone
