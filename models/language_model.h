// The language model: token embedding, pre-norm blocks, final RMSNorm and a tied or untied head
// (docs/backbones.md, "Base block"), optionally conditioned on a noise level through adaLN-Zero
// ("adaLN-Zero time conditioning"). The residual between the blocks is plain or routed (residual_routing.h), at one
// width or ×-shaped (width_profile.h). With hidden decoding (hidden_streams.h) each token enters as n interleaved
// copies and only the last copy is read out; tokens, positions, padding and logits stay per token at this interface,
// and a KV cache holds n slots per token.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "config/config.h"
#include "models/attention_mask.h"
#include "models/auxiliary.h"
#include "models/branch_execution.h"
#include "models/branch_node.h"
#include "models/hidden_streams.h"
#include "models/init.h"
#include "models/kv_cache.h"
#include "models/modulation.h"
#include "models/parameter_residency.h"
#include "models/residual_routing.h"
#include "models/rms_norm.h"
#include "models/time_embedding.h"

namespace inkstone {

class BlockImpl;

// A window scored or trained whole, without a cache (training, evaluation, RL log-probabilities, denoising): what
// the model reads besides its tokens [B, T].
struct WindowInputs {
  MaskMode mask = MaskMode::causal;
  torch::Tensor noise_level;  // [B] float: conditions a time-conditioned model; undefined: no conditioning
  torch::Tensor positions;    // [B, T] int64 RoPE positions; undefined: 0..T−1
  torch::Tensor key_padding;  // [B, T] bool, true = real token; undefined: all real
  torch::Tensor documents;    // [B, T] int64 packed-document index: attention and convolutions stay within a
                              // token's document; on the device or the host (where the bucket layout reads it
                              // without waiting for the device); undefined: one document per row
};

// A window scored whole under a query-key rule of the caller's in place of a mask mode (block diffusion's
// [x_0 | x_t] layout, docs/objectives.md): one stream, no documents, no time conditioning.
struct RuleInputs {
  torch::Tensor allowed;      // [T, T] bool, true = may attend; padding applies as usual
  torch::Tensor positions;    // [B, T] int64 RoPE positions; undefined: 0..T−1
  torch::Tensor key_padding;  // [B, T] bool, true = real token; undefined: all real
};

// Tokens [B, T] appended to a KV cache: a prompt, a committed block, or the next token of decoding with a growing
// cache. Batched prompts of different lengths: left-pad them, mark the pads in key_padding and give each row the
// positions 0..len−1 of its own tokens; every later call appends at the same slot for all rows. Or pack them into
// one row as documents, each at its own positions (a prefill into an empty cache; KVCache::adopt_segments hands
// each prompt's slots to a row of its own).
struct CacheInputs {
  MaskMode mask = MaskMode::causal;
  torch::Tensor positions;    // [B, T] int64 RoPE positions; undefined: cache length + 0..T−1
  torch::Tensor key_padding;  // [B, T] bool, true = real token of this call (the cache remembers earlier calls')
  torch::Tensor documents;    // [B, T] int64 packed-document index, on the device or the host; undefined: one
                              // document per row
};

// The rows of the head: the model's whole vocabulary, or the tokenizer's ids only — what samplers draw from and
// RL scores, so that the padding rows of a vocabulary larger than the tokenizer (model.vocab_size, HF checkpoints)
// are never drawn.
enum class HeadRows { vocabulary, tokens };

// embedding: the token table [V, d] (a tied head reuses it); non_embedding = total − embedding, so an untied
// head counts as non-embedding.
struct ParamCounts {
  int64_t total = 0;
  int64_t embedding = 0;  // with hidden decoding, all n tables
  int64_t non_embedding = 0;
  int64_t routing = 0;  // residual routing queries, key norms, null sources and gates (part of non_embedding)
};

// An AuxiliarySource for the auxiliary losses of branches run as autograd nodes, which it holds as outputs of
// those nodes (models/branch_node.h).
class LanguageModelImpl : public torch::nn::Module, public AuxiliarySource {
 public:
  // Builds and initialises with the scheme named by config.init. token_count: the tokenizer's ids (<= vocab_size;
  // 0: all of vocab_size).
  LanguageModelImpl(const ModelConfig& config, int64_t vocab_size, int64_t token_count = 0);

  // The entry points (tokens [B, T] int64); each returns the head's input [B, T, d] (final norm, then modulation
  // if conditioned), which logits() turns into logits, or a loss over the vocabulary in row chunks reads
  // (objectives/chunked_vocab.h).
  torch::Tensor hidden_states(const torch::Tensor& tokens, const WindowInputs& inputs = {});
  torch::Tensor hidden_states_under_rule(const torch::Tensor& tokens, const RuleInputs& inputs);
  // Appends the tokens' keys and values (and convolution tails) to `cache`, which advances by T.
  torch::Tensor extend_cache(const torch::Tensor& tokens, KVCache& cache, const CacheInputs& inputs = {});
  // Per-row decoding, the form a CUDA graph replays (sampler/decode_step.h): one token per row at RoPE
  // `positions` [B, 1], written at each row's cache slot (`slot`: [B] or [1] int64 on the model's device,
  // KVCache::append_at) over the cache's rows in use; one stream. The cache's host-side length is the caller's.
  torch::Tensor decode_at_slot(const torch::Tensor& tokens, const torch::Tensor& positions, KVCache& cache,
                               const torch::Tensor& slot);
  // Logits [.., rows] in float32 from the head's input.
  torch::Tensor logits(const torch::Tensor& hidden, HeadRows rows = HeadRows::vocabulary) const;
  // The logits of a window scored whole: logits(hidden_states(tokens, inputs)), the module's call.
  torch::Tensor forward(const torch::Tensor& tokens, const WindowInputs& inputs = {});
  // The head's weight [rows, d] (the token table when tied): logits = hidden · weightᵀ.
  torch::Tensor head_weight(HeadRows rows = HeadRows::vocabulary) const;

