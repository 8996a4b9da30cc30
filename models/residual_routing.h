// Residual routing: how each sublayer's input is formed from the embedding and the earlier sublayer outputs
// (docs/backbones.md, "Residual stream" through "Delta AttnRes").
//   plain          h = emb + Σ outputs so far (the ordinary residual stream)
//   attnres, mhar  h = Σ_i softmax_i(q · RMSNorm(s_i)) s_i over every earlier output s_i (Kimi Team, Attention
//                  Residuals, arXiv 2603.15031; Luo, Cai, Hu, Multi-Head Attention Residuals), H heads
//   block_attnres  the same over the completed block sums and the current partial sum
//   delta          h = p + α · routed over [null source] ∪ per-sublayer (or per-block) deltas, α = 0 at init, so
//                  a converted model starts exactly as the plain one (Luo, Cai, Hu, Delta Attention Residuals);
//                  other gates: σ(a), σ(⟨w, p⟩ + a) per token, or none (α = 1)
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include "config/config.h"
#include "models/rms_norm.h"

namespace inkstone {

// The MHAR routing op (docs/backbones.md, "MHAR"): keys are the sources RMS-normalised over the FULL width d (so
// H = 1 is AttnRes exactly), split into H contiguous slices; head h weighs source i by softmax_i ⟨q_h, k̂_i[h]⟩ and
// sums the raw source slices. sources: [S, B, T, d]; query, key_gain: [d] -> [B, T, d]. Positions never mix. The key
// statistic is computed in fp32, or in fp64 for fp64 sources.
torch::Tensor route_sources(const torch::Tensor& sources, const torch::Tensor& query, const torch::Tensor& key_gain,
                            double norm_eps, int64_t heads);

// The delta gate α of model.residual_delta_gate (docs/backbones.md, "Delta AttnRes"): "zero" α = a, a = 0 at init
// (the exact identity); "sigmoid" α = σ(a − 2); "sigmoid_token" α_t = σ(⟨w, p_t⟩ + a − 2), a gate per token read
// from the plain stream; "none" α = 1. a and w start at 0, so the sigmoid gates open at σ(−2) ≈ 0.12 (the
// reference's logit init −2) and weight decay pulls them back toward it.

// One routing site's parameters: a static pseudo-query (zero at init: the uniform mean of the sources) and the
// key norm's gain; delta sites add a null source (zero at init) and their gate.
class RoutingSiteImpl : public torch::nn::Module {
 public:
  RoutingSiteImpl(int64_t d_model, double norm_eps, bool delta, DeltaGate gate_kind = DeltaGate::zero);
  // sources: each [B, T, d]; delta sites put the null source first.
  torch::Tensor route(const std::vector<torch::Tensor>& sources, int64_t heads);
  // α for the plain stream p: [B, T, d] -> a tensor that broadcasts against p (delta sites only).
  torch::Tensor delta_gate(const torch::Tensor& p) const;

  torch::Tensor query;        // [d]
  torch::Tensor key_gain;     // [d], the key RMSNorm's gain g (named key_norm_gain), 1 at init
  torch::Tensor null_source;  // [d], delta only
  torch::Tensor gate;         // [1], delta with a learned gate: a
  torch::Tensor gate_weight;  // [d], sigmoid_token only: w

 private:
  double norm_eps_;
  DeltaGate gate_kind_;
};
TORCH_MODULE(RoutingSite);

// The 2L + 1 sites of a routed model: site 2ℓ feeds layer ℓ's mixer, 2ℓ + 1 its feed-forward, 2L the final norm.
// A plain model has none.
class ResidualRouterImpl : public torch::nn::Module {
 public:
  explicit ResidualRouterImpl(const ModelConfig& config);
  RoutingSiteImpl& site(int64_t index) { return *sites[index]->as<RoutingSiteImpl>(); }

  torch::nn::ModuleList sites{nullptr};
};
TORCH_MODULE(ResidualRouter);

inline int64_t mixer_site(int64_t layer) { return 2 * layer; }
inline int64_t ffn_site(int64_t layer) { return 2 * layer + 1; }
inline int64_t final_site(int64_t n_layers) { return 2 * n_layers; }

// The residual state of one forward pass. The assembler alternates input(site) -> sublayer -> add(site, output)
// over sites 0..2L−1 and reads input(2L) for the final norm.
class ResidualStream {
 public:
  virtual ~ResidualStream() = default;
  virtual torch::Tensor input(int64_t site) = 0;
  virtual void add(int64_t site, const torch::Tensor& output) = 0;
  // norm(input(site)), for an assembler that normalises a sublayer's input outside its branch; the plain stream
  // fuses it with the add still pending before it (docs/kernels.md, "The residual add fused with RMSNorm").
  virtual torch::Tensor normed_input(int64_t site, const RMSNormImpl& norm) {
    return rms_norm(input(site), norm.weight, norm.eps());
  }
  // The final-normed output resized to the head's width: itself unless the stream's width varies.
  virtual torch::Tensor to_model_width(const torch::Tensor& normed, int64_t model_width) const {
    (void)model_width;
    return normed;
  }
};

// Starts the residual stream of one forward pass from its embedding.
using ResidualStreamStarter = std::function<std::unique_ptr<ResidualStream>(const torch::Tensor& embedding)>;
// The starter of the stream config.residual names, chosen once so that no forward compares the mode's name;
// `router` (unused, may be null, for plain) must outlive it.
ResidualStreamStarter residual_stream_starter(const ModelConfig& config, ResidualRouterImpl* router);

// Layers per block of a blocked routing mode: S = ⌈L / N_b⌉.
int64_t routing_block_size(const ModelConfig& config);

}  // namespace inkstone
