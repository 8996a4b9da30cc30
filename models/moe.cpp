#include "models/moe.h"

#include <utility>

#include <fmt/format.h>
#include <torch/torch.h>

#include "core/errors.h"
#include "models/model_dims.h"

namespace inkstone {

MoEImpl::MoEImpl(const ModelConfig& config, int64_t layer_index)
    : layer_index_(layer_index),
      num_experts_(config.moe_experts),
      top_k_(config.moe_top_k),
      sigmoid_(config.moe_router == MoeRouter::sigmoid),
      route_scale_(config.moe_route_scale),
      aux_loss_coef_(config.moe_aux_loss_coef),
      z_loss_coef_(config.moe_z_loss_coef),
      bias_update_rate_(config.moe_bias_update_rate) {
  TORCH_CHECK(top_k_ <= num_experts_, "moe_top_k exceeds moe_experts");
  const int64_t d = config.d_model;
  const int64_t width = config.moe_expert_ffn_dim > 0 ? config.moe_expert_ffn_dim : resolved_ffn_dim(config);
  router = register_module("router", torch::nn::Linear(torch::nn::LinearOptions(d, num_experts_).bias(false)));
  selection_bias = register_parameter("selection_bias", torch::zeros({num_experts_}), /*requires_grad=*/false);
  experts = register_module("experts", torch::nn::ModuleList());
  for (int64_t e = 0; e < num_experts_; ++e) experts->push_back(SwiGLU(d, width));
  expert_numel_ = 3 * d * width;
  if (config.moe_shared_experts > 0) {
    shared = register_module("shared", SwiGLU(d, config.moe_shared_experts * width));
  }
  load_since_update_ = torch::zeros({num_experts_}, torch::kFloat);
}

int64_t MoEImpl::parameter_count(const ModelConfig& config) {
  const int64_t d = config.d_model;
  const int64_t expert = 3 * d * (config.moe_expert_ffn_dim > 0 ? config.moe_expert_ffn_dim : resolved_ffn_dim(config));
  // router, selection bias, routed and shared experts (the shared ones as one wider SwiGLU)
  return d * config.moe_experts + config.moe_experts + (config.moe_experts + config.moe_shared_experts) * expert;
}

ParamRole MoEImpl::role_of(const std::string& name) const {
  if (name == "selection_bias") return ParamRole::zero;
  return ParamRole::mlp;  // the router and every expert's matrices
}

FeedForwardKind moe_feed_forward_kind() {
  FeedForwardKind kind;
  kind.letter = 'M';
  kind.module_name = "moe";
  kind.description = "mixture of experts (MoE)";
  kind.make = [](const ModelConfig& config, int64_t layer) { return std::make_shared<MoEImpl>(config, layer); };
  kind.parameter_count = MoEImpl::parameter_count;
  // Router logits and probabilities; per assignment its gathered input, its expert's SwiGLU (as the dense one) and
  // its weighted output; the shared experts' SwiGLU.
  kind.saved_floats_per_token = [](const ModelConfig& config, int64_t) {
    const double width =
        static_cast<double>(config.moe_expert_ffn_dim > 0 ? config.moe_expert_ffn_dim : resolved_ffn_dim(config));
    const double per_assignment = 2.0 * config.d_model + 3.0 * width;
    return 2.0 * config.moe_experts + config.moe_top_k * per_assignment + 3.0 * width * config.moe_shared_experts;
  };
  kind.check = [](const ModelConfig& config) {
    if (config.moe_top_k > config.moe_experts)
      throw InputError(fmt::format("model.moe_top_k = {} exceeds model.moe_experts = {}", config.moe_top_k,
                                   config.moe_experts));
  };
  kind.graph_decode_obstacle = "MoE layers";  // buffers sized from the routing
  // Every routed expert's projections, and the shared experts' (one SwiGLU of their joint width).
  kind.projections = [](const ModelConfig& config) {
    const int64_t width = config.moe_expert_ffn_dim > 0 ? config.moe_expert_ffn_dim : resolved_ffn_dim(config);
    auto shapes = swiglu_projections(config.d_model, width, config.moe_experts);
    if (config.moe_shared_experts > 0) {
      const auto shared = swiglu_projections(config.d_model, config.moe_shared_experts * width, 1);
      shapes.insert(shapes.end(), shared.begin(), shared.end());
    }
    return shapes;
  };
  return kind;
}

Routing MoEImpl::route(const torch::Tensor& x) const {
  Routing r;
  // Softmax, top-k and the balance statistics in at least fp32 (float64 stays float64).
  r.logits = torch::nn::functional::linear(x, router->weight);
  r.logits = r.logits.to(torch::promote_types(r.logits.scalar_type(), torch::kFloat));
  const auto scores = sigmoid_ ? r.logits.sigmoid() : r.logits.softmax(-1);
  r.probs = sigmoid_ ? scores / scores.sum(-1, /*keepdim=*/true) : scores;
  r.experts = std::get<1>((scores.detach() + selection_bias.to(scores.dtype())).topk(top_k_, -1));
  const auto picked = scores.gather(1, r.experts);
  r.weights = picked / picked.sum(-1, /*keepdim=*/true) * route_scale_;
  return r;
}

// The N·k (token, expert) assignments sorted by expert, so that each expert runs once on a contiguous slice;
// the per-expert counts are the one host transfer (a GPU waits once per layer, not once per expert).
torch::Tensor MoEImpl::forward(const torch::Tensor& u) {
  const auto x = u.reshape({-1, u.size(-1)});
  const Routing routing = route(x);
  const auto assigned = routing.experts.flatten();  // assignment a = token·k + slot
  // A stable sort keeps the tokens of one expert in their order.
  const auto order = std::get<1>(assigned.sort(c10::optional<bool>(true), 0));
  const auto token_of = order.div(top_k_, "floor");
  const auto counts = torch::bincount(assigned, {}, num_experts_).cpu();
  const auto sorted_inputs = x.index_select(0, token_of);
  std::vector<torch::Tensor> outputs;
  int64_t start = 0;
  for (int64_t e = 0; e < num_experts_; ++e) {
    const int64_t n = counts[e].item<int64_t>();
    if (n > 0) outputs.push_back(experts[e]->as<SwiGLUImpl>()->forward(sorted_inputs.narrow(0, start, n)));
    start += n;
  }
  const auto weights = routing.weights.flatten().index_select(0, order).unsqueeze(1).to(x.dtype());
  auto y = torch::zeros_like(x).index_add(0, token_of, torch::cat(outputs) * weights);
  if (!shared.is_empty()) y = y + shared(x);
  const AuxiliaryRecording recording = auxiliary_recording(is_training());
  if (recording.losses) record_auxiliary(routing, recording.statistics);
  return y.view_as(u);
}

void MoEImpl::record_auxiliary(const Routing& routing, bool count_load) {
  const double tokens = static_cast<double>(routing.logits.size(0));
  // f_i: the fraction of the N·k assignments that went to expert i.
  const auto counts = routing.logits.options().dtype(torch::kFloat);  // exact counts, also under bf16 autocast
  const auto load = torch::zeros({num_experts_}, counts)
                        .index_add_(0, routing.experts.flatten(), torch::ones({routing.experts.numel()}, counts));
  if (count_load) load_since_update_ = load_since_update_.to(load.device()) + load;
  const auto fraction = load / (tokens * top_k_);
  const auto balance = aux_loss_coef_ * num_experts_ * (fraction * routing.probs.mean(0)).sum();
  const auto z = z_loss_coef_ * routing.logits.logsumexp(-1).pow(2).mean();
  latest_.loss = balance + z;
  const auto relative_load = fraction * num_experts_;  // 1 for every expert when balanced
  latest_.metrics = {{"moe_balance_loss", balance.detach()},
                     {"moe_z_loss", z.detach()},
                     {fmt::format("moe{}_load_max", layer_index_), relative_load.max()},
                     {fmt::format("moe{}_load_min", layer_index_), relative_load.min()}};
}

AuxiliaryOutputs MoEImpl::take_auxiliary() { return std::exchange(latest_, AuxiliaryOutputs{}); }

std::vector<torch::Tensor> MoEImpl::rank_statistics() { return {load_since_update_}; }

// A step without routed tokens has load 0 everywhere, so sign(0 − 0) = 0 leaves the bias (no host sync needed).
// A skipped update moves no bias, and its loads go with it: the next update balances on its own batch.
void MoEImpl::after_optimizer_step(const torch::Tensor& applied) {
  if (bias_update_rate_ > 0) {
    torch::NoGradGuard no_grad;
    const auto above_mean = (load_since_update_ - load_since_update_.mean()).sign();
    const auto step = above_mean.to(selection_bias.device(), torch::kFloat) * applied.to(selection_bias.device());
    selection_bias.sub_(bias_update_rate_ * step.to(selection_bias.scalar_type()));
  }
  load_since_update_.zero_();
}

int64_t inactive_expert_parameters(const torch::nn::Module& model) {
  int64_t inactive = 0;
  for (const auto& module : model.modules())
    if (const auto* moe = dynamic_cast<const MoEImpl*>(module.get()))
      inactive += (moe->num_experts() - moe->top_k()) * moe->expert_numel();
  return inactive;
}

}  // namespace inkstone
