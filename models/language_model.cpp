#include "models/language_model.h"

#include <map>
#include <numeric>

#include <fmt/format.h>
#include <torch/torch.h>

#include "core/errors.h"
#include "core/host_copy.h"
#include "core/torch_compat.h"
#include "models/block.h"
#include "models/block_registry.h"
#include "models/layer_pattern.h"
#include "models/lora.h"
#include "models/model_dims.h"
#include "models/rope.h"
#include "models/width_profile.h"

namespace inkstone {
namespace {

// Layers of another width have another head dim, hence their own RoPE table.
std::vector<AttentionContext> contexts_per_layer(const AttentionContext& shared, const ModelConfig& config,
                                                 const std::vector<int64_t>& widths, const torch::Tensor& positions) {
  std::vector<AttentionContext> contexts(widths.size(), shared);
  for (size_t i = 0; i < widths.size(); ++i)
    if (widths[i] != config.d_model)
      contexts[i].rope =
          rope_table(positions, widths[i] / config.n_heads, config.rope_theta, resolved_rope_scaling(config));
  return contexts;
}

// The stream-local layers of a hidden-decoding model attend within their own stream (hidden_streams.h).
void use_stream_local_masks(std::vector<AttentionContext>& contexts, const ModelConfig& config,
                            const StreamLayout& streams, int64_t query_start, int64_t num_queries,
                            const torch::Tensor& key_real, const torch::Device& device) {
  if (streams.streams() == 1) return;
  c10::optional<AttentionMask> local;
  for (int64_t i = 0; i < config.n_layers; ++i) {
    if (stream_scope(config, i) != StreamScope::local) continue;
    if (!local) {
      local = streams.local_mask(contexts[i].mode, query_start, num_queries, query_start + num_queries, key_real,
                                 device);
    }
    contexts[i].mask = *local;
  }
}

// `config` once its layer patterns name registered parts (InputError naming the key otherwise), with a warning
// where its hidden streams never meet.
const ModelConfig& with_registered_parts(const ModelConfig& config) {
  check_block_patterns(config);
  check_lora_settings(config);
  warn_if_streams_never_cross(config);
  return config;
}

}  // namespace

LanguageModelImpl::LanguageModelImpl(const ModelConfig& config, int64_t vocab_size, int64_t token_count)
    : config_(with_registered_parts(config)),
      vocab_size_(vocab_size),
      token_count_(token_count > 0 ? token_count : vocab_size),
      widths_(inkstone::layer_widths(config)), streams_(config) {
  embed = register_module("embed", torch::nn::Embedding(vocab_size, config.d_model));
  if (config.hidden_streams > 1) {
    stream_embeds = register_module("stream_embeds", torch::nn::ModuleList());
    for (int64_t s = 1; s < config.hidden_streams; ++s)
      stream_embeds->push_back(torch::nn::Embedding(vocab_size, config.d_model));
  }
  if (config.time_conditioning) time_embed = register_module("time_embed", TimeEmbedding(config.cond_dim));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.n_layers; ++i) blocks->push_back(Block(layer_config(config, widths_[i]), i));
  if (config.residual != ResidualMode::plain) routing = register_module("routing", ResidualRouter(config));
  if (config.width_profile == WidthProfile::uniform) {
    start_stream_ = residual_stream_starter(config, routing.is_empty() ? nullptr : routing.get());
  } else {
    start_stream_ = [widths = widths_, carry = config.width_expand == WidthExpand::carry_forward](const torch::Tensor& embedding)
        -> std::unique_ptr<ResidualStream> { return std::make_unique<WidthVaryingStream>(widths, carry, embedding); };
  }
  final_norm = register_module("final_norm", RMSNorm(widths_.back(), config.norm_eps));
  rope_omega_ = rope_frequencies(resolved_head_dim(config), config.rope_theta, resolved_rope_scaling(config));
  if (config.time_conditioning) {
    final_adaln = register_module("final_adaln", AdaLN(config.cond_dim, config.d_model, 1, /*with_gate=*/false));
  }
  if (!config.tie_embeddings) {
    head = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(config.d_model, vocab_size).bias(false)));
  }

  torch::NoGradGuard no_grad;
  const auto scheme = make_init_scheme(config);
  auto parameters = named_parameters();
  const auto roles = param_roles();  // in the same order
  for (size_t k = 0; k < parameters.size(); ++k) scheme(roles[k].first, parameters[k].value(), roles[k].second);
  if (!init_scheme_follows_width(config)) scale_init_to_layer_widths();
  attach_lora_adapters(*this, *blocks, config);
}

