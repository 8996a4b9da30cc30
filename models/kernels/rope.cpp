#include "models/kernels/rope.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "core/kernels/kernel_types.h"
#include "models/kernels/head_layout.h"
#include "models/kernels/rope_row.h"

#ifdef INKSTONE_CUDA
#include "core/kernels/kernel_stream.h"
#include "models/kernels/rope_cuda.h"
#endif

namespace inkstone {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

template <typename T>
void rotate_on_cpu(const T* x, const float* cos, const float* sin, const kernels::RopeShape& shape, T* out) {
  at::parallel_for(0, shape.rows(), 64, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row)
      for (int64_t j = 0; j < shape.half; ++j) kernels::rope_pair(x, cos, sin, shape, row, j, out);
  });
}

template <typename T>
void rotate(const T* x, const float* cos, const float* sin, const kernels::RopeShape& shape, T* out,
            const torch::Device& device) {
  if (device.is_cuda()) {
#ifdef INKSTONE_CUDA
    kernels::launch_rope(x, cos, sin, shape, out, KernelPlace(device).stream());
#endif
    return;
  }
  rotate_on_cpu(x, cos, sin, shape, out);
}

// R x (or Rᵀ x) into a tensor of x's layout.
torch::Tensor rotated(const torch::Tensor& x_in, const torch::Tensor& cos, const torch::Tensor& sin, bool transpose) {
  const auto x = with_unit_last_stride(x_in);
  auto out = torch::empty_like(x);  // x's layout, or contiguous where x is not dense: a unit last stride either way
  kernels::RopeShape shape;
  shape.batch = x.size(0);
  shape.heads = x.size(1);
  shape.time = x.size(2);
  shape.half = x.size(3) / 2;
  shape.x = head_strides(x);
  shape.out = head_strides(out);
  shape.table = head_strides(cos.expand({x.size(0), 1, x.size(2), x.size(3)}));
  shape.transpose = transpose;
  const float* c = cos.data_ptr<float>();
  const float* s = sin.data_ptr<float>();
  switch (x.scalar_type()) {
    case torch::kFloat:
      rotate(x.data_ptr<float>(), c, s, shape, out.data_ptr<float>(), x.device());
      break;
    case torch::kDouble:
      rotate(x.data_ptr<double>(), c, s, shape, out.data_ptr<double>(), x.device());
      break;
    default:  // bf16, checked by fused_rope
      rotate(reinterpret_cast<const kernels::Bf16Bits*>(x.data_ptr<at::BFloat16>()), c, s, shape,
             reinterpret_cast<kernels::Bf16Bits*>(out.data_ptr<at::BFloat16>()), x.device());
  }
  return out;
}

struct FusedRopeFunction : public torch::autograd::Function<FusedRopeFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return rotated(x, cos, sin, /*transpose=*/false);
  }

  // The gradient of R x is Rᵀ g; the tables come from integer positions and get none.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    return {rotated(grads[0], saved[0], saved[1], /*transpose=*/true), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor fused_rope(const torch::Tensor& x, const torch::Tensor& cos_in, const torch::Tensor& sin_in) {
  TORCH_CHECK(x.dim() == 4 && x.size(3) % 2 == 0, "fused_rope: x must be [B, H, T, h_d] with an even h_d");
  const auto dtype = x.scalar_type();
  TORCH_CHECK(dtype == torch::kFloat || dtype == torch::kBFloat16 || dtype == torch::kDouble,
              "fused_rope: x must be float32, bfloat16 or float64, got ", dtype);
  check_rope_tables("fused_rope", x, cos_in, sin_in);
  TORCH_CHECK(kernels_run_on(x), "fused_rope: x on the CPU or, in a CUDA build, a CUDA device");
  return FusedRopeFunction::apply(x, cos_in.contiguous(), sin_in.contiguous());
}

}  // namespace inkstone
