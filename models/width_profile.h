// ×-shaped variable width (Wu et al., Variable-Width Transformers, arXiv 2606.18246; docs/backbones.md,
// "x-shaped width"): layer i has its own residual width w_i, geometric down to a bottleneck ρ_b·h at layer k and
// back up, with the base width solved so the model has the parameters of the uniform one; the residual is resized
// between layers.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "config/config.h"
#include "models/residual_routing.h"

namespace inkstone {

// w_1 = b; w_i = w_{i−1}·f up to layer k with f = (ρ_b h / b)^(1/(k−1)), then w_i = w_{i−1}·u with
// u = (b / (ρ_b h))^(1/(L−k)), so w_L = w_1; each rounded to a multiple of `quantum` (at least one quantum).
std::vector<int64_t> geometric_widths(double base_width, int64_t model_width, double bottleneck_ratio,
                                      int64_t bottleneck_layer, int64_t n_layers, int64_t quantum);

// The bottleneck layer config.width_bottleneck_layer names (0: 3/4 of the depth, the 500M recipe's 18 of 24).
int64_t resolved_bottleneck_layer(const ModelConfig& config);

// One block's config at residual width w: heads kept, head dim w / n_heads, the feed-forward (and expert) width of
// d_model scaled by w / d_model.
ModelConfig layer_config(const ModelConfig& config, int64_t width);

// Parameters of block `layer` (its registered mixer and feed-forward, norms, adaLN) as built from `layer_config`.
int64_t block_parameter_count(const ModelConfig& layer_config, int64_t layer);

// Parameters that depend on the widths: every block plus the final norm (embedding and head stay at d_model).
int64_t width_dependent_parameter_count(const ModelConfig& config, const std::vector<int64_t>& widths);

// Every layer's width: d_model for a uniform profile; for a geometric one, the base width whose profile comes
// closest to the uniform model's parameter count (an InputError when a width does not give every head an even
// head dim). Quantisation limits the match: within 0.5 % needs quanta small against the widths.
std::vector<int64_t> layer_widths(const ModelConfig& config);

// (parameters of these widths − the uniform model's) / the uniform model's, over the width-dependent parameters.
double width_parameter_mismatch(const ModelConfig& config, const std::vector<int64_t>& widths);

// Resizes a residual x [.., w_x] to `width` (docs/backbones.md, "x-shaped width"): a shrink keeps the first
// coordinates; a widening keeps x and, with carry_forward, fills each missing coordinate from the newest of
// `earlier` (newest first) that has it, then zero-pads the rest.
torch::Tensor resize_residual(const torch::Tensor& x, int64_t width, const std::vector<torch::Tensor>& earlier,
                              bool carry_forward);

// The plain residual stream of a variable-width model: before layer ℓ's mixer the stream is resized to w_ℓ,
// remembering every earlier hidden state (embedding, then each block's output) for carry-forward.
class WidthVaryingStream : public ResidualStream {
 public:
  WidthVaryingStream(std::vector<int64_t> widths, bool carry_forward, torch::Tensor embedding);
  torch::Tensor input(int64_t site) override;
  void add(int64_t site, const torch::Tensor& output) override;
  // The final-normed output (width w_L) resized to the head's width.
  torch::Tensor to_model_width(const torch::Tensor& normed, int64_t model_width) const override;

 private:
  std::vector<int64_t> widths_;
  bool carry_forward_;
  torch::Tensor x_;
  std::vector<torch::Tensor> earlier_;  // newest first
};

}  // namespace inkstone