// A fixed σ keeps Var ∝ 1/fan_in only at d_model: layer i's matrices get σ·√(d_model / w_i) (docs/backbones.md,
// "x-shaped width").
// γ-init needs no correction, its σ = fan_in^(−γ) already follows the width.
void LanguageModelImpl::scale_init_to_layer_widths() {
  for (int64_t i = 0; i < config_.n_layers; ++i) {
    if (widths_[i] == config_.d_model) continue;
    const double factor = std::sqrt(static_cast<double>(config_.d_model) / static_cast<double>(widths_[i]));
    const auto& block = blocks->at<BlockImpl>(i);
    for (auto& item : blocks[i]->named_parameters()) {
      const ParamRole role = block.role_of(item.key());
      if (role == ParamRole::qk || role == ParamRole::vo || role == ParamRole::mlp) item.value().mul_(factor);
    }
  }
}

// The parameters outside the blocks; param_roles asks each block for its own.
ParamRole LanguageModelImpl::role_outside_blocks(const std::string& name) const {
  const auto starts = [&](const char* prefix) { return name.rfind(prefix, 0) == 0; };
  const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
  if (is_bias || starts("final_adaln.")) return ParamRole::zero;
  // Routing queries, null sources and gates start at 0 (uniform depth mean; delta: the plain residual).
  if (starts("routing.")) return name.find("key_norm") != std::string::npos ? ParamRole::norm : ParamRole::zero;
  if (starts("final_norm.")) return ParamRole::norm;
  if (starts("time_embed.")) return ParamRole::conditioning;
  if (name == "embed.weight" || starts("stream_embeds.")) return ParamRole::embedding;
  // adaLN-Zero's final layer starts at logits = 0 (DiT), which only an untied head can do.
  if (name == "head.weight") return config_.time_conditioning ? ParamRole::zero : ParamRole::head;
  throw std::logic_error("parameter without an init role: " + name);
}

// A block's parameters get their roles from the block, which asks its parts (models/block_parts.h).
std::vector<std::pair<std::string, ParamRole>> LanguageModelImpl::param_roles() const {
  std::map<std::string, ParamRole> in_blocks;  // by full name: each block names its own parameters' roles
  for (size_t i = 0; i < blocks->size(); ++i) {
    const auto& block = blocks->at<BlockImpl>(i);
    const std::string prefix = "blocks." + std::to_string(i) + ".";
    for (const auto& item : block.named_parameters()) in_blocks.emplace(prefix + item.key(), block.role_of(item.key()));
  }
  std::vector<std::pair<std::string, ParamRole>> roles;
  for (const auto& item : named_parameters()) {
    const auto found = in_blocks.find(item.key());
    roles.emplace_back(item.key(), found != in_blocks.end() ? found->second : role_outside_blocks(item.key()));
  }
  return roles;
}

void LanguageModelImpl::tap_feed_forward_activations(const std::function<void(int64_t, const torch::Tensor&)>& tap) {
  for (int64_t i = 0; i < config_.n_layers; ++i) {
    auto& ffn = *blocks->ptr<BlockImpl>(i)->ffn;
    if (tap && !ffn.has_hidden_activations())
      throw InputError(
          fmt::format("block {}'s feed-forward ({}) reports no hidden activations: only dense SwiGLU "
                      "feed-forwards do",
                      i, ffn.name()));
  }
  for (int64_t i = 0; i < config_.n_layers; ++i) {
    ActivationTap layer_tap;
    if (tap) layer_tap = [tap, i](const torch::Tensor& activations) { tap(i, activations); };
    blocks->ptr<BlockImpl>(i)->ffn->set_activation_tap(std::move(layer_tap));
  }
}

