// SwiGLU feed-forward (Shazeer 2020, eq. 6): FFN(u) = W_down (SiLU(W_gate u) ⊙ W_up u), no biases. The gate and up
// projections are one product (models/joint_linear.h) and the gating one kernel (models/kernels/swiglu.h).
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "models/block_registry.h"

namespace inkstone {

class SwiGLUImpl : public FeedForward {
 public:
  SwiGLUImpl(int64_t d_model, int64_t ffn_dim);
  torch::Tensor forward(const torch::Tensor& u) override;
  ParamRole role_of(const std::string&) const override { return ParamRole::mlp; }
  // SiLU(W_gate u) ⊙ W_up u, what down_proj reads.
  bool has_hidden_activations() const override { return true; }

  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(SwiGLU);

// The gate, up and down projections of `copies` SwiGLUs of these widths (what LoRA can adapt).
std::vector<ProjectionShape> swiglu_projections(int64_t d_model, int64_t ffn_dim, int64_t copies);

// Registry entry 'D', the dense feed-forward (models/block_registry.h).
FeedForwardKind swiglu_feed_forward_kind();

}  // namespace inkstone
