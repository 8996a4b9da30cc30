// Projections of one input as one GEMM (q, k and v; the gate and up projections of SwiGLU): the weights stay the
// separate parameters that checkpoints, Hugging Face interop, ZeRO and the init roles name, and are joined only for
// the product (docs/kernels.md "One GEMM for projections of one input").
#pragma once
#include <vector>

#include <torch/types.h>

namespace inkstone {

// x: [..., in]; weights[i]: [out_i, in]; biases: empty or one per weight. Returns [x W_0ᵀ + b_0 | x W_1ᵀ + b_1 | ...],
// [..., Σ out_i]. Under gradient, and where the input has at least as many rows as it has features (prefill,
// scoring), the
// weights are concatenated and multiplied once; the backward
// joins the weights again rather than keeping the concatenation, so autograd holds no second copy of them. Fewer
// rows than that without gradient (decoding a token per row) read every weight once by separate products, joined after, because
// there copying the weights would cost more than the product.
torch::Tensor joint_linear(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                        const std::vector<torch::Tensor>& biases);

}  // namespace inkstone