torch::Tensor LanguageModelImpl::hidden_states(const torch::Tensor& tokens, const WindowInputs& inputs) {
  return run(tokens, {inputs.mask, inputs.noise_level, inputs.positions, inputs.key_padding, inputs.documents});
}

torch::Tensor LanguageModelImpl::hidden_states_under_rule(const torch::Tensor& tokens, const RuleInputs& inputs) {
  TORCH_CHECK(inputs.allowed.defined(), "an attention rule is required");
  // Bidirectional is what convolutions would read; the rule's models have none.
  return run(tokens, {MaskMode::bidirectional, {}, inputs.positions, inputs.key_padding, {}, inputs.allowed});
}

torch::Tensor LanguageModelImpl::extend_cache(const torch::Tensor& tokens, KVCache& cache, const CacheInputs& inputs) {
  return run(tokens, {inputs.mask, {}, inputs.positions, inputs.key_padding, inputs.documents, {}, &cache});
}

torch::Tensor LanguageModelImpl::decode_at_slot(const torch::Tensor& tokens, const torch::Tensor& positions,
                                                KVCache& cache, const torch::Tensor& slot) {
  return run(tokens, {MaskMode::causal, {}, positions, {}, {}, {}, &cache, slot});
}

torch::Tensor LanguageModelImpl::logits(const torch::Tensor& hidden, HeadRows rows) const {
  return torch::nn::functional::linear(hidden, head_weight(rows)).to(torch::kFloat);
}

torch::Tensor LanguageModelImpl::forward(const torch::Tensor& tokens, const WindowInputs& inputs) {
  return logits(hidden_states(tokens, inputs));
}

torch::Tensor LanguageModelImpl::head_weight(HeadRows rows) const {
  const auto& weight = head.is_empty() ? embed->weight : head->weight;
  return rows == HeadRows::tokens && token_count_ < vocab_size_ ? weight.narrow(0, 0, token_count_) : weight;
}

