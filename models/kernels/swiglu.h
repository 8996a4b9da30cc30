// SwiGLU's gating (models/kernels/swiglu_row.h) as one autograd op: the CUDA kernel on a GPU, the same formulas
// through ATen's vectorised SiLU on the CPU (the row code's scalar exp is slower there). It replaces SiLU(g) ⊙ u over two separate projections, whose SiLU, product and casts each read and wrote the
// hidden activations, and whose autograd kept g, u and SiLU(g); the op keeps only the projections' joint output.
#pragma once
#include <torch/types.h>

namespace inkstone {

// gate_up: [..., 2F] with the gate projection in the first F columns and the up projection in the last F; returns
// SiLU(gate) ⊙ up, [..., F], in gate_up's dtype (float32, bf16 computed in float32; float64 in float64). The
// gradient is computed by the same kernels and is not itself differentiable (no double backward).
torch::Tensor fused_swiglu(const torch::Tensor& gate_up);

// The row code run on the CPU, the twin the GPU kernel is tested against: the hidden activations of gate_up and the
// gradient with respect to gate_up of Σ grad_hidden ⊙ hidden.
struct SwigluRowCode {
  torch::Tensor hidden, grad_gate_up;
};
SwigluRowCode swiglu_row_code_on_cpu(const torch::Tensor& gate_up, const torch::Tensor& grad_hidden);

}  // namespace inkstone
