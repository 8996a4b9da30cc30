#include "models/modulation.h"

#include <torch/torch.h>

namespace inkstone {

torch::Tensor modulate(const torch::Tensor& h, const Modulation& m) {
  return m.scale.defined() ? h * (1 + m.scale) + m.shift : h;
}

torch::Tensor gate(const torch::Tensor& y, const Modulation& m) { return m.gate.defined() ? m.gate * y : y; }

AdaLNImpl::AdaLNImpl(int64_t cond_dim, int64_t d_model, int64_t num_sublayers, bool with_gate)
    : num_chunks_(num_sublayers * (with_gate ? 3 : 2)), with_gate_(with_gate) {
  weight = register_parameter("weight", torch::zeros({num_chunks_ * d_model, cond_dim}));
  bias = register_parameter("bias", torch::zeros({num_chunks_ * d_model}));
}

std::vector<Modulation> AdaLNImpl::forward(const torch::Tensor& c) {
  const auto chunks = torch::nn::functional::linear(c, weight, bias).unsqueeze(1).chunk(num_chunks_, -1);
  const size_t per_sublayer = with_gate_ ? 3 : 2;
  std::vector<Modulation> out;
  for (size_t i = 0; i < chunks.size(); i += per_sublayer) {
    out.push_back({chunks[i], chunks[i + 1], with_gate_ ? chunks[i + 2] : torch::Tensor()});
  }
  return out;
}

}  // namespace inkstone
