// What a training run will hold per rank, predicted from its config before anything is built (docs/training.md,
// "Memory"): the parameters counted without building the model (the blocks through the registry's counts, the
// small modules built on their own), the gradient, bucket and AdamW bytes the ZeRO stage leaves a rank, and the
// activations of one micro-batch from the registry's per-token estimates. `inkstone train --dry-run` prints it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

#include "config/config.h"

namespace inkstone {

struct MemoryPlan {
  int64_t ranks = 1;
  int64_t zero_stage = 0;        // as it applies: 0 in one process
  int64_t parameters = 0;        // the whole model
  int64_t trained_parameters = 0;  // what the optimizer steps: the whole model, or the LoRA adapters alone
  int64_t branch_parameters = 0; // in the residual branches (what ZeRO-3 keeps on their owners only)
  int64_t largest_branch = 0;
  int64_t micro_batch_rows = 0;  // per rank
  int64_t bytes_per_weight = 4;      // and per gradient
  int64_t bytes_per_activation = 4;
  // Bytes per rank.
  double weights = 0;
  double gradients = 0;
  double gradient_buffers = 0;  // data-parallel buckets
  double optimizer = 0;         // AdamW's two moments
  double master_weights = 0;    // fp32 copies of bf16 weights (run.param_dtype = bf16)
  double activations = 0;       // what one micro-batch's forward keeps for backward, at the peak of backward
  double vocabulary_loss = 0;   // the head and loss in row chunks: gradient accumulators and one chunk's logits
  // RL (plan_rollout_memory): the frozen reference policy, and what generating the rollouts holds (a KV cache and
  // next-token logits, or a diffusion canvas's logits) while no backward runs.
  double reference_weights = 0;
  double rollouts = 0;
  double kept_rollout_cache = 0;  // rl.keep_decoder: the rollouts' KV cache, held through the update as well
  double kept_rollout_graphs = 0;  // and its captured decode graphs' memory pools (CUDA)
  double total() const {
    return weights + gradients + gradient_buffers + optimizer + master_weights + reference_weights +
           std::max(activations + vocabulary_loss + kept_rollout_cache + kept_rollout_graphs, rollouts);
  }
};

// `vocab_size`: the tokenizer's (model.vocab_size may pad it); `bf16_activations`: bf16 autocast will run (CUDA).
// bf16 weights (run.param_dtype) make activations bf16 on any device.
MemoryPlan plan_memory(const Config& config, int64_t vocab_size, int64_t ranks, bool bf16_activations);
// An RL run's plan (objective.name an RL objective): its updates run mini-batches of whole groups,
// rl.prompts_per_step / (ranks · rl.mini_batches) groups of rl.group_size rows, each row `row_tokens` long (the
// longest prompt and rl.max_new_tokens) and scored `forward_rows_per_rollout` times (a diffusion policy's ELBO
// draws or recorded transitions);
// rl.reference = "initial" keeps a frozen copy unless LoRA's base is the reference; the rollouts of a rank's
// prompts are generated in one batch: a causal policy's KV cache and logits rows, a denoising one's canvas logits.
struct RolloutPolicyShape {
  bool causal = true;
  bool graphed = false;  // a causal policy's decode steps replay captured CUDA graphs (sampler/decode_step.h)
  int64_t forward_rows_per_rollout = 1;
  int64_t row_tokens = 1;
};
MemoryPlan plan_rollout_memory(const Config& config, int64_t vocab_size, int64_t ranks, bool bf16_activations,
                               const RolloutPolicyShape& policy);
// The plan as the table `--dry-run` prints.
std::string describe(const MemoryPlan& plan);

}  // namespace inkstone
