// The fused routing read (models/kernels/route_sources_row.h) as an autograd op: the CUDA kernel on a GPU, the CPU
// twin elsewhere. route_sources (models/residual_routing.h) takes it on CUDA; on the CPU the composite stays, as
// fast there, and the twin is what the tests hold the kernel to.
#pragma once
#include <vector>

#include <torch/types.h>

namespace inkstone {

// sources: S tensors [B, T, d] of one dtype (float32 or float64), read in place; query, key_gain: [d]. The same
// result and gradients as route_sources over their stack.
torch::Tensor fused_route_sources(const std::vector<torch::Tensor>& sources, const torch::Tensor& query,
                                  const torch::Tensor& key_gain, double norm_eps, int64_t heads);

}  // namespace inkstone
