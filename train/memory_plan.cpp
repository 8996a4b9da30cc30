#include "train/memory_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "models/block_registry.h"
#include "models/kv_cache.h"
#include "models/lora.h"
#include "models/model_dims.h"
#include "models/modulation.h"
#include "models/residual_routing.h"
#include "models/time_embedding.h"
#include "models/width_profile.h"
#include "objectives/chunked_vocab.h"
#include "objectives/objective.h"

namespace inkstone {
namespace {

int64_t parameters_of(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

// Everything outside the blocks, embeddings and head: small (a few vectors per layer), so built and counted.
int64_t small_module_parameters(const ModelConfig& c) {
  int64_t n = 0;
  if (c.residual != ResidualMode::plain) n += parameters_of(*ResidualRouter(c));
  if (c.time_conditioning) {
    n += parameters_of(*TimeEmbedding(c.cond_dim));
    n += parameters_of(*AdaLN(c.cond_dim, c.d_model, 1, /*with_gate=*/false));
  }
  return n;
}

}  // namespace

namespace {

// The plan of a run whose micro-batch is `rows_in` rows of `tokens` tokens per rank.
MemoryPlan plan_for(const Config& config, int64_t vocab_size, int64_t ranks, bool bf16_activations, int64_t rows_in,
                    int64_t tokens) {
  const ModelConfig& c = config.model;
  check_lora_settings(c);  // a target no layer has would plan nothing to train
  MemoryPlan plan;
  plan.ranks = ranks;
  plan.zero_stage = ranks > 1 ? config.distributed.zero_stage : 0;
  const bool bf16_weights = config.run.param_dtype == FloatFormat::bf16;
  plan.bytes_per_weight = bf16_weights ? 2 : 4;
  plan.bytes_per_activation = bf16_activations || bf16_weights ? 2 : 4;
  const int64_t vocab = c.vocab_size > 0 ? c.vocab_size : vocab_size;
  const int64_t d = c.d_model;
  const std::vector<int64_t> widths = layer_widths(c);
  const int64_t streams = c.hidden_streams;
  const int64_t slots = streams * tokens;

  // Parameters, and per layer the floats per slot its forward keeps for backward: each branch's norm input and
  // output (with adaLN also the modulated input and the gated output), the parts' own, and with a routed
  // residual the two sources each layer adds to the stream's history.
  plan.parameters = vocab * d * streams + (c.tie_embeddings ? 0 : d * vocab) + widths.back() + small_module_parameters(c);
  std::vector<double> layer_floats;
  for (size_t i = 0; i < widths.size(); ++i) {
    const int64_t w = widths[i];
    const ModelConfig lc = layer_config(c, w);
    const auto& mixer = token_mixer_of(lc, static_cast<int64_t>(i));
    const auto& ffn = feed_forward_of(lc, static_cast<int64_t>(i));
    const int64_t mixer_branch = mixer.parameter_count(lc) + w;
    const int64_t ffn_branch = ffn.parameter_count(lc) + w;
    plan.branch_parameters += mixer_branch + ffn_branch;
    plan.largest_branch = std::max({plan.largest_branch, mixer_branch, ffn_branch});
    const int64_t adapters = lora_parameter_count(lc, static_cast<int64_t>(i));
    plan.parameters += block_parameter_count(lc, static_cast<int64_t>(i)) + adapters;
    plan.trained_parameters += adapters;
    const double per_branch = (c.time_conditioning ? 4.0 : 2.0) * static_cast<double>(w);
    double floats = 2 * per_branch + (c.residual != ResidualMode::plain ? 2.0 * w : 0.0);
    if (mixer.saved_floats_per_token) floats += mixer.saved_floats_per_token(lc, slots);
    if (ffn.saved_floats_per_token) floats += ffn.saved_floats_per_token(lc, slots);
    layer_floats.push_back(floats);
  }

  // LoRA trains the adapters alone; the frozen weights stay whole on every rank whatever the ZeRO stage.
  const bool lora = c.lora_rank > 0;
  if (!lora) plan.trained_parameters = plan.parameters;
  const int64_t stage = plan.zero_stage;
  const double all = static_cast<double>(plan.parameters);
  const double p = static_cast<double>(plan.trained_parameters), share = p / static_cast<double>(ranks);
  const double branches = static_cast<double>(plan.branch_parameters);
  const double weight = static_cast<double>(plan.bytes_per_weight);
  plan.weights = weight * (stage == 3 && !lora ? all - branches + branches / ranks + 2.0 * plan.largest_branch : all);
  plan.gradients = weight * (stage >= 2 ? share : p);
  // Buckets sum in fp32 whatever the weights' dtype (train/distributed.h).
  const double bucket_bytes = config.distributed.bucket_mb * 1024 * 1024;
  if (ranks > 1) plan.gradient_buffers = stage >= 2 ? 4.0 * share + 2.0 * bucket_bytes : 4.0 * p;
  plan.optimizer = 8.0 * (stage >= 1 ? share : p);
  if (bf16_weights) plan.master_weights = 4.0 * (stage >= 1 ? share : p);

  // Activations at the start of backward: every layer's (a recomputed layer keeps its branch inputs, and one
  // recomputed layer is whole again while its backward runs) and the final norm's input and output.
  plan.micro_batch_rows = rows_in;
  const int64_t every = config.train.activation_checkpointing;
  double per_slot = 2.0 * d, rerun = 0;
  for (size_t i = 0; i < layer_floats.size(); ++i) {
    const bool recomputed = every > 0 && static_cast<int64_t>(i) % every == 0;
    per_slot += recomputed ? 2.0 * static_cast<double>(widths[i]) : layer_floats[i];  // its two branch inputs
    if (recomputed) rerun = std::max(rerun, layer_floats[i]);
  }
  const double rows = static_cast<double>(plan.micro_batch_rows);
  plan.activations = rows * plan.bytes_per_activation * (static_cast<double>(slots) * (per_slot + rerun));
  // The vocabulary loss in row chunks (objectives/chunked_vocab.h): the gradients it forms for the head's input
  // (activation dtype) and weight (float32), and one chunk's working copies of its float32 logits.
  const double loss_rows = rows * static_cast<double>(tokens);
  // Planned for CUDA unless the run is on the CPU by name (the larger chunk where run.device = auto).
  const double chunk_rows = std::min(
      loss_rows, static_cast<double>(chunk_rows_for(vocab, config.objective.logit_chunk_mib, config.run.device != DeviceChoice::cpu)));
  plan.vocabulary_loss = loss_rows * d * plan.bytes_per_activation + (lora ? 0.0 : 4.0 * static_cast<double>(vocab * d)) +
                         objective_logit_copies(config.objective.name) * 4.0 * chunk_rows * static_cast<double>(vocab);
  return plan;
}

}  // namespace

MemoryPlan plan_memory(const Config& config, int64_t vocab_size, int64_t ranks, bool bf16_activations) {
  return plan_for(config, vocab_size, ranks, bf16_activations,
                  config.train.batch_size / ranks / config.train.grad_accum, config.data.seq_len);
}

MemoryPlan plan_rollout_memory(const Config& config, int64_t vocab_size, int64_t ranks, bool bf16_activations,
                               const RolloutPolicyShape& policy) {
  const RlConfig& rl = config.rl;
  const int64_t length = policy.row_tokens;
  const int64_t rank_rows = rl.prompts_per_step / ranks * rl.group_size;
  MemoryPlan plan = plan_for(config, vocab_size, ranks, bf16_activations,
                             rank_rows / rl.mini_batches * policy.forward_rows_per_rollout, length);
  const bool lora = config.model.lora_rank > 0;
  if (rl.reference == ReferencePolicy::initial && !lora)
    plan.reference_weights = static_cast<double>(plan.bytes_per_weight) * static_cast<double>(plan.parameters);
  const ModelConfig& c = config.model;
  const double vocab = static_cast<double>(c.vocab_size > 0 ? c.vocab_size : vocab_size);
  const double rows = static_cast<double>(rank_rows);
  if (policy.causal) {
    // Keys and values of every row's slots (docs/sampling.md), and a few [rows, V] float rows of logits; a kept
    // cache (rl.keep_decoder; hidden-stream models' shared caches are never kept) holds the slots a CUDA row may run
    // past its end too, in whole steps of slots, and stays through the update.
    const bool kept = rl.keep_decoder && c.hidden_streams <= 1;
    const int64_t slots = kept ? kept_cache_slots(length + kCudaEndCheckInterval) : length;
    const double cache =
        kv_cache_bytes(c, rows, static_cast<double>(slots), static_cast<double>(plan.bytes_per_weight));
    plan.rollouts = cache + 3.0 * 4.0 * rows * vocab;
    if (kept) plan.kept_rollout_cache = cache;
    if (kept && policy.graphed) {
      // Each batch bucket's graph keeps the memory its step allocated: above all the head's [b, V] output and its
      // float32 logits (one tensor when the weights are float32). The buckets are the rows and every power of two
      // below them (sampler/ar_sampler.cpp).
      const double head_bytes = 4.0 + (plan.bytes_per_weight == 4 ? 0.0 : static_cast<double>(plan.bytes_per_weight));
      double bucket_rows = rows;
      for (int64_t below = 1; below < rank_rows; below *= 2) bucket_rows += static_cast<double>(below);
      plan.kept_rollout_graphs = bucket_rows * vocab * head_bytes;
      plan.rollouts += plan.kept_rollout_graphs;
    }
  } else {
    // The denoiser's float logits of the whole canvas, and the float64 posterior's working copy of one step.
    plan.rollouts = 4.0 * rows * static_cast<double>(length) * vocab;
  }
  return plan;
}

std::string describe(const MemoryPlan& plan) {
  const auto mib = [](double bytes) { return bytes / (1024.0 * 1024.0); };
  const auto millions = [](int64_t n) { return static_cast<double>(n) / 1e6; };
  std::string text = fmt::format(
      "dry run: {:.2f}M parameters ({:.2f}M in residual branches, largest branch {:.2f}M), {} rank(s), ZeRO stage "
      "{}, micro-batch {} rows, {}-byte weights, {}-byte activations\n",
      millions(plan.parameters), millions(plan.branch_parameters), millions(plan.largest_branch), plan.ranks,
      plan.zero_stage, plan.micro_batch_rows, plan.bytes_per_weight, plan.bytes_per_activation);
  if (plan.trained_parameters != plan.parameters)
    text += fmt::format("  LoRA: {:.3f}M adapter parameters train, the rest is frozen\n", millions(plan.trained_parameters));
  text += "per rank           MiB\n";
  text += fmt::format("  weights          {:.1f}\n", mib(plan.weights));
  text += fmt::format("  gradients        {:.1f}\n", mib(plan.gradients));
  text += fmt::format("  gradient buffers {:.1f}\n", mib(plan.gradient_buffers));
  text += fmt::format("  AdamW moments    {:.1f}\n", mib(plan.optimizer));
  if (plan.master_weights > 0) text += fmt::format("  master weights   {:.1f}\n", mib(plan.master_weights));
  if (plan.reference_weights > 0) text += fmt::format("  reference policy {:.1f}\n", mib(plan.reference_weights));
  text += fmt::format("  activations      {:.1f}\n", mib(plan.activations));
  text += fmt::format("  vocabulary loss  {:.1f}\n", mib(plan.vocabulary_loss));
  if (plan.rollouts > 0)
    text += fmt::format("  rollouts         {:.1f}  (held while generating, not during the update: the larger "
                        "of the two counts)\n",
                        mib(plan.rollouts));
  if (plan.kept_rollout_cache > 0)
    text += fmt::format("  kept KV cache    {:.1f}  (of the rollouts, rl.keep_decoder: held through the update "
                        "too)\n",
                        mib(plan.kept_rollout_cache));
  if (plan.kept_rollout_graphs > 0)
    text += fmt::format("  kept CUDA graphs {:.1f}  (the decode step's buffers, one graph per batch bucket)\n",
                        mib(plan.kept_rollout_graphs));
  text += fmt::format("  total            {:.1f}\n", mib(plan.total()));
  return text;
}

}  // namespace inkstone
