#include "models/width_profile.h"

#include <cmath>

#include <fmt/format.h>
#include <torch/torch.h>

#include "core/errors.h"
#include "models/block_registry.h"
#include "models/model_dims.h"

namespace inkstone {

std::vector<int64_t> geometric_widths(double base_width, int64_t model_width, double bottleneck_ratio,
                                      int64_t bottleneck_layer, int64_t n_layers, int64_t quantum) {
  const double narrowest = bottleneck_ratio * static_cast<double>(model_width);
  const int64_t k = bottleneck_layer;
  // Each width from its own exponent (not a running product), so that the last layer is exactly the first one's
  // width when the profile climbs back (k < n_layers) and rounding cannot quantise the two ends differently.
  std::vector<int64_t> widths;
  for (int64_t i = 1; i <= n_layers; ++i) {
    double w = base_width;
    if (i > 1 && i <= k)
      w = base_width * std::pow(narrowest / base_width, static_cast<double>(i - 1) / static_cast<double>(k - 1));
    else if (i > k && i < n_layers)
      w = narrowest * std::pow(base_width / narrowest, static_cast<double>(i - k) / static_cast<double>(n_layers - k));
    const auto quanta = static_cast<int64_t>(std::llround(w / static_cast<double>(quantum)));
    widths.push_back(std::max<int64_t>(1, quanta) * quantum);
  }
  return widths;
}

int64_t resolved_bottleneck_layer(const ModelConfig& config) {
  if (config.width_bottleneck_layer > 0) return config.width_bottleneck_layer;
  return std::max<int64_t>(2, (3 * config.n_layers + 2) / 4);
}

ModelConfig layer_config(const ModelConfig& config, int64_t width) {
  ModelConfig layer = config;
  layer.d_model = width;
  // proportional, without the uniform model's rounding to 64, which would make the parameter match coarse
  const auto scaled = [&](int64_t ffn) { return (ffn * width + config.d_model / 2) / config.d_model; };
  layer.ffn_dim = scaled(resolved_ffn_dim(config));
  if (config.moe_expert_ffn_dim > 0) layer.moe_expert_ffn_dim = scaled(config.moe_expert_ffn_dim);
  return layer;
}

int64_t block_parameter_count(const ModelConfig& c, int64_t layer) {
  const int64_t d = c.d_model;
  const int64_t norms = 2 * d;
  const int64_t adaln = c.time_conditioning ? 6 * d * (c.cond_dim + 1) : 0;  // shift, scale, gate per branch
  return token_mixer_of(c, layer).parameter_count(c) + feed_forward_of(c, layer).parameter_count(c) + norms + adaln;
}

int64_t width_dependent_parameter_count(const ModelConfig& config, const std::vector<int64_t>& widths) {
  int64_t total = widths.back();  // final norm
  for (size_t i = 0; i < widths.size(); ++i)
    total += block_parameter_count(layer_config(config, widths[i]), static_cast<int64_t>(i));
  return total;
}

namespace {

void check_head_dims(const ModelConfig& config, const std::vector<int64_t>& widths) {
  for (size_t i = 0; i < widths.size(); ++i)
    if (widths[i] % config.n_heads != 0 || (widths[i] / config.n_heads) % 2 != 0)
      throw InputError(fmt::format("layer {} width {} does not give model.n_heads = {} heads an even head dim; make "
                                   "model.width_quantum a multiple of {}",
                                   i, widths[i], config.n_heads, 2 * config.n_heads));
}

}  // namespace

std::vector<int64_t> layer_widths(const ModelConfig& config) {
  if (config.width_profile == WidthProfile::uniform) return std::vector<int64_t>(config.n_layers, config.d_model);
  const std::vector<int64_t> uniform(config.n_layers, config.d_model);
  const auto target = static_cast<double>(width_dependent_parameter_count(config, uniform));
  const int64_t k = resolved_bottleneck_layer(config);
  // The count is a step function of b (widths are quantised): scan b finely and keep the closest profile.
  std::vector<int64_t> best;
  double best_error = INFINITY;
  const double step = static_cast<double>(config.width_quantum) / 64.0;
  for (double b = static_cast<double>(config.width_quantum); b <= 4.0 * config.d_model; b += step) {
    auto widths = geometric_widths(b, config.d_model, config.width_bottleneck_ratio, k, config.n_layers,
                                   config.width_quantum);
    const double error = std::abs(width_dependent_parameter_count(config, widths) - target) / target;
    if (error < best_error) {
      best_error = error;
      best = std::move(widths);
    }
  }
  check_head_dims(config, best);
  return best;
}

double width_parameter_mismatch(const ModelConfig& config, const std::vector<int64_t>& widths) {
  const std::vector<int64_t> uniform(config.n_layers, config.d_model);
  const auto target = static_cast<double>(width_dependent_parameter_count(config, uniform));
  return (static_cast<double>(width_dependent_parameter_count(config, widths)) - target) / target;
}

torch::Tensor resize_residual(const torch::Tensor& x, int64_t width, const std::vector<torch::Tensor>& earlier,
                              bool carry_forward) {
  int64_t filled = x.size(-1);
  if (width <= filled) return width == filled ? x : x.narrow(-1, 0, width);
  std::vector<torch::Tensor> pieces{x};
  if (carry_forward) {
    for (const auto& state : earlier) {
      if (filled == width) break;
      const int64_t end = std::min(state.size(-1), width);
      if (end <= filled) continue;
      pieces.push_back(state.narrow(-1, filled, end - filled));
      filled = end;
    }
  }
  if (filled < width) {
    auto shape = x.sizes().vec();
    shape.back() = width - filled;
    pieces.push_back(torch::zeros(shape, x.options()));
  }
  return torch::cat(pieces, -1);
}

WidthVaryingStream::WidthVaryingStream(std::vector<int64_t> widths, bool carry_forward, torch::Tensor embedding)
    : widths_(std::move(widths)), carry_forward_(carry_forward), x_(std::move(embedding)) {}

torch::Tensor WidthVaryingStream::input(int64_t site) {
  if (site % 2 == 0 && site / 2 < static_cast<int64_t>(widths_.size())) {
    auto resized = resize_residual(x_, widths_[site / 2], earlier_, carry_forward_);
    earlier_.insert(earlier_.begin(), x_);
    x_ = resized;
  }
  return x_;
}

void WidthVaryingStream::add(int64_t, const torch::Tensor& output) { x_ = x_ + output; }

torch::Tensor WidthVaryingStream::to_model_width(const torch::Tensor& normed, int64_t model_width) const {
  return resize_residual(normed, model_width, earlier_, carry_forward_);
}

}  // namespace inkstone
