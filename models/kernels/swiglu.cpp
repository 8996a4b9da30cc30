#include "models/kernels/swiglu.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "core/kernels/kernel_types.h"
#include "models/kernels/swiglu_row.h"

#ifdef INKSTONE_CUDA
#include "core/kernels/kernel_stream.h"
#include "models/kernels/swiglu_cuda.h"
#endif

namespace inkstone {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kCpuGrain = 4096;  // coordinates per CPU task: a few microseconds of work

torch::Tensor gated(const torch::Tensor& gate_up) {
  const int64_t width = gate_up.size(-1) / 2;
  auto sizes = gate_up.sizes().vec();
  sizes.back() = width;
  auto hidden = torch::empty(sizes, gate_up.options());
  const kernels::SwigluShape shape{gate_up.numel() / (2 * width), width};
  visit_kernel_types(gate_up.scalar_type(), [&](auto element, auto, auto pointer) {
    using T = decltype(element);
    const T* in = pointer(gate_up);
    T* out = pointer(hidden);
    if (gate_up.is_cuda()) {
#ifdef INKSTONE_CUDA
      kernels::launch_swiglu_forward(in, shape, out, kernel_stream(gate_up.device()));
#endif
      return;
    }
    at::parallel_for(0, shape.elements(), kCpuGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) kernels::swiglu_forward_at(in, shape, i, out);
    });
  });
  return hidden;
}

torch::Tensor gate_up_gradient(const torch::Tensor& gate_up, const torch::Tensor& grad_hidden) {
  auto grad = torch::empty_like(gate_up);
  const kernels::SwigluShape shape{grad_hidden.numel() / grad_hidden.size(-1), grad_hidden.size(-1)};
  visit_kernel_types(gate_up.scalar_type(), [&](auto element, auto, auto pointer) {
    using T = decltype(element);
    const T* in = pointer(gate_up);
    const T* dh = pointer(grad_hidden);
    T* out = pointer(grad);
    if (gate_up.is_cuda()) {
#ifdef INKSTONE_CUDA
      kernels::launch_swiglu_backward(in, dh, shape, out,
                                      kernel_stream(gate_up.device()));
#endif
      return;
    }
    at::parallel_for(0, shape.elements(), kCpuGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) kernels::swiglu_backward_at(in, dh, shape, i, out);
    });
  });
  return grad;
}

struct FusedSwigluFunction : public torch::autograd::Function<FusedSwigluFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gate_up) {
    ctx->save_for_backward({gate_up});
    return gated(gate_up);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto gate_up = ctx->get_saved_variables()[0];
    return {gate_up_gradient(gate_up, grads[0].to(gate_up.scalar_type()).contiguous())};
  }
};

}  // namespace

torch::Tensor fused_swiglu(const torch::Tensor& gate_up) {
  TORCH_CHECK(gate_up.dim() >= 1 && gate_up.size(-1) % 2 == 0,
              "fused_swiglu: gate_up must end in an even width [..., 2F], got ", gate_up.sizes());
  const auto dtype = gate_up.scalar_type();
  TORCH_CHECK(dtype == torch::kFloat || dtype == torch::kBFloat16 || dtype == torch::kDouble,
              "fused_swiglu: gate_up must be float32, bfloat16 or float64, got ", dtype);
  TORCH_CHECK(gate_up.is_cpu() || gate_up.is_cuda(), "fused_swiglu: gate_up on a CPU or CUDA device");
#ifndef INKSTONE_CUDA
  TORCH_CHECK(!gate_up.is_cuda(), "fused_swiglu: this build has no CUDA kernels");
#endif
  return FusedSwigluFunction::apply(gate_up.contiguous());
}

}  // namespace inkstone
