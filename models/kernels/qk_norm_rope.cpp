#include "models/kernels/qk_norm_rope.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "core/kernels/kernel_types.h"
#include "models/kernels/head_layout.h"
#include "models/kernels/qk_norm_rope_row.h"

#ifdef INKSTONE_CUDA
#include "core/kernels/kernel_stream.h"
#include "models/kernels/qk_norm_rope_cuda.h"
#endif

namespace inkstone {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// [B, H, T, h_d] seen over [B, T, H, h_d] storage: rows in the kernels' order are neighbours in memory.
torch::Tensor empty_rows_like(const torch::Tensor& x) {
  return torch::empty({x.size(0), x.size(2), x.size(1), x.size(3)}, x.options()).transpose(1, 2);
}

kernels::QkNormRopeShape shape_of(const torch::Tensor& x, const torch::Tensor& cos, double eps) {
  kernels::QkNormRopeShape shape;
  shape.batch = x.size(0);
  shape.heads = x.size(1);
  shape.time = x.size(2);
  shape.half = x.size(3) / 2;
  shape.x = head_strides(x);
  shape.table = head_strides(cos.expand({x.size(0), 1, x.size(2), x.size(3)}));
  shape.eps = eps;
  return shape;
}

struct Normalised {
  torch::Tensor y, r;
};

Normalised normalise_and_rotate(const torch::Tensor& x, const torch::Tensor& g, const torch::Tensor& cos,
                                const torch::Tensor& sin, kernels::QkNormRopeShape shape) {
  Normalised result{empty_rows_like(x), torch::empty({shape.rows()}, g.options())};
  shape.out = head_strides(result.y);
  visit_kernel_types(x.scalar_type(), [&](auto element, auto compute, auto pointer) {
    using T = decltype(element);
    using Compute = decltype(compute);
    const T* xp = pointer(x);
    T* yp = pointer(result.y);
    const Compute* gp = g.data_ptr<Compute>();
    Compute* rp = result.r.data_ptr<Compute>();
    const float *c = cos.data_ptr<float>(), *s = sin.data_ptr<float>();
    if (x.is_cuda()) {
#ifdef INKSTONE_CUDA
      kernels::launch_qk_norm_rope(xp, gp, c, s, shape, yp, rp, KernelPlace(x.device()).stream());
#endif
      return;
    }
    at::parallel_for(0, shape.rows(), 64, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const auto p = kernels::place_of(shape, row);
        const T* x_row = xp + kernels::offset(shape.x, p);
        const int64_t table = kernels::offset(shape.table, p);
        const Compute r = kernels::inverse_rms(kernels::sum_of_squares_part(x_row, shape, 0, 1), shape.width(), shape.eps);
        kernels::norm_rope_pairs(x_row, gp, c + table, s + table, r, shape, 0, 1, yp + kernels::offset(shape.out, p));
        rp[row] = r;
      }
    });
  });
  return result;
}

struct Gradients {
  torch::Tensor x, weight_partials;
};

Gradients gradients(const torch::Tensor& x, const torch::Tensor& dy, const torch::Tensor& g, const torch::Tensor& r,
                    const torch::Tensor& cos, const torch::Tensor& sin, kernels::QkNormRopeShape shape) {
  Gradients result{empty_rows_like(x), torch::zeros({kernels::gradient_chunks(shape), x.size(3)}, g.options())};
  shape.grad = head_strides(dy);
  shape.grad_x = head_strides(result.x);
  visit_kernel_types(x.scalar_type(), [&](auto element, auto compute, auto pointer) {
    using T = decltype(element);
    using Compute = decltype(compute);
    const T *xp = pointer(x), *dyp = pointer(dy);
    T* dxp = pointer(result.x);
    const Compute *gp = g.data_ptr<Compute>(), *rp = r.data_ptr<Compute>();
    Compute* dgp = result.weight_partials.data_ptr<Compute>();
    const float *c = cos.data_ptr<float>(), *s = sin.data_ptr<float>();
    if (x.is_cuda()) {
#ifdef INKSTONE_CUDA
      kernels::launch_qk_norm_rope_backward(xp, dyp, gp, c, s, rp, shape, dxp, dgp, KernelPlace(x.device()).stream());
#endif
      return;
    }
    const int64_t per_chunk = kernels::rows_per_chunk(shape);
    at::parallel_for(0, kernels::gradient_chunks(shape), 1, [&](int64_t chunk_begin, int64_t chunk_end) {
      for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk)
        for (int64_t row = chunk * per_chunk; row < std::min(shape.rows(), (chunk + 1) * per_chunk); ++row) {
          const auto p = kernels::place_of(shape, row);
          const T* x_row = xp + kernels::offset(shape.x, p);
          const T* dy_row = dyp + kernels::offset(shape.grad, p);
          const int64_t table = kernels::offset(shape.table, p);
          const Compute dot = kernels::gradient_dot_part(x_row, dy_row, gp, c + table, s + table, shape, 0, 1);
          kernels::norm_rope_gradient_pairs(x_row, dy_row, gp, c + table, s + table, rp[row], dot, shape, 0, 1,
                                            dxp + kernels::offset(shape.grad_x, p), dgp + chunk * shape.width());
        }
    });
  });
  return result;
}

struct FusedQkNormRopeFunction : public torch::autograd::Function<FusedQkNormRopeFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight, double eps,
                               const torch::Tensor& cos, const torch::Tensor& sin) {
    const auto g = weight.to(kernel_compute_dtype(x.scalar_type())).contiguous();
    const auto out = normalise_and_rotate(x, g, cos, sin, shape_of(x, cos, eps));
    ctx->save_for_backward({x, weight, out.r, cos, sin});
    ctx->saved_data["eps"] = eps;
    return out.y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &r = saved[2], &cos = saved[3], &sin = saved[4];
    const auto g = weight.to(kernel_compute_dtype(x.scalar_type())).contiguous();
    const auto dy = with_unit_last_stride(grads[0].to(x.scalar_type()));
    const auto result = gradients(x, dy, g, r, cos, sin, shape_of(x, cos, ctx->saved_data["eps"].toDouble()));
    return {result.x, result.weight_partials.sum(0).to(weight.scalar_type()), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

bool fused_qk_norm_rope_applies(const torch::Tensor& x) {
  const auto dtype = x.scalar_type();
  return kernels_run_on(x) && x.dim() == 4 && x.size(3) % 2 == 0 && x.size(3) <= kernels::kQkNormRopeMaxWidth &&
         (dtype == torch::kFloat || dtype == torch::kBFloat16 || dtype == torch::kDouble);
}

torch::Tensor fused_qk_norm_rope(const torch::Tensor& x_in, const torch::Tensor& weight, double eps,
                                 const torch::Tensor& cos, const torch::Tensor& sin) {
  TORCH_CHECK(fused_qk_norm_rope_applies(x_in), "fused_qk_norm_rope: x must be a [B, H, T, h_d] float32, bf16 or ",
              "float64 tensor on a CPU or CUDA device with an even h_d of at most ", kernels::kQkNormRopeMaxWidth,
              ", got ", x_in.sizes(), " ", x_in.scalar_type());
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == x_in.size(3), "fused_qk_norm_rope: weight must be [h_d]");
  check_rope_tables("fused_qk_norm_rope", x_in, cos, sin);
  TORCH_CHECK(x_in.device() == weight.device(), "fused_qk_norm_rope: x and weight on one device");
  return FusedQkNormRopeFunction::apply(with_unit_last_stride(x_in), weight, eps, cos.contiguous(), sin.contiguous());
}

}  // namespace inkstone