// Slots are tokens, or with hidden decoding n per token: the cache, the masks and the blocks count slots, while
// positions, padding and logits come and go per token.
torch::Tensor LanguageModelImpl::run(const torch::Tensor& tokens, const Pass& pass) {
  const int64_t batch = tokens.size(0);
  const int64_t length = tokens.size(1);
  const int64_t slots = streams_.streams() * length;
  const bool fixed_window = pass.write_slot.defined();
  if (fixed_window) {
    TORCH_CHECK(length == 1 && streams_.streams() == 1, "fixed-window decoding takes one token per row and one stream");
  }
  const int64_t start = pass.cache ? pass.cache->length() : 0;
  const int64_t first_token = start / streams_.streams();
  const auto token_positions =
      pass.positions.defined()
          ? pass.positions
          : torch::arange(first_token, first_token + length, tokens.options().dtype(torch::kLong))
                .expand({batch, length});
  const auto positions = streams_.slot_positions(token_positions);
  const auto padding = streams_.slot_flags(pass.key_padding);
  if (rope_omega_.device() != tokens.device()) rope_omega_ = rope_omega_.to(tokens.device());
  AttentionContext context{rope_table(positions, rope_omega_), {}, pass.cache, {}, pass.mask, padding};
  torch::Tensor key_real;
  if (fixed_window) {
    context.mask = {pass.cache->window_key_real(pass.write_slot).reshape({batch, 1, 1, -1}), false};
    context.write_slot = pass.write_slot;
  } else {
    key_real = pass.cache ? pass.cache->record_key_real(padding, slots) : padding;
    if (pass.allowed.defined()) {
      TORCH_CHECK(streams_.streams() == 1, "a caller's attention rule takes one stream");
      TORCH_CHECK(pass.allowed.size(0) == slots && pass.allowed.size(1) == slots, "the attention rule must be [T, T]");
      context.mask = mask_with_padding(pass.allowed.to(tokens.device()), start, key_real);
    } else {
      context.mask = make_attention_mask(pass.mask, start, slots, start + slots, key_real, tokens.device());
    }
  }
  auto layer_contexts = contexts_per_layer(context, config_, widths_, positions);
  if (!fixed_window) use_stream_local_masks(layer_contexts, config_, streams_, start, slots, key_real, tokens.device());
  if (pass.documents.defined()) {
    TORCH_CHECK(start == 0, "packed documents go into an empty KV cache, not after ", start, " slots");
    // Documents given on the host (a packed prefill builds them there) spare the bucket layout a read from the
    // device; the layers read them on the device.
    const auto given = streams_.slot_flags(pass.documents);
    const auto documents = given.device() == tokens.device() ? given : to_device_async(given, tokens.device());
    // Where libtorch's kernels keep O(T) per query, or no backward will read the weights (a prompt prefill),
    // documents go through buckets rather than a [B, 1, T, T] mask; a mask of another kind (padding, hidden
    // streams' local rules) keeps the dense rule.
    std::shared_ptr<const DocumentBuckets> buckets;
    const bool attention_keeps_no_weights = compat::kAttentionKeepsNoWeights || !torch::GradMode::is_enabled();
    if (attention_keeps_no_weights && streams_.streams() == 1 && !key_real.defined())
      buckets = std::make_shared<const DocumentBuckets>(document_buckets(given, tokens.device()));
    for (auto& c : layer_contexts) {
      if (buckets)
        c.document_buckets = buckets;
      else
        c.mask = within_documents(c.mask, pass.mask, documents);
      c.documents = documents;
    }
  }

  torch::Tensor cond;
  if (pass.noise_level.defined()) {
    TORCH_CHECK(!time_embed.is_empty(), "a noise level needs model.time_conditioning = true");
    cond = time_embed(pass.noise_level);
  }

  const auto embedding = embed_streams(tokens);
  const std::unique_ptr<ResidualStream> stream = start_stream_(embedding);
  const bool recomputable = is_training() && torch::GradMode::is_enabled() && !pass.cache;
  for (int64_t i = 0; i < config_.n_layers; ++i) {
    const auto block = blocks->ptr<BlockImpl>(i);
    const auto m = block->modulations(cond);
    if (execution_.calls_directly(i, recomputable)) {  // each norm fused with the residual add before it
      const auto u = stream->normed_input(mixer_site(i), *block->attn_norm);
      stream->add(mixer_site(i), block->mixer_body(u, layer_contexts[i], m[0]));
      stream->add(ffn_site(i), block->ffn_body(stream->normed_input(ffn_site(i), *block->mlp_norm), m[1]));
      continue;
    }
    ResidualBranch mixer = [block, context = layer_contexts[i]](const torch::Tensor& x, const Modulation& mod) {
      return block->mixer_branch(x, context, mod);
    };
    ResidualBranch ffn = [block](const torch::Tensor& h, const Modulation& mod) { return block->ffn_branch(h, mod); };
    stream->add(mixer_site(i), execution_.run(std::move(mixer), stream->input(mixer_site(i)), m[0], block,
                                              node_auxiliary_, i, 2 * i, recomputable));
    stream->add(ffn_site(i), execution_.run(std::move(ffn), stream->input(ffn_site(i)), m[1], block, node_auxiliary_,
                                            i, 2 * i + 1, recomputable));
  }
  // The norm is per slot, so normalising every slot and keeping the last streams' equals normalising those alone.
  auto x = streams_.last_stream(stream->normed_input(final_site(config_.n_layers), *final_norm));
  x = stream->to_model_width(x, config_.d_model);
  if (cond.defined()) x = modulate(x, final_adaln(cond)[0]);
  if (pass.cache && !fixed_window) pass.cache->advance(slots);
  return x;
}

