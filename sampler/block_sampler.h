// Semi-autoregressive diffusion sampling (docs/diffusion.md, "Generating in blocks"): the text after a prompt is
// generated one block of positions at a time, each block denoised by the diffusion sampler while conditioned on the
// prompt and the blocks committed before it, until every row has written an end of text or the budget is spent.
// A model trained as block diffusion (diffusion.block_size > 0) reads its context under the block-causal rule, and
// then the keys and values of the committed blocks can be kept in a KV cache: each denoising step runs the model on
// the block alone. Any other diffusion model reads prompt, committed blocks and the noisy block bidirectionally
// (MDLM's semi-autoregressive strides), and with a noisy suffix also the blocks still to come, as noise (LLaDA's
// semi-autoregressive canvas): it recomputes everything at every step, or with the approximate cache reuses the
// keys and values of the context (and of the suffix) computed at the block's first step (Fast-dLLM's prefix and
// dual caches).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/language_model.h"
#include "sampler/diffusion_sampler.h"

namespace inkstone {

struct BlockSampleOptions {
  int64_t block_size = 16;
  int64_t max_new_tokens = 128;  // rounded up to whole blocks
  bool use_cache = true;         // block-diffusion models: committed blocks' keys and values are kept
  // Models trained on whole windows: the context's keys and values are computed with the block's first step and
  // reused for its other steps (docs/diffusion.md, "Approximate prefix cache"); refreshed again every
  // `refresh_every` steps of a block (0: once per block; 1: every step, the exact recomputation).
  bool approximate_cache = false;
  int64_t refresh_every = 0;
  // Models trained on whole windows: the positions of the blocks after the one being denoised are present as the
  // prior's noise (all-mask, or keyed uniform draws), so the model reads a window as long as the whole text from
  // the first block on (docs/diffusion.md, "Noisy suffix and the dual cache"); with approximate_cache their keys
  // and values are kept beside the context's (the dual cache). false: the text grows block by block.
  bool noisy_suffix = false;
  // The sampler run on each block; steps are per block. adaptive runs as confidence (its end anchor belongs to a
  // whole-window canvas). Block b draws with seed counter_hash(seed, b).
  DiffusionSampleOptions per_block;
};

struct BlockSampleResult {
  torch::Tensor tokens;  // [B, P + blocks · block_size] int64 on the CPU: the prompt, then the generated blocks
  torch::Tensor fixed;   // [B, same] bool: true at the prompt
  int64_t blocks = 0;
  int64_t model_calls = 0;
  double seconds = 0;
};

// How a block reads its context, by name (`gen-ppl --caches`, the benchmark): exact (the block-diffusion cache, or
// recomputing the context), approximate (the prefix cache), noisy-suffix (exact, the blocks still to come read as
// noise), dual (the noisy suffix and the context cached once per block).
std::vector<std::string> block_context_names();
// Sets options.approximate_cache and options.noisy_suffix as `name` says; InputError for another name.
void set_block_context(const std::string& name, BlockSampleOptions& options);

// `rows` samples continuing `prompt`. InputError when the text would pass model.max_seq_len, for a cache with a
// model that was not trained block-causal, for the approximate cache where check_approximate_cache says it cannot
// work, and for a noisy suffix with a block-causal model.
BlockSampleResult sample_in_blocks(LanguageModel model, const DiffusionProcess& process,
                                   const std::vector<int32_t>& prompt, int64_t rows, const BlockSampleOptions& options,
                                   torch::Device device);

}  // namespace inkstone
