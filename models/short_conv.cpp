#include "models/short_conv.h"

#include <cmath>

#include <torch/torch.h>

#include "models/depthwise_conv.h"

namespace inkstone {

ShortConvImpl::ShortConvImpl(const ModelConfig& config, int64_t layer_index) : layer_index_(layer_index) {
  const int64_t d = config.d_model;
  in_proj = register_module("in_proj", torch::nn::Linear(torch::nn::LinearOptions(d, 3 * d).bias(false)));
  // Conv1d's default U(±1/√k) until the model's init scheme (ParamRole::conv) draws it again.
  const double bound = 1.0 / std::sqrt(static_cast<double>(config.conv_kernel));
  conv_weight = register_parameter("conv_weight", torch::empty({d, config.conv_kernel}).uniform_(-bound, bound));
  out_proj = register_module("out_proj", torch::nn::Linear(torch::nn::LinearOptions(d, d).bias(false)));
}

int64_t ShortConvImpl::parameter_count(const ModelConfig& config) {
  const int64_t d = config.d_model;
  return 3 * d * d + d * config.conv_kernel + d * d;  // B, C, x̃ projections, depthwise taps, W_out
}

ParamRole ShortConvImpl::role_of(const std::string& name) const {
  if (name == "conv_weight") return ParamRole::conv;
  if (name.rfind("in_proj.", 0) == 0 || name.rfind("out_proj.", 0) == 0) return ParamRole::vo;  // gates and value
  throw std::logic_error("short conv parameter without an init role: " + name);
}

TokenMixerKind short_conv_mixer_kind() {
  TokenMixerKind kind;
  kind.letter = 'C';
  kind.module_name = "conv";
  kind.description = "gated short convolution";
  kind.crosses_streams = true;  // it convolves over the slots, whatever stream they belong to
  kind.make = [](const ModelConfig& config, int64_t layer) { return std::make_shared<ShortConvImpl>(config, layer); };
  kind.parameter_count = ShortConvImpl::parameter_count;
  // The in-projection's three chunks, the gated value, the convolution's output and out_proj's input.
  kind.saved_floats_per_token = [](const ModelConfig& config, int64_t) { return 6.0 * config.d_model; };
  kind.graph_decode_obstacle = "short convolutions";  // the decode step re-creates its state
  return kind;
}

torch::Tensor ShortConvImpl::forward(const torch::Tensor& u, const AttentionContext& context) {
  const auto bcx = in_proj(u).chunk(3, -1);
  const auto& input_gate = bcx[0];
  const auto& output_gate = bcx[1];
  const auto& value = bcx[2];
  return out_proj(output_gate * depthwise_conv_over_time(input_gate * value, conv_weight, layer_index_, context));
}

}  // namespace inkstone
