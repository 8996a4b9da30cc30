#include "sampler/block_sampler.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "core/counter_hash.h"
#include "core/errors.h"
#include "models/attention_mask.h"
#include "models/block_registry.h"
#include "models/kv_cache.h"
#include "objectives/diffusion_objective.h"
#include "sampler/kernels/diffusion_step.h"

namespace inkstone {
namespace {

// RoPE positions [rows, count] of `count` positions from `first` on.
torch::Tensor positions_from(int64_t first, int64_t count, int64_t rows, torch::Device device) {
  return torch::arange(first, first + count, torch::TensorOptions().dtype(torch::kLong).device(device))
      .expand({rows, count});
}

// Logits [B, S] of a noisy block z at positions [start, start + S) after the context `committed` [B, start] (and
// before `suffix` [B, n], the noise of the blocks still to come, when it has columns): with the cache (which holds
// the context; the block's keys are forgotten afterwards), under the block-causal rule with the prompt as block −1,
// or bidirectionally.
Denoiser block_denoiser(LanguageModel model, const DiffusionProcess& process, const torch::Tensor& committed,
                        const torch::Tensor& suffix, int64_t prompt_length, int64_t block, KVCache* cache) {
  return [=](const torch::Tensor& z, const torch::Tensor&) mutable {
    if (cache) {
      const int64_t kept = cache->length();
      auto logits = model->logits(model->extend_cache(z, *cache, {MaskMode::bidirectional, {}, {}}));
      cache->rewind(kept);
      return logits;
    }
    const int64_t start = committed.size(1), length = start + z.size(1);
    torch::Tensor hidden;
    if (process.block_size > 0) {
      const auto options = torch::TensorOptions().dtype(torch::kLong);
      auto ids = torch::cat({torch::full({prompt_length}, -1, options),
                             torch::floor_divide(torch::arange(start - prompt_length, options), block),
                             torch::full({z.size(1)}, (start - prompt_length) / block, options)});
      const auto noisy = torch::arange(length, options).ge(start);
      RuleInputs ruled;
      ruled.allowed = block_diffusion_rule(ids, noisy, ids, noisy);
      hidden = model->hidden_states_under_rule(torch::cat({committed, z}, 1), ruled);
    } else {
      WindowInputs window;
      window.mask = MaskMode::bidirectional;
      hidden = model->hidden_states(torch::cat({committed, z, suffix}, 1), window);
      if (process.shifted_outputs) hidden = outputs_shifted_right(hidden);
    }
    return model->logits(hidden.narrow(1, start, z.size(1)));
  };
}

// The approximate caches (docs/diffusion.md, "Approximate prefix cache"; Fast-dLLM, Wu et al. 2025): a
// bidirectional model's context (and noisy suffix) reads the noisy block too, so their keys and values change as
// the block is denoised. They are computed with the block at the block's first model call (and every
// `refresh_every` calls), and every call then runs the block alone against them; refreshed at every call, this is
// the exact recomputation.
//
// The refreshing pass runs [context | suffix | block] with each token at its own RoPE position, so that the cache
// ends with the slots to keep and the block's slots can be wound back off its end. Attention reads keys as a set
// and every other layer acts per token, so the order changes nothing but the summation order of float rounding,
// which can still tip a near tie of a draw (models whose layers mix neighbouring tokens, convolutions, are refused
// by check_approximate_cache).
Denoiser context_cached_denoiser(LanguageModel model, const torch::Tensor& committed, const torch::Tensor& suffix,
                                 KVCache& cache, int64_t refresh_every) {
  int64_t step = 0;
  return [=, &cache](const torch::Tensor& z, const torch::Tensor&) mutable {
    const int64_t start = committed.size(1), size = z.size(1), after = suffix.size(1);
    const int64_t rows = z.size(0);
    const auto device = z.device();
    const auto block_positions = positions_from(start, size, rows, device);
    const bool refresh = step == 0 || (refresh_every > 0 && step % refresh_every == 0);
    ++step;
    if (refresh) {
      cache.rewind(0);
      const auto positions = torch::cat(
          {positions_from(0, start, rows, device), positions_from(start + size, after, rows, device), block_positions},
          1);
      const auto hidden = model->extend_cache(torch::cat({committed, suffix, z}, 1), cache,
                                              {MaskMode::bidirectional, positions, {}});
      cache.rewind((start + after) * model->config().hidden_streams);
      // The block's rows of this pass are what running the block alone against these keys and values gives.
      return model->logits(hidden.narrow(1, start + after, size));
    }
    const int64_t kept = cache.length();
    auto logits = model->logits(model->extend_cache(z, cache, {MaskMode::bidirectional, block_positions, {}}));
    cache.rewind(kept);
    return logits;
  };
}

// The prior's tokens [rows, length] on `device` at every generated position (each block reads the part after
// it): all-mask, or draws keyed by (seed, row's sequence number, position) as the fused step's prior, so that a
// row's suffix does not depend on its batch.
torch::Tensor noisy_suffix_tokens(const DiffusionProcess& process, int64_t rows, int64_t length,
                                  const DiffusionSampleOptions& per_block, torch::Device device) {
  const double mask_share = prior_mask_share(*process.noise);
  if (mask_share >= 1.0)
    return torch::full({rows, length}, process.mask_id, torch::TensorOptions().dtype(torch::kLong).device(device));
  const auto sequences = torch::arange(per_block.first_sequence, per_block.first_sequence + rows, torch::kLong);
  return keyed_prior_tokens(process.support->member_mask(device), sequences, length,
                            static_cast<uint64_t>(per_block.seed), mask_share, process.mask_id)
      .to(device);
}

void check_noisy_suffix(const DiffusionProcess& process, const BlockSampleOptions& options) {
  if (options.noisy_suffix && process.block_size > 0)
    throw InputError(fmt::format("sample.noisy_suffix (--noisy-suffix) is for models trained on whole windows; this "
                                 "one has diffusion.block_size = {} (block-causal) and never reads past its block",
                                 process.block_size));
}

void check_approximate_cache(const LanguageModel& model, const DiffusionProcess& process,
                             const BlockSampleOptions& options) {
  if (!options.approximate_cache) return;
  if (options.use_cache)
    throw InputError("the approximate prefix cache is for models trained on whole windows; a block-diffusion model "
                     "keeps its exact cache");
  if (process.shifted_outputs)
    throw InputError("the approximate prefix cache runs the block alone, and diffusion.shifted_outputs reads a "
                     "block's first token from the position before it; sample without it");
  if (!mixes_tokens_only_by_attention(model->config()))
    throw InputError("the approximate prefix cache winds its KV cache back after every step, which a convolution's "
                     "state cannot be (model.mixer_pattern, model.qkv_conv); sample without it");
  if (options.refresh_every < 0)
    throw InputError(fmt::format("refresh_every = {} must be >= 0", options.refresh_every));
}

}  // namespace

std::vector<std::string> block_context_names() { return {"exact", "approximate", "noisy-suffix", "dual"}; }

void set_block_context(const std::string& name, BlockSampleOptions& options) {
  const auto names = block_context_names();
  if (std::find(names.begin(), names.end(), name) == names.end())
    throw InputError(fmt::format("'{}' is not a block context ({})", name, fmt::join(names, ", ")));
  options.approximate_cache = name == "approximate" || name == "dual";
  options.noisy_suffix = name == "noisy-suffix" || name == "dual";
}

BlockSampleResult sample_in_blocks(LanguageModel model, const DiffusionProcess& process,
                                   const std::vector<int32_t>& prompt, int64_t rows, const BlockSampleOptions& options,
                                   torch::Device device) {
  const int64_t block = options.block_size;
  if (block < 1) throw InputError(fmt::format("block size = {} must be >= 1", block));
  if (options.max_new_tokens < 1)
    throw InputError(fmt::format("max_new_tokens = {} must be >= 1", options.max_new_tokens));
  if (options.use_cache && process.block_size <= 0)
    throw InputError(
        "a KV cache of committed blocks needs a model trained with diffusion.block_size > 0 "
        "(block-causal); sample without the cache");
  if (process.time_conditioned) throw InputError("generating in blocks needs a model without time conditioning");
  check_approximate_cache(model, process, options);
  check_noisy_suffix(process, options);
  const int64_t blocks = (options.max_new_tokens + block - 1) / block;
  const int64_t prompt_length = static_cast<int64_t>(prompt.size());
  const int64_t total = prompt_length + blocks * block;
  if (total > model->config().max_seq_len)
    throw InputError(
        fmt::format("{} prompt tokens and {} blocks of {} make {} positions, more than "
                    "model.max_seq_len = {}",
                    prompt_length, blocks, block, total, model->config().max_seq_len));
  const auto start_time = std::chrono::steady_clock::now();
  c10::InferenceMode inference;
  const std::vector<int64_t> prompt_ids(prompt.begin(), prompt.end());
  auto committed = torch::tensor(prompt_ids, torch::kLong).view({1, prompt_length}).expand({rows, prompt_length});
  committed = committed.contiguous().to(device);

  BlockSampleResult result;
  std::optional<KVCache> cache;
  if (options.use_cache || options.approximate_cache) cache.emplace(model->make_kv_cache(rows, total));
  if (options.use_cache) {
    if (prompt_length > 0) {
      model->extend_cache(committed, *cache, {MaskMode::bidirectional, {}, {}});  // the prompt is one clean block
      ++result.model_calls;
    }
  }
  // The noise of every generated position; block b reads the part after it.
  const auto suffix = options.noisy_suffix
                          ? noisy_suffix_tokens(process, rows, blocks * block, options.per_block, device)
                          : torch::empty({rows, 0}, torch::TensorOptions().dtype(torch::kLong).device(device));
  auto ended = torch::zeros({rows}, torch::TensorOptions().dtype(torch::kBool).device(device));
  for (int64_t b = 0; b < blocks; ++b) {
    DiffusionSampleOptions per_block = options.per_block;
    if (per_block.method == DiffusionMethod::adaptive) per_block.method = DiffusionMethod::confidence;
    per_block.seed = static_cast<int64_t>(
        counter_hash({static_cast<uint64_t>(options.per_block.seed), static_cast<uint64_t>(b)}) >> 1);
    const DiffusionCanvas canvas{torch::zeros({rows, block}, torch::kLong), torch::zeros({rows, block}, torch::kBool)};
    const auto after = suffix.slice(1, (b + 1) * block);  // empty past the last block, or without a suffix
    const auto denoiser =
        options.approximate_cache
            ? context_cached_denoiser(model, committed, after, *cache, options.refresh_every)
            : block_denoiser(model, process, committed, after, prompt_length, block, cache ? &*cache : nullptr);
    const auto done = sample_diffusion(denoiser, process, canvas, per_block, device);
    result.model_calls += done.model_calls;
    const auto tokens = done.tokens.to(device);
    committed = torch::cat({committed, tokens}, 1);
    ++result.blocks;
    if (options.use_cache) {
      model->extend_cache(tokens, *cache, {MaskMode::bidirectional, {}, {}});  // the committed block joins the cache
      ++result.model_calls;
    }
    if (process.end_id >= 0) ended = ended | tokens.eq(process.end_id).any(1);
    if (ended.all().item<bool>()) break;
  }
  result.tokens = committed.cpu();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  result.fixed = torch::zeros_like(result.tokens, torch::kBool);
  result.fixed.narrow(1, 0, prompt_length).fill_(true);
  return result;
}

}  // namespace inkstone
