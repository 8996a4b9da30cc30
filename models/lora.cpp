#include "models/lora.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "core/errors.h"
#include "models/block_registry.h"

namespace inkstone {
namespace {

thread_local bool adapters_off = false;
// Adapters attached in this process so far: while 0, a forward never looks for one (the projections of every
// model without LoRA are called on the hot path of training and decoding).
std::atomic<int64_t> adapters_attached{0};

constexpr const char* kAdapterName = "lora";

std::string leaf_name(const std::string& path) {
  const auto dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

// Every projection layer `layer` of `config` has, with the part that holds it.
std::vector<ProjectionShape> layer_projections(const ModelConfig& config, int64_t layer) {
  std::vector<ProjectionShape> out;
  for (const auto& projections : {token_mixer_of(config, layer).projections, feed_forward_of(config, layer).projections})
    if (projections) {
      const auto shapes = projections(config);
      out.insert(out.end(), shapes.begin(), shapes.end());
    }
  return out;
}

bool targeted(const ModelConfig& config, const std::string& name) {
  const auto& names = config.lora_targets.empty() ? lora_target_names() : config.lora_targets;
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

LoraAdapterImpl::LoraAdapterImpl(int64_t in_features, int64_t out_features, int64_t rank, double alpha)
    : scale_(alpha / static_cast<double>(rank)) {
  torch::NoGradGuard no_grad;
  a = register_parameter("a", torch::randn({rank, in_features}) / std::sqrt(static_cast<double>(in_features)));
  b = register_parameter("b", torch::zeros({out_features, rank}));
}

torch::Tensor LoraAdapterImpl::forward(const torch::Tensor& x) {
  return torch::linear(torch::linear(x, a.to(x.scalar_type())), b.to(x.scalar_type())) * scale_;
}

std::vector<std::string> lora_target_names() {
  std::set<std::string> names;
  const auto add = [&](const auto& kinds) {
    for (const auto& kind : kinds)
      if (kind.projections)
        for (const ProjectionShape& p : kind.projections(default_config().model)) names.insert(p.name);
  };
  add(token_mixer_kinds());
  add(feed_forward_kinds());
  return {names.begin(), names.end()};
}

void check_lora_settings(const ModelConfig& config) {
  if (config.lora_rank == 0) return;
  // The aux-loss-free balancing moves the routers' selection bias after every step: the base would not stay frozen.
  if (config.moe_bias_update_rate > 0)
    throw InputError(fmt::format("model.lora_rank = {} freezes the base model but model.moe_bias_update_rate = {} "
                                 "moves its routers' selection bias: set it to 0",
                                 config.lora_rank, config.moe_bias_update_rate));
  const auto known = lora_target_names();
  for (const std::string& target : config.lora_targets) {
    if (std::find(known.begin(), known.end(), target) == known.end())
      throw InputError(fmt::format("model.lora_targets has '{}', allowed: {}", target, fmt::join(known, ", ")));
    bool present = false;
    for (int64_t layer = 0; layer < config.n_layers && !present; ++layer)
      for (const ProjectionShape& p : layer_projections(config, layer)) present = present || p.name == target;
    if (!present)
      throw InputError(fmt::format("model.lora_targets has '{}', which no layer of this model has (model.mixer_pattern "
                                   "= '{}', model.ffn_pattern = '{}')",
                                   target, config.mixer_pattern, config.ffn_pattern));
  }
}

void attach_lora_adapters(torch::nn::Module& model, torch::nn::Module& blocks, const ModelConfig& config) {
  if (config.lora_rank == 0) return;
  for (const auto& item : blocks.named_modules("", /*include_self=*/false)) {
    auto* projection = item.value()->as<torch::nn::LinearImpl>();
    if (!projection || !targeted(config, leaf_name(item.key()))) continue;
    const auto& weight = projection->weight;
    projection->register_module(kAdapterName, LoraAdapter(weight.size(1), weight.size(0), config.lora_rank,
                                                          config.lora_alpha));
    ++adapters_attached;
  }
  for (auto& item : model.named_parameters()) {
    const std::string& name = item.key();
    const bool adapter = name.find(std::string(".") + kAdapterName + ".") != std::string::npos;
    item.value().requires_grad_(adapter);
  }
}

namespace {

LoraAdapterImpl* adapter_of(const torch::nn::Linear& projection) {
  if (adapters_attached.load(std::memory_order_relaxed) == 0) return nullptr;
  for (const auto& child : projection->named_children())
    if (child.key() == kAdapterName) return child.value()->as<LoraAdapterImpl>();
  return nullptr;
}

}  // namespace

torch::Tensor plus_lora(const torch::nn::Linear& projection, const torch::Tensor& x, torch::Tensor y) {
  if (adapters_off) return y;
  LoraAdapterImpl* adapter = adapter_of(projection);
  return adapter ? y + adapter->forward(x) : y;
}

torch::Tensor plus_joint_lora(const std::vector<torch::nn::Linear>& projections, const torch::Tensor& x,
                              torch::Tensor joint) {
  if (adapters_off || std::none_of(projections.begin(), projections.end(),
                                   [](const torch::nn::Linear& p) { return adapter_of(p) != nullptr; }))
    return joint;
  std::vector<int64_t> widths;
  for (const auto& p : projections) widths.push_back(p->weight.size(0));
  auto parts = joint.split_with_sizes(widths, -1);
  std::vector<torch::Tensor> adapted;
  for (size_t i = 0; i < projections.size(); ++i) adapted.push_back(plus_lora(projections[i], x, parts[i]));
  return torch::cat(adapted, -1);
}

int64_t lora_parameter_count(const ModelConfig& layer_config, int64_t layer) {
  if (layer_config.lora_rank == 0) return 0;
  int64_t count = 0;
  for (const ProjectionShape& p : layer_projections(layer_config, layer))
    if (targeted(layer_config, p.name)) count += p.copies * layer_config.lora_rank * (p.in_features + p.out_features);
  return count;
}

LoraOff::LoraOff() : was_off_(adapters_off) { adapters_off = true; }
LoraOff::~LoraOff() { adapters_off = was_off_; }

void merge_lora_adapters(std::map<std::string, torch::Tensor>& weights, const ModelConfig& config) {
  const std::string a_suffix = std::string(".") + kAdapterName + ".a";
  const double scale = config.lora_rank > 0 ? config.lora_alpha / static_cast<double>(config.lora_rank) : 0.0;
  std::vector<std::string> adapters;
  for (const auto& [name, tensor] : weights)
    if (name.size() > a_suffix.size() && name.compare(name.size() - a_suffix.size(), a_suffix.size(), a_suffix) == 0)
      adapters.push_back(name.substr(0, name.size() - a_suffix.size()));
  for (const std::string& projection : adapters) {
    const std::string a_name = projection + a_suffix, b_name = projection + "." + kAdapterName + ".b";
    const auto weight = weights.find(projection + ".weight");
    if (weight == weights.end() || !weights.count(b_name) || config.lora_rank == 0)
      throw InputError(fmt::format("adapter '{}' has no projection weight, no B matrix or no model.lora_rank to merge "
                                   "with",
                                   a_name));
    // In float32 at least (float64 weights stay float64), left so for whoever stores it (the export's dtype).
    const auto dtype = weight->second.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
    const auto delta = torch::matmul(weights[b_name].to(dtype), weights[a_name].to(dtype)) * scale;
    weight->second = weight->second.to(dtype) + delta;
    weights.erase(a_name);
    weights.erase(b_name);
  }
}

}  // namespace inkstone