  // How the branches run from now on: recomputed in backward, with weights gathered around each use
  // (models/branch_execution.h); a trainer's choice, the model only asks it.
  void set_branch_execution(BranchExecution execution) { execution_ = std::move(execution); }
  AuxiliaryOutputs take_auxiliary() override { return std::exchange(node_auxiliary_, AuxiliaryOutputs{}); }
  // Every forward from now on calls tap(i, activations) with block i's feed-forward hidden activations [B, T, F];
  // an empty tap stops it. InputError naming the first block whose feed-forward has none (MoE).
  void tap_feed_forward_activations(const std::function<void(int64_t, const torch::Tensor&)>& tap);

  // The trained weights of each residual branch, unit 2i the mixer's of block i (its norm included) and 2i + 1
  // the feed-forward's; everything else (embeddings, head, final norm, routing, adaLN, fixed tensors such as the
  // MoE selection bias) is in no unit.
  std::vector<std::vector<torch::Tensor>> residency_units() const;
  // Every unit whole while the result lives (generation, checkpoint writing); nothing where the branch execution
  // has no residency.
  ResidentUnits whole_parameters() const { return execution_.whole(2 * config_.n_layers); }

  // A cache for `batch_size` rows of up to `capacity` tokens (prompt plus generated).
  KVCache make_kv_cache(int64_t batch_size, int64_t capacity,
                        std::optional<torch::ScalarType> storage = std::nullopt) const;
  ParamCounts param_counts() const;
  // Forward multiply-adds ×2 per token with `context` tokens visible: every weight matrix (the head included, the
  // embedding lookup not), attention scores and values, and the routing sites, n times over with hidden decoding
  // (the head once); training costs about 3×.
  double forward_flops_per_token(int64_t context) const;
  // Residual width of each block (d_model everywhere unless the width profile varies).
  const std::vector<int64_t>& layer_widths() const { return widths_; }
  // Every parameter with the role the init scheme sees.
  std::vector<std::pair<std::string, ParamRole>> param_roles() const;

  const ModelConfig& config() const { return config_; }
  // The RoPE frequencies every forward reads (moved to the device of the last forward): a captured decode graph
  // reads them at this address.
  const torch::Tensor& rope_omega() const { return rope_omega_; }
  int64_t vocab_size() const { return vocab_size_; }
  int64_t token_count() const { return token_count_; }

  torch::nn::Embedding embed{nullptr};          // the token table; with hidden decoding, the last stream's
  torch::nn::ModuleList stream_embeds{nullptr};  // hidden decoding: the tables of streams 1..n−1
  TimeEmbedding time_embed{nullptr};  // only with time conditioning
  torch::nn::ModuleList blocks{nullptr};
  ResidualRouter routing{nullptr};    // only with a routed residual
  RMSNorm final_norm{nullptr};
  AdaLN final_adaln{nullptr};         // only with time conditioning
  torch::nn::Linear head{nullptr};    // only untied

 private:
  // Every entry point's inputs in one form, for the one forward path (run).
  struct Pass {
    MaskMode mask = MaskMode::causal;
    torch::Tensor noise_level, positions, key_padding, documents, allowed;
    KVCache* cache = nullptr;
    torch::Tensor write_slot;  // fixed-window decoding
  };
  torch::Tensor run(const torch::Tensor& tokens, const Pass& pass);
  ParamRole role_outside_blocks(const std::string& name) const;  // embeddings, head, final norm, routing, adaLN
  void scale_init_to_layer_widths();
  torch::Tensor embed_streams(const torch::Tensor& tokens);

  ModelConfig config_;
  int64_t vocab_size_;
  int64_t token_count_;
  std::vector<int64_t> widths_;
  StreamLayout streams_;
  ResidualStreamStarter start_stream_;  // plain, routed or width-varying: decided once, at construction
  torch::Tensor rope_omega_;  // RoPE frequencies of the model width, float64, on the device of the last forward
  BranchExecution execution_;
  AuxiliaryOutputs node_auxiliary_;
};
TORCH_MODULE(LanguageModel);

// The model ModelConfig describes. vocab_size is the tokenizer's; config.vocab_size > 0 overrides it (it may
// only be larger, e.g. padded to a multiple of 64). Throws InputError for an inconsistent config.
LanguageModel build_language_model(const ModelConfig& config, int64_t tokenizer_vocab_size);

}  // namespace inkstone
