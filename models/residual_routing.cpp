#include "models/residual_routing.h"

#include <algorithm>

#include <torch/torch.h>

#include "models/kernels/route_sources.h"
#include "models/rms_norm.h"

namespace inkstone {

torch::Tensor route_sources(const torch::Tensor& sources, const torch::Tensor& query, const torch::Tensor& key_gain,
                            double norm_eps, int64_t heads) {
  const int64_t S = sources.size(0), B = sources.size(1), T = sources.size(2), d = sources.size(3);
  const auto gain = sources.scalar_type() == torch::kDouble ? key_gain.to(torch::kDouble) : key_gain;
  const auto keys = rms_norm(sources, gain, norm_eps).view({S, B, T, heads, d / heads});
  const auto logits = (keys * query.view({heads, d / heads})).sum(-1);  // [S, B, T, H]
  const auto weights = logits.softmax(0).unsqueeze(-1);                 // depth softmax per (b, t, h)
  return (weights * sources.view({S, B, T, heads, d / heads})).sum(0).view({B, T, d});
}

RoutingSiteImpl::RoutingSiteImpl(int64_t d_model, double norm_eps, bool delta, DeltaGate gate_kind)
    : norm_eps_(norm_eps), gate_kind_(gate_kind) {
  query = register_parameter("query", torch::zeros({d_model}));
  key_gain = register_parameter("key_norm_gain", torch::ones({d_model}));
  if (!delta) return;
  null_source = register_parameter("null_source", torch::zeros({d_model}));
  if (gate_kind != DeltaGate::none) gate = register_parameter("gate", torch::zeros({1}));
  if (gate_kind == DeltaGate::sigmoid_token) gate_weight = register_parameter("gate_weight", torch::zeros({d_model}));
}

torch::Tensor RoutingSiteImpl::delta_gate(const torch::Tensor& p) const {
  constexpr double kClosedLogit = -2.0;  // σ(−2): the sigmoid gates' opening at init
  switch (gate_kind_) {
    case DeltaGate::zero: return gate;
    case DeltaGate::sigmoid: return torch::sigmoid(gate + kClosedLogit);
    case DeltaGate::sigmoid_token:
      return torch::sigmoid(torch::matmul(p, gate_weight.to(p.dtype())).unsqueeze(-1) + gate + kClosedLogit);
    case DeltaGate::none: break;
  }
  return torch::ones({1}, p.options());
}

torch::Tensor RoutingSiteImpl::route(const std::vector<torch::Tensor>& sources, int64_t heads) {
  // On a GPU the fused kernel (docs/kernels.md) reads the sources in place, with no stacked copy and no key or
  // product tensors kept for the backward; bf16 (autocast) and the CPU take the composite.
  const auto dtype = sources.front().scalar_type();
  if (sources.front().is_cuda() && (dtype == torch::kFloat || dtype == torch::kDouble) &&
      std::all_of(sources.begin(), sources.end(), [&](const torch::Tensor& s) { return s.scalar_type() == dtype; }))
    return fused_route_sources(sources, query, key_gain, norm_eps_, heads);
  return route_sources(torch::stack(sources), query, key_gain, norm_eps_, heads);
}

ResidualRouterImpl::ResidualRouterImpl(const ModelConfig& config) {
  sites = register_module("sites", torch::nn::ModuleList());
  if (config.residual == ResidualMode::plain) return;
  for (int64_t i = 0; i <= final_site(config.n_layers); ++i)
    sites->push_back(RoutingSite(config.d_model, config.norm_eps, config.residual == ResidualMode::delta,
                                 config.residual_delta_gate));
}

int64_t routing_block_size(const ModelConfig& config) {
  return (config.n_layers + config.residual_blocks - 1) / config.residual_blocks;
}

namespace {

bool is_mixer_site(int64_t site) { return site % 2 == 0; }
int64_t layer_of(int64_t site) { return site / 2; }

// x = embedding + Σ outputs. An output is held until the next site reads the stream, so that a normalised read adds
// and normalises in one pass (add_rms_norm).
class PlainStream : public ResidualStream {
 public:
  explicit PlainStream(torch::Tensor embedding) : x_(std::move(embedding)) {}
  torch::Tensor input(int64_t) override {
    add_pending();
    return x_;
  }
  void add(int64_t, const torch::Tensor& output) override {
    add_pending();
    pending_ = output;
  }
  torch::Tensor normed_input(int64_t, const RMSNormImpl& norm) override {
    if (!pending_.defined()) return rms_norm(x_, norm.weight, norm.eps());
    auto [sum, normed] = add_rms_norm(x_, pending_, norm.weight, norm.eps());
    x_ = std::move(sum);
    pending_ = torch::Tensor();
    return normed;
  }

 private:
  void add_pending() {
    if (!pending_.defined()) return;
    x_ = x_ + pending_;
    pending_ = torch::Tensor();
  }

