#include "models/qkv_conv.h"

#include <torch/torch.h>

#include "models/depthwise_conv.h"

namespace inkstone {

QkvConvImpl::QkvConvImpl(std::array<int64_t, 3> widths, int64_t kernel, int64_t layer_index)
    : widths_(widths), layer_index_(layer_index) {
  weight = register_parameter("weight", torch::zeros({widths[0] + widths[1] + widths[2], kernel}));
}

std::array<torch::Tensor, 3> QkvConvImpl::forward(const std::array<torch::Tensor, 3>& qkv,
                                                  const AttentionContext& context) {
  const auto c = torch::cat({qkv[0], qkv[1], qkv[2]}, -1);
  const auto convolved = c + depthwise_conv_over_time(c, weight, layer_index_, context);
  const auto parts = convolved.split_with_sizes({widths_[0], widths_[1], widths_[2]}, -1);
  return {parts[0], parts[1], parts[2]};
}

}  // namespace inkstone