std::vector<std::vector<torch::Tensor>> LanguageModelImpl::residency_units() const {
  std::vector<std::vector<torch::Tensor>> units;
  const auto add_trained = [&](const torch::nn::Module& part) {
    for (const auto& p : part.parameters())
      if (p.requires_grad()) units.back().push_back(p);
  };
  for (int64_t i = 0; i < config_.n_layers; ++i) {
    const auto& block = blocks->at<BlockImpl>(i);
    units.emplace_back();
    add_trained(*block.attn_norm);
    add_trained(*block.mixer);
    units.emplace_back();
    add_trained(*block.mlp_norm);
    add_trained(*block.ffn);
  }
  return units;
}

// Copies of the tokens from every stream's table, stream 1 first, interleaved into slots.
torch::Tensor LanguageModelImpl::embed_streams(const torch::Tensor& tokens) {
  std::vector<torch::Tensor> copies;
  if (!stream_embeds.is_empty())
    for (const auto& table : *stream_embeds) copies.push_back(table->as<torch::nn::EmbeddingImpl>()->forward(tokens));
  copies.push_back(embed(tokens));
  return streams_.interleave(copies);
}

KVCache LanguageModelImpl::make_kv_cache(int64_t batch_size, int64_t capacity,
                                         std::optional<torch::ScalarType> storage) const {
  return KVCache(config_.n_layers, batch_size, streams_.streams() * capacity, storage);
}

ParamCounts LanguageModelImpl::param_counts() const {
  ParamCounts counts;
  for (const auto& p : parameters()) counts.total += p.numel();
  counts.embedding = embed->weight.numel();
  if (!stream_embeds.is_empty())
    for (const auto& p : stream_embeds->parameters()) counts.embedding += p.numel();
  counts.non_embedding = counts.total - counts.embedding;
  if (!routing.is_empty())
    for (const auto& p : routing->parameters()) counts.routing += p.numel();
  return counts;
}

double LanguageModelImpl::forward_flops_per_token(int64_t context) const {
  const double n = static_cast<double>(streams_.streams());
  double per_slot = 0;
  double head_flops = head.is_empty() ? 2.0 * embed->weight.numel() : 0;  // a tied head reads the embedding
  for (const auto& item : named_parameters()) {
    const auto& name = item.key();
    if (item.value().dim() != 2 || name == "embed.weight" || name.rfind("stream_embeds.", 0) == 0) continue;
    (name == "head.weight" ? head_flops : per_slot) += 2.0 * item.value().numel();
  }
  // q·k and weights·v over the visible slots: n per token across streams, one per token within a stream. (A short
  // conv's taps are weight matrices above.)
  for (int64_t i = 0; i < config_.n_layers; ++i) {
    const double visible = stream_scope(config_, i) == StreamScope::mixing ? n * context : context;
    per_slot += blocks->at<BlockImpl>(i).mixer->context_flops_per_token(visible);
  }
  // Site i of a routed model normalises, scores and sums up to i + 1 sources of width d (about 6 flops each).
  if (!routing.is_empty()) {
    const double sites = static_cast<double>(final_site(config_.n_layers)) + 1;
    per_slot += 6.0 * config_.d_model * sites * (sites + 1) / 2;
  }
  return n * per_slot + head_flops;
}

LanguageModel build_language_model(const ModelConfig& config, int64_t tokenizer_vocab_size) {
  const int64_t vocab_size = config.vocab_size > 0 ? config.vocab_size : tokenizer_vocab_size;
  if (vocab_size < tokenizer_vocab_size) {
    throw InputError(fmt::format("model.vocab_size = {} is smaller than the tokenizer's {}", vocab_size,
                                 tokenizer_vocab_size));
  }
  if (resolved_head_dim(config) % 2 != 0) {
    throw InputError(fmt::format("head dim {} must be even for RoPE", resolved_head_dim(config)));
  }
  if (config.time_conditioning && config.tie_embeddings) {
    throw InputError("model.time_conditioning needs model.tie_embeddings = false: adaLN-Zero starts the output "
                     "head at zero, which a tied embedding cannot be");
  }
  return LanguageModel(config, vocab_size, tokenizer_vocab_size);
}

}  // namespace inkstone