  torch::Tensor x_;
  torch::Tensor pending_;  // the last output, not yet added
};

// Full AttnRes / MHAR: the sources are the raw embedding and every sublayer output, appended, never summed.
class FullRoutingStream : public ResidualStream {
 public:
  FullRoutingStream(ResidualRouterImpl& router, int64_t heads, torch::Tensor embedding)
      : router_(router), heads_(heads), sources_{std::move(embedding)} {}
  torch::Tensor input(int64_t site) override { return router_.site(site).route(sources_, heads_); }
  void add(int64_t, const torch::Tensor& output) override { sources_.push_back(output); }

 private:
  ResidualRouterImpl& router_;
  int64_t heads_;
  std::vector<torch::Tensor> sources_;
};

// Block AttnRes (docs/backbones.md, "Block AttnRes"): sources are the completed block sums and the current partial
// sum p, which starts as the embedding. At the mixer site of every S-th layer, after routing, p is closed into a block.
class BlockRoutingStream : public ResidualStream {
 public:
  BlockRoutingStream(ResidualRouterImpl& router, int64_t heads, int64_t block_size, torch::Tensor embedding)
      : router_(router), heads_(heads), block_size_(block_size), partial_(std::move(embedding)) {}

  torch::Tensor input(int64_t site) override {
    auto sources = blocks_;
    sources.push_back(partial_);
    auto h = router_.site(site).route(sources, heads_);
    if (is_mixer_site(site) && layer_of(site) % block_size_ == 0) {
      blocks_.push_back(partial_);
      partial_ = torch::Tensor();  // the new block's sum starts at the next output
    }
    return h;
  }
  void add(int64_t, const torch::Tensor& output) override {
    partial_ = partial_.defined() ? partial_ + output : output;
  }

 private:
  ResidualRouterImpl& router_;
  int64_t heads_;
  int64_t block_size_;
  std::vector<torch::Tensor> blocks_;
  torch::Tensor partial_;
};

// Delta AttnRes (docs/backbones.md, "Delta AttnRes"): the plain stream p plus α · route([n] ∪ Δ), Δ seeded with
// the embedding and extended by every sublayer output, or by the clean block difference p(end of block) − p(start of
// block).
class DeltaStream : public ResidualStream {
 public:
  DeltaStream(ResidualRouterImpl& router, int64_t heads, int64_t block_size, int64_t n_layers,
              torch::Tensor embedding)
      : router_(router), heads_(heads), block_size_(block_size), n_layers_(n_layers), p_(embedding),
        block_start_(embedding), deltas_{embedding} {}

  torch::Tensor input(int64_t site) override {
    auto& s = router_.site(site);
    std::vector<torch::Tensor> sources{s.null_source.expand_as(p_)};
    sources.insert(sources.end(), deltas_.begin(), deltas_.end());
    return p_ + s.delta_gate(p_) * s.route(sources, heads_);
  }
  void add(int64_t site, const torch::Tensor& output) override {
    p_ = p_ + output;
    if (block_size_ == 0) {
      deltas_.push_back(output);
      return;
    }
    const int64_t layer = layer_of(site);
    const bool block_ends = (layer + 1) % block_size_ == 0 || layer + 1 == n_layers_;
    if (!is_mixer_site(site) && block_ends) {
      deltas_.push_back(p_ - block_start_);
      block_start_ = p_;
    }
  }

 private:
  ResidualRouterImpl& router_;
  int64_t heads_;
  int64_t block_size_;  // 0: one delta per sublayer
  int64_t n_layers_;
  torch::Tensor p_;
  torch::Tensor block_start_;
  std::vector<torch::Tensor> deltas_;
};

}  // namespace

ResidualStreamStarter residual_stream_starter(const ModelConfig& config, ResidualRouterImpl* router) {
  using Stream = std::unique_ptr<ResidualStream>;
  const ResidualMode mode = config.residual;
  if (mode == ResidualMode::plain)
    return [](const torch::Tensor& embedding) -> Stream { return std::make_unique<PlainStream>(embedding); };
  TORCH_CHECK(router != nullptr, "residual routing '", choice_name(mode), "' needs the model's router");
  const int64_t heads = config.residual_heads;
  if (mode == ResidualMode::attnres || mode == ResidualMode::mhar)
    return [router, heads](const torch::Tensor& embedding) -> Stream {
      return std::make_unique<FullRoutingStream>(*router, heads, embedding);
    };
  if (mode == ResidualMode::block_attnres)
    return [router, heads, block_size = routing_block_size(config)](const torch::Tensor& embedding) -> Stream {
      return std::make_unique<BlockRoutingStream>(*router, heads, block_size, embedding);
    };
  const int64_t block_size = config.residual_delta == DeltaSources::block ? routing_block_size(config) : 0;
  return [router, heads, block_size, layers = config.n_layers](const torch::Tensor& embedding) -> Stream {
    return std::make_unique<DeltaStream>(*router, heads, block_size, layers, embedding);
  };
}

}  // namespace inkstone
