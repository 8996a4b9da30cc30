#include "sampler/activation_probe.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>

#include "core/errors.h"

namespace inkstone {

torch::Tensor inverse_participation_ratio(const torch::Tensor& activations) {
  TORCH_CHECK(activations.dim() == 2, "inverse_participation_ratio takes a [T, F] matrix");
  const auto squares = activations.to(torch::kDouble).square();
  return squares.square().sum(-1) / squares.sum(-1).square();
}

double spectral_entropy(const torch::Tensor& activations) {
  TORCH_CHECK(activations.dim() == 2, "spectral_entropy takes a [T, F] matrix");
  const auto energy = torch::linalg_svdvals(activations.to(torch::kDouble)).square();
  const auto p = energy / energy.sum();
  // 0 · ln 0 = 0: directions without energy add nothing.
  return -torch::where(p > 0, p * p.log(), torch::zeros_like(p)).sum().item<double>();
}

std::vector<PromptProbe> probe_prompts(LanguageModel model, const Tokenizer& tokenizer,
                                       const std::vector<std::string>& prompts, MaskMode mask, torch::Device device) {
  std::vector<torch::Tensor> captured(static_cast<size_t>(model->config().n_layers));
  model->tap_feed_forward_activations(
      [&captured](int64_t layer, const torch::Tensor& activations) { captured[layer] = activations; });
  // The tap holds `captured`: it must not outlive this call, whatever throws.
  struct Untap {
    LanguageModel& model;
    ~Untap() { model->tap_feed_forward_activations({}); }
  } untap{model};

  torch::NoGradGuard no_grad;
  model->eval();
  std::vector<PromptProbe> results;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto ids = tokenizer.encode(prompts[i]);
    if (ids.empty()) throw InputError(fmt::format("probe prompt {} encodes to no tokens", i + 1));
    if (static_cast<int64_t>(ids.size()) > model->config().max_seq_len)
      throw InputError(fmt::format("probe prompt {} is {} tokens, more than model.max_seq_len = {}", i + 1, ids.size(),
                                   model->config().max_seq_len));
    const auto tokens = torch::tensor(std::vector<int64_t>(ids.begin(), ids.end()), torch::kLong).unsqueeze(0);
    WindowInputs window;
    window.mask = mask;
    model->hidden_states(tokens.to(device), window);  // for the tap's sake: the head is not needed
    PromptProbe probe{prompts[i], static_cast<int64_t>(ids.size()), {}};
    for (size_t layer = 0; layer < captured.size(); ++layer) {
      const auto activations = captured[layer].squeeze(0).cpu();  // [T, F]: slots of this prompt
      const auto ipr = inverse_participation_ratio(activations);
      LayerProbe l;
      l.layer = static_cast<int64_t>(layer);
      l.width = activations.size(1);
      l.ipr_mean = ipr.mean().item<double>();
      l.ipr_last = ipr[-1].item<double>();
      l.spectral_entropy = spectral_entropy(activations);
      l.effective_rank = std::exp(l.spectral_entropy);
      probe.layers.push_back(l);
    }
    results.push_back(std::move(probe));
  }
  return results;
}

}  // namespace inkstone
