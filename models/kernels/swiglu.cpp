#include "models/kernels/swiglu.h"

#include <array>

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

torch::Tensor hidden_like(const torch::Tensor& gate_up) {
  auto sizes = gate_up.sizes().vec();
  sizes.back() /= 2;
  return torch::empty(sizes, gate_up.options());
}

kernels::SwigluShape shape_of(const torch::Tensor& gate_up) {
  const int64_t width = gate_up.size(-1) / 2;
  return {gate_up.numel() / (2 * width), width};
}

// The row code, on the GPU (the kernel) or the CPU (the twin).
torch::Tensor gated_by_row_code(const torch::Tensor& gate_up) {
  auto hidden = hidden_like(gate_up);
  const auto shape = shape_of(gate_up);
  visit_kernel_types(gate_up.scalar_type(), [&](auto element, auto, auto pointer) {
    using T = decltype(element);
    const T* in = pointer(gate_up);
    T* out = pointer(hidden);
    if (gate_up.is_cuda()) {
#ifdef INKSTONE_CUDA
      kernels::launch_swiglu_forward(in, shape, out, KernelPlace(gate_up.device()).stream());
#endif
      return;
    }
    at::parallel_for(0, shape.elements(), kCpuGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) kernels::swiglu_forward_at(in, shape, i, out);
    });
  });
  return hidden;
}

torch::Tensor gate_up_gradient_by_row_code(const torch::Tensor& gate_up, const torch::Tensor& grad_hidden) {
  auto grad = torch::empty_like(gate_up);
  const auto shape = shape_of(gate_up);
  visit_kernel_types(gate_up.scalar_type(), [&](auto element, auto, auto pointer) {
    using T = decltype(element);
    const T* in = pointer(gate_up);
    const T* dh = pointer(grad_hidden);
    T* out = pointer(grad);
    if (gate_up.is_cuda()) {
#ifdef INKSTONE_CUDA
      kernels::launch_swiglu_backward(in, dh, shape, out, KernelPlace(gate_up.device()).stream());
#endif
      return;
    }
    at::parallel_for(0, shape.elements(), kCpuGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) kernels::swiglu_backward_at(in, dh, shape, i, out);
    });
  });
  return grad;
}

// The same formulas through ATen's vectorised SiLU, for the CPU: the twin's scalar exp made a training step at the
// bench's M shape about a third slower (docs/kernels.md "The fused SwiGLU"). The backward writes each half of the
// gradient in place (out= ops): two fewer temporaries of the hidden width and no concatenation.
std::array<torch::Tensor, 2> gate_and_up(const torch::Tensor& gate_up) {
  const int64_t width = gate_up.size(-1) / 2;
  return {gate_up.narrow(-1, 0, width), gate_up.narrow(-1, width, width)};
}

// bf16 rows widened to float32 and the result rounded once, as the row code rounds.
torch::Tensor widened(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 ? t.to(torch::kFloat) : t;
}

torch::Tensor gated(const torch::Tensor& gate_up) {
  if (gate_up.is_cuda()) return gated_by_row_code(gate_up);
  const auto halves = gate_and_up(widened(gate_up));
  return at::silu(halves[0]).mul_(halves[1]).to(gate_up.scalar_type());
}

// [dg | du] = [SiLU'(g) (dh u) | SiLU(g) dh].
torch::Tensor gate_up_gradient(const torch::Tensor& gate_up, const torch::Tensor& grad_hidden) {
  if (gate_up.is_cuda()) return gate_up_gradient_by_row_code(gate_up, grad_hidden);
  const auto wide = widened(gate_up);
  const auto halves = gate_and_up(wide);
  const auto &g = halves[0], &u = halves[1];
  const auto dh = widened(grad_hidden);
  auto grad = torch::empty_like(wide);
  auto grad_halves = gate_and_up(grad);
  auto &dg = grad_halves[0], &du = grad_halves[1];
  at::silu_out(du, g);
  du.mul_(dh);
  at::mul_out(dg, dh, u);
  at::silu_backward_out(dg, dg, g);
  return grad.to(gate_up.scalar_type());
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

void check_gate_up(const torch::Tensor& gate_up) {
  TORCH_CHECK(gate_up.dim() >= 1 && gate_up.size(-1) % 2 == 0,
              "fused_swiglu: gate_up must end in an even width [..., 2F], got ", gate_up.sizes());
  const auto dtype = gate_up.scalar_type();
  TORCH_CHECK(dtype == torch::kFloat || dtype == torch::kBFloat16 || dtype == torch::kDouble,
              "fused_swiglu: gate_up must be float32, bfloat16 or float64, got ", dtype);
  TORCH_CHECK(kernels_run_on(gate_up), "fused_swiglu: gate_up on the CPU or, in a CUDA build, a CUDA device");
}

}  // namespace

torch::Tensor fused_swiglu(const torch::Tensor& gate_up) {
  check_gate_up(gate_up);
  return FusedSwigluFunction::apply(gate_up.contiguous());
}

SwigluRowCode swiglu_row_code_on_cpu(const torch::Tensor& gate_up, const torch::Tensor& grad_hidden) {
  check_gate_up(gate_up);
  auto hidden_sizes = gate_up.sizes().vec();
  hidden_sizes.back() /= 2;
  TORCH_CHECK(gate_up.is_cpu() && grad_hidden.sizes() == hidden_sizes && grad_hidden.scalar_type() == gate_up.scalar_type(),
              "swiglu_row_code_on_cpu: CPU gate_up [..., 2F] and a gradient [..., F] of its dtype");
  const auto rows = gate_up.contiguous();
  return {gated_by_row_code(rows), gate_up_gradient_by_row_code(rows, grad_hidden.contiguous())};
}

}  // namespace inkstone
