// adaLN-Zero conditioning (Peebles & Xie 2023, DiT §3.2; docs/backbones.md, "adaLN-Zero time conditioning"): a
// zero-initialised Linear(c -> k·d) yields per-sublayer shift, scale and gate, and a residual branch becomes
//   x + g ⊙ Sublayer(Norm(x) ⊙ (1 + sc) + sh),
// so at init every conditioned branch adds exactly 0 and the block is the identity.
#pragma once
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace inkstone {

// One sublayer's modulation, each [B, 1, d]; an undefined member leaves its input unchanged, which is how a
// block without conditioning reduces to the plain pre-norm residual x + Sublayer(Norm(x)).
struct Modulation {
  torch::Tensor shift, scale, gate;
};

// h ⊙ (1 + sc) + sh
torch::Tensor modulate(const torch::Tensor& h, const Modulation& m);
// g ⊙ y
torch::Tensor gate(const torch::Tensor& y, const Modulation& m);

class AdaLNImpl : public torch::nn::Module {
 public:
  // with_gate = false gives shift and scale only (the final layer before the head).
  AdaLNImpl(int64_t cond_dim, int64_t d_model, int64_t num_sublayers, bool with_gate);
  // c: [B, cond_dim] -> one Modulation per sublayer, chunked in DiT's order (shift, scale, gate) per sublayer.
  std::vector<Modulation> forward(const torch::Tensor& c);

  torch::Tensor weight;  // [num_sublayers · (2 or 3) · d, cond_dim], zero at init
  torch::Tensor bias;

 private:
  int64_t num_chunks_;  // 2 or 3 per sublayer
  bool with_gate_;
};
TORCH_MODULE(AdaLN);

}  // namespace inkstone
