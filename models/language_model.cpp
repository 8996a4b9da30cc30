#include "models/language_model.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include "core/errors.h"
#include "models/block.h"
#include "models/model_dims.h"
#include "models/rope.h"

namespace inkstone {

LanguageModelImpl::LanguageModelImpl(const ModelConfig& config, int64_t vocab_size)
    : config_(config), vocab_size_(vocab_size) {
  embed = register_module("embed", torch::nn::Embedding(vocab_size, config.d_model));
  if (config.time_conditioning) time_embed = register_module("time_embed", TimeEmbedding(config.cond_dim));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.n_layers; ++i) blocks->push_back(Block(config, i));
  final_norm = register_module("final_norm", RMSNorm(config.d_model, config.norm_eps));
  if (config.time_conditioning) {
    final_adaln = register_module("final_adaln", AdaLN(config.cond_dim, config.d_model, 1, /*with_gate=*/false));
  }
  if (!config.tie_embeddings) {
    head = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(config.d_model, vocab_size).bias(false)));
  }

  torch::NoGradGuard no_grad;
  const auto scheme = make_init_scheme(config);
  for (auto& item : named_parameters()) scheme(item.key(), item.value(), role_of(item.key()));
}

// Roles follow the module names, so a new parameter must be given its role here before the model builds.
ParamRole LanguageModelImpl::role_of(const std::string& name) const {
  const auto has = [&](const char* part) { return name.find(part) != std::string::npos; };
  const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
  if (is_bias || has("adaln")) return ParamRole::zero;
  if (has("norm")) return ParamRole::norm;
  if (has("time_embed.")) return ParamRole::conditioning;
  if (has("q_proj") || has("k_proj")) return ParamRole::qk;
  if (has("v_proj") || has("o_proj")) return ParamRole::vo;
  if (has("gate_proj") || has("up_proj") || has("down_proj")) return ParamRole::mlp;
  if (has("qkv_conv.")) return config_.qkv_conv_zero_init ? ParamRole::zero : ParamRole::conv;
  if (has("conv.conv_weight")) return ParamRole::conv;
  if (has("conv.in_proj") || has("conv.out_proj")) return ParamRole::vo;  // the short conv's gates and value
  if (has("moe.router")) return ParamRole::mlp;
  if (has("moe.selection_bias")) return ParamRole::zero;
  if (name == "embed.weight") return ParamRole::embedding;
  // adaLN-Zero's final layer starts at logits = 0 (DiT), which only an untied head can do.
  if (name == "head.weight") return config_.time_conditioning ? ParamRole::zero : ParamRole::head;
  throw std::logic_error("parameter without an init role: " + name);
}

std::vector<std::pair<std::string, ParamRole>> LanguageModelImpl::param_roles() const {
  std::vector<std::pair<std::string, ParamRole>> roles;
  for (const auto& item : named_parameters()) roles.emplace_back(item.key(), role_of(item.key()));
  return roles;
}

ForwardOut LanguageModelImpl::forward(const torch::Tensor& tokens, const ForwardArgs& args) {
  const int64_t batch = tokens.size(0);
  const int64_t length = tokens.size(1);
  const int64_t start = args.cache ? args.cache->length() : 0;
  const auto positions =
      args.positions.defined()
          ? args.positions
          : torch::arange(start, start + length, tokens.options().dtype(torch::kLong)).expand({batch, length});
  const auto key_real = args.cache ? args.cache->record_key_real(args.key_padding, length) : args.key_padding;
  const AttentionContext context{
      rope_table(positions, resolved_head_dim(config_), config_.rope_theta),
      make_attention_mask(args.mask, start, length, start + length, key_real, tokens.device()), args.cache,
      args.mask, args.key_padding};

  torch::Tensor cond;
  if (args.noise_level.defined()) {
    TORCH_CHECK(!time_embed.is_empty(), "a noise level needs model.time_conditioning = true");
    cond = time_embed(args.noise_level);
  }

  auto x = embed(tokens);
  for (const auto& block : *blocks) x = block->as<BlockImpl>()->forward(x, context, cond);
  x = final_norm(x);
  if (cond.defined()) x = modulate(x, final_adaln(cond)[0]);
  auto logits = head.is_empty() ? torch::nn::functional::linear(x, embed->weight) : head(x);
  if (args.cache) args.cache->advance(length);
  return {logits.to(torch::kFloat), args.return_hidden ? x : torch::Tensor()};
}

KVCache LanguageModelImpl::make_kv_cache(int64_t batch_size, int64_t capacity) const {
  return KVCache(config_.n_layers, batch_size, capacity);
}

ParamCounts LanguageModelImpl::param_counts() const {
  ParamCounts counts;
  for (const auto& p : parameters()) counts.total += p.numel();
  counts.embedding = embed->weight.numel();
  counts.non_embedding = counts.total - counts.embedding;
  return counts;
}

LanguageModel build_language_model(const ModelConfig& config, int64_t tokenizer_vocab_size) {
  if (config.arch != "qwen3") throw InputError(fmt::format("model.arch = '{}' is not known (qwen3)", config.arch));
  const int64_t vocab_size = config.vocab_size > 0 ? config.vocab_size : tokenizer_vocab_size;
  if (vocab_size < tokenizer_vocab_size) {
    throw InputError(fmt::format("model.vocab_size = {} is smaller than the tokenizer's {}", vocab_size,
                                 tokenizer_vocab_size));
  }
  if (config.n_heads % config.n_kv_heads != 0) {
    throw InputError(fmt::format("model.n_kv_heads = {} must divide model.n_heads = {}", config.n_kv_heads,
                                 config.n_heads));
  }
  if (resolved_head_dim(config) % 2 != 0) {
    throw InputError(fmt::format("head dim {} must be even for RoPE", resolved_head_dim(config)));
  }
  if (config.time_conditioning && config.tie_embeddings) {
    throw InputError("model.time_conditioning needs model.tie_embeddings = false: adaLN-Zero starts the output "
                     "head at zero, which a tied embedding cannot be");
  }
  return LanguageModel(config, vocab_size);
}

}  // namespace inkstone
