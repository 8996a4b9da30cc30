// Mixture-of-experts feed-forward (docs/backbones.md, "Mixture of experts"): router scores s = x W_gᵀ,
//   softmax: p = softmax(s) over all E experts (Qwen3-MoE; equals Mixtral's softmax over the top-k logits once
//            renormalised); sigmoid: p = σ(s) (DeepSeek-V3, arXiv 2412.19437 eq. 13-16);
//   experts K = top-k of p + b (b: aux-loss-free selection bias, no gradient), w_j = scale · p_j / Σ_{K} p,
//   y = Σ_shared FFN_s(x) + Σ_{j∈K} w_j FFN_j(x),   every expert a SwiGLU; no capacity limit (no dropped tokens).
// Training adds the Switch balance loss α·E·Σ_i f_i P_i (Fedus et al. 2021, eq. 4) and the router z-loss
// β·mean_t (logsumexp_i s_ti)² (Zoph et al. 2022, ST-MoE eq. 5) through AuxiliarySource, and after each optimizer
// step moves b_i ← b_i − u·sign(load_i − mean load) (DeepSeek-V3 §2.1.2).
#pragma once
#include <cstdint>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "config/config.h"
#include "models/auxiliary.h"
#include "models/block_registry.h"
#include "models/mlp.h"

namespace inkstone {

struct Routing {
  torch::Tensor logits;   // [N, E], fp32 or wider
  torch::Tensor probs;    // [N, E] p: softmax, or sigmoid normalised over E (the P_i of the balance loss)
  torch::Tensor experts;  // [N, k] int64, selected experts
  torch::Tensor weights;  // [N, k], summing to route_scale
};

class MoEImpl : public FeedForward, public AuxiliarySource {
 public:
  // layer_index names this layer's load metrics.
  MoEImpl(const ModelConfig& config, int64_t layer_index);
  // u: [B, T, d] (already normed) -> [B, T, d].
  torch::Tensor forward(const torch::Tensor& u) override;
  ParamRole role_of(const std::string& name) const override;
  static int64_t parameter_count(const ModelConfig& config);
  // x: [N, d].
  Routing route(const torch::Tensor& x) const;

  AuxiliaryOutputs take_auxiliary() override;
  std::vector<torch::Tensor> rank_statistics() override;  // the expert load since the last step
  void after_optimizer_step(const torch::Tensor& applied) override;

  // Parameters of one routed expert; a token uses top_k of num_experts of them.
  int64_t expert_numel() const { return expert_numel_; }
  int64_t num_experts() const { return num_experts_; }
  int64_t top_k() const { return top_k_; }

  torch::nn::Linear router{nullptr};     // d -> E, no bias
  torch::Tensor selection_bias;          // [E], b: selection only, no gradient, checkpointed with the weights
  torch::nn::ModuleList experts{nullptr};
  SwiGLU shared{nullptr};                // the shared experts as one SwiGLU of n_shared times the width; optional

 private:
  // count_load: false when backward recomputes the forward (activation checkpointing), whose tokens were counted.
  void record_auxiliary(const Routing& routing, bool count_load);

  int64_t layer_index_;
  int64_t num_experts_;
  int64_t top_k_;
  int64_t expert_numel_;
  bool sigmoid_;
  double route_scale_;
  double aux_loss_coef_;
  double z_loss_coef_;
  double bias_update_rate_;
  AuxiliaryOutputs latest_;
  torch::Tensor load_since_update_;  // [E] assignments counted since the last optimizer step
};
TORCH_MODULE(MoE);

// Registry entry 'M' (models/block_registry.h).
FeedForwardKind moe_feed_forward_kind();

// Parameters a token does not use: the unselected routed experts of every MoE layer in `model`. Active
// parameters = total − this.
int64_t inactive_expert_parameters(const torch::nn::Module& model);

}  // namespace inkstone
