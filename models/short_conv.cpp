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

torch::Tensor ShortConvImpl::forward(const torch::Tensor& u, const AttentionContext& context) {
  const auto bcx = in_proj(u).chunk(3, -1);
  const auto& input_gate = bcx[0];
  const auto& output_gate = bcx[1];
  const auto& value = bcx[2];
  return out_proj(output_gate * depthwise_conv_over_time(input_gate * value, conv_weight, layer_index_, context));
}

}  // namespace inkstone
