// LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models", eq. 3): a frozen projection
// h = W x gains a trained low-rank update, h = W x + (α / r) B A x, with A [r, in] and B [out, r]. B starts at 0, so
// the adapted model starts as exactly the base model, and only A and B train (docs/training.md, "LoRA").
// model.lora_rank > 0 gives every projection named in model.lora_targets (all of them when empty) an adapter, registered inside the
// projection as "<projection>.lora.a" / ".lora.b", and freezes every other parameter.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "config/config.h"

namespace inkstone {

class LoraAdapterImpl : public torch::nn::Module {
 public:
  // A ~ N(0, 1 / in) (the variance that keeps A x of unit order), B = 0.
  LoraAdapterImpl(int64_t in_features, int64_t out_features, int64_t rank, double alpha);
  // (α / r) B A x for x [..., in]: [..., out], in x's dtype.
  torch::Tensor forward(const torch::Tensor& x);
  double scale() const { return scale_; }

  torch::Tensor a, b;

 private:
  double scale_;
};
TORCH_MODULE(LoraAdapter);

// The projections an adapter may sit on (the names model.lora_targets takes), from the block parts' registry.
std::vector<std::string> lora_target_names();

// InputError naming the key for a rank, alpha or target list that cannot be built (a target that is no projection,
// or that no layer of this model has).
void check_lora_settings(const ModelConfig& config);

// Gives every projection of `blocks` named in config.lora_targets its adapter and freezes every parameter of `model`
// that is not an adapter's. Nothing without config.lora_rank > 0.
void attach_lora_adapters(torch::nn::Module& model, torch::nn::Module& blocks, const ModelConfig& config);

// y + the adapter term of `projection` for its input x; y unchanged without an adapter or while adapters are off.
torch::Tensor plus_lora(const torch::nn::Linear& projection, const torch::Tensor& x, torch::Tensor y);
// The same for the joint output [..., Σ out] of several projections of one input (models/joint_linear.h).
torch::Tensor plus_joint_lora(const std::vector<torch::nn::Linear>& projections, const torch::Tensor& x,
                              torch::Tensor joint);

// Parameters the adapters add to layer `layer`, built at the widths of `layer_config` (0 without LoRA): what a LoRA
// run trains, for the memory plan.
int64_t lora_parameter_count(const ModelConfig& layer_config, int64_t layer);

// While one is alive, models on this thread run without their adapters: the base model, which is RL's reference
// policy for a LoRA policy (no second copy of the weights).
class LoraOff {
 public:
  LoraOff();
  ~LoraOff();
  LoraOff(const LoraOff&) = delete;
  LoraOff& operator=(const LoraOff&) = delete;

 private:
  bool was_off_;
};

// Folds every adapter of a checkpoint's weights into its projection, W + (α / r) B A left in float32 (float64 for
// float64 weights) for the reader to store in its own dtype, and drops the adapter entries: the plain model `export
// hf` writes.
void merge_lora_adapters(std::map<std::string, torch::Tensor>& weights, const ModelConfig& config);

}  // namespace inkstone
