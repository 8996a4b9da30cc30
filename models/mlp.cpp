#include "models/mlp.h"

#include <torch/torch.h>

#include "models/joint_linear.h"
#include "models/lora.h"
#include "models/kernels/swiglu.h"
#include "models/model_dims.h"

namespace inkstone {

SwiGLUImpl::SwiGLUImpl(int64_t d_model, int64_t ffn_dim) {
  const auto no_bias = [](int64_t in, int64_t out) { return torch::nn::LinearOptions(in, out).bias(false); };
  gate_proj = register_module("gate_proj", torch::nn::Linear(no_bias(d_model, ffn_dim)));
  up_proj = register_module("up_proj", torch::nn::Linear(no_bias(d_model, ffn_dim)));
  down_proj = register_module("down_proj", torch::nn::Linear(no_bias(ffn_dim, d_model)));
}

FeedForwardKind swiglu_feed_forward_kind() {
  FeedForwardKind kind;
  kind.letter = 'D';
  kind.module_name = "mlp";
  kind.description = "dense SwiGLU";
  kind.exportable_to_hf = true;
  kind.make = [](const ModelConfig& config, int64_t) {
    return std::make_shared<SwiGLUImpl>(config.d_model, resolved_ffn_dim(config));
  };
  kind.parameter_count = [](const ModelConfig& config) { return 3 * config.d_model * resolved_ffn_dim(config); };
  // The gate and up projections side by side (all the fused gating keeps) and the product down_proj reads.
  kind.saved_floats_per_token = [](const ModelConfig& config, int64_t) { return 3.0 * resolved_ffn_dim(config); };
  kind.projections = [](const ModelConfig& config) { return swiglu_projections(config.d_model, resolved_ffn_dim(config), 1); };
  return kind;
}

std::vector<ProjectionShape> swiglu_projections(int64_t d_model, int64_t ffn_dim, int64_t copies) {
  return {{"gate_proj", d_model, ffn_dim, copies}, {"up_proj", d_model, ffn_dim, copies},
          {"down_proj", ffn_dim, d_model, copies}};
}

torch::Tensor SwiGLUImpl::forward(const torch::Tensor& u) {
  const auto gate_up = plus_joint_lora({gate_proj, up_proj}, u, joint_linear(u, {gate_proj->weight, up_proj->weight}, {}));
  const auto hidden = fused_swiglu(gate_up);
  if (tap_) tap_(hidden);
  return plus_lora(down_proj, hidden, down_proj(hidden));
}

}  // namespace inkstone
