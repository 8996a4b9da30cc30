#include "models/rms_norm.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "core/kernels/kernel_types.h"
#include "core/torch_compat.h"
#include "models/kernels/rms_norm_row.h"

#ifdef INKSTONE_CUDA
#include "core/kernels/kernel_stream.h"
#include "models/kernels/rms_norm_cuda.h"
#endif

namespace inkstone {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Σ_j a_j b_j over one row with eight running sums in Acc, so the compiler can keep them in vector registers.
template <typename Acc, typename A, typename B>
double row_dot(const A* a, const B* b, int64_t n) {
  Acc partial[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int lane = 0; lane < 8; ++lane) partial[lane] += kernels::load(a[j + lane]) * kernels::load(b[j + lane]);
  double sum = 0;
  for (Acc p : partial) sum += p;
  for (; j < n; ++j) sum += static_cast<double>(kernels::load(a[j])) * static_cast<double>(kernels::load(b[j]));
  return sum;
}

// Fixed row chunks for the weight gradient: each chunk sums its rows' dy ⊙ x r alone, so the result does not
// depend on the thread count (on the GPU, kRmsNormGradientChunksOnGpu chunks, one thread block each).
constexpr int64_t kWeightGradChunksOnCpu = 64;

int64_t weight_grad_chunks(const torch::Tensor& x, int64_t rows) {
#ifdef INKSTONE_CUDA
  if (x.is_cuda()) return std::min(rows, kernels::kRmsNormGradientChunksOnGpu);
#endif
  return std::min(rows, kWeightGradChunksOnCpu);
}

// RMSNorm of `rows` (contiguous, width D) in one pass per row (models/kernels/rms_norm_row.h): the CUDA kernel on a
// GPU, the same coordinate code on the CPU. With a residual `branch` (same shape; undefined for the plain norm) the
// rows normalised are h = rows + branch, returned as `normalised`. bf16 rows are computed in float32; backward keeps
// only the normalised rows in their dtype and a float32 r per row.
struct NormalisedRows {
  torch::Tensor normalised;  // the rows the norm read: `rows`, or h
  torch::Tensor y;
  torch::Tensor rstd;  // r per row, in the compute dtype
};

NormalisedRows normalise_rows(const torch::Tensor& rows, const torch::Tensor& branch, const torch::Tensor& weight,
                              double eps) {
  const kernels::RmsNormShape shape{rows.numel() / rows.size(-1), rows.size(-1), eps};
  NormalisedRows out{branch.defined() ? torch::empty_like(rows) : rows, torch::empty_like(rows),
                     torch::empty({shape.rows}, rows.options().dtype(kernel_compute_dtype(rows.scalar_type())))};
  visit_kernel_types(rows.scalar_type(), [&](auto element, auto compute, auto pointer) {
    using T = decltype(element);
    using Compute = decltype(compute);
    const T *xp = pointer(rows), *g = pointer(weight), *op = branch.defined() ? pointer(branch) : nullptr;
    T *hp = pointer(out.normalised), *yp = pointer(out.y);
    Compute* rp = out.rstd.template data_ptr<Compute>();
    if (rows.is_cuda()) {
#ifdef INKSTONE_CUDA
      kernels::launch_rms_norm(xp, op, hp, g, shape, yp, rp, KernelPlace(rows.device()).stream());
#endif
      return;
    }
    at::parallel_for(0, shape.rows, 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const T* row = xp + i * shape.width;
        if (op) {
          T* sum_row = hp + i * shape.width;
          for (int64_t j = 0; j < shape.width; ++j) kernels::residual_sum_at(row, op + i * shape.width, j, sum_row);
          row = sum_row;
        }
        const auto r =
            static_cast<Compute>(kernels::inverse_rms(row_dot<Compute>(row, row, shape.width), shape.width, eps));
        rp[i] = r;
        for (int64_t j = 0; j < shape.width; ++j) kernels::normalise_at(row, g, r, j, yp + i * shape.width);
      }
    });
  });
  return out;
}

// The gradients of RMSNorm with respect to the rows it normalised (plus the stream's gradient `residual_grad` where
// defined: the fused add's h) and to the gain.
std::pair<torch::Tensor, torch::Tensor> normalise_rows_backward(const torch::Tensor& x, const torch::Tensor& grad_y,
                                                                const torch::Tensor& weight, const torch::Tensor& rstd,
                                                                const torch::Tensor& residual_grad, double eps) {
  const auto dy = grad_y.defined() ? grad_y.to(x.scalar_type()).contiguous() : torch::zeros_like(x);
  const auto dh = residual_grad.defined() ? residual_grad.to(x.scalar_type()).contiguous() : residual_grad;
  const kernels::RmsNormShape shape{x.numel() / x.size(-1), x.size(-1), eps};
  const int64_t chunks = weight_grad_chunks(x, shape.rows), rows_per_chunk = (shape.rows + chunks - 1) / chunks;
  auto dx = torch::empty_like(x);
  auto dg_partial = torch::zeros({chunks, shape.width}, rstd.options());
  visit_kernel_types(x.scalar_type(), [&](auto element, auto compute, auto pointer) {
    using T = decltype(element);
    using Compute = decltype(compute);
    const T *xp = pointer(x), *g = pointer(weight), *dyp = pointer(dy), *dhp = dh.defined() ? pointer(dh) : nullptr;
    T* dxp = pointer(dx);
    const Compute* rp = rstd.template data_ptr<Compute>();
    Compute* dgp = dg_partial.template data_ptr<Compute>();
    if (x.is_cuda()) {
#ifdef INKSTONE_CUDA
      kernels::launch_rms_norm_backward(xp, dyp, g, rp, dhp, shape, dxp, dgp, KernelPlace(x.device()).stream());
#endif
      return;
    }
    at::parallel_for(0, chunks, 1, [&](int64_t chunk_begin, int64_t chunk_end) {
      std::vector<Compute> dy_g(shape.width);
      for (int64_t c = chunk_begin; c < chunk_end; ++c) {
        Compute* dg_row = dgp + c * shape.width;
        for (int64_t i = c * rows_per_chunk; i < std::min(shape.rows, (c + 1) * rows_per_chunk); ++i) {
          const T *x_row = xp + i * shape.width, *dy_row = dyp + i * shape.width;
          const T* dh_row = dhp ? dhp + i * shape.width : nullptr;
          const Compute r = rp[i];
          for (int64_t j = 0; j < shape.width; ++j) dy_g[j] = kernels::load(dy_row[j]) * kernels::load(g[j]);
          const auto coefficient = static_cast<Compute>(row_dot<Compute>(dy_g.data(), x_row, shape.width) * r * r *
                                                        r / shape.width);
          for (int64_t j = 0; j < shape.width; ++j) {
            kernels::input_gradient_at(x_row, dy_row, g, r, coefficient, dh_row, j, dxp + i * shape.width);
            dg_row[j] += kernels::gain_gradient_term(x_row, dy_row, r, j);
          }
        }
      }
    });
  });
  return {dx, dg_partial.sum(0).to(weight.scalar_type())};
}

struct RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, const torch::Tensor& weight,
                               double eps) {
    auto out = normalise_rows(input.contiguous(), {}, weight, eps);
    ctx->save_for_backward({out.normalised, weight, out.rstd});
    ctx->saved_data["eps"] = eps;
    return out.y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [dx, dg] =
        normalise_rows_backward(saved[0], grads[0], saved[1], saved[2], {}, ctx->saved_data["eps"].toDouble());
    return {dx, dg, torch::Tensor()};
  }
};

// h = x + o and RMSNorm(h) as one node: h goes on along the stream and into the norm, so backward receives dh and
// dy and returns dh + the norm's dx for both summands (docs/kernels.md, "The residual add fused with RMSNorm").
struct AddRmsNormFunction : public torch::autograd::Function<AddRmsNormFunction> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& branch,
                               const torch::Tensor& weight, double eps) {
    auto out = normalise_rows(x.contiguous(), branch.contiguous(), weight, eps);
    ctx->save_for_backward({out.normalised, weight, out.rstd});
    ctx->saved_data["eps"] = eps;
    return {out.normalised, out.y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [dx, dg] =
        normalise_rows_backward(saved[0], grads[1], saved[1], saved[2], grads[0], ctx->saved_data["eps"].toDouble());
    return {dx, dx, dg, torch::Tensor()};
  }
};

bool fused_kernel_applies(const torch::Tensor& x, const torch::Tensor& weight) {
  const auto type = x.scalar_type();
  return kernels_run_on(x) && x.numel() > 0 && type == weight.scalar_type() &&
         (type == torch::kFloat || type == torch::kDouble || type == torch::kBFloat16) && weight.is_contiguous();
}

}  // namespace

ResidualSumAndNorm add_rms_norm(const torch::Tensor& x, const torch::Tensor& branch, const torch::Tensor& weight,
                                double eps) {
  if (fused_kernel_applies(x, weight) && branch.sizes() == x.sizes() && branch.scalar_type() == x.scalar_type() &&
      branch.device() == x.device()) {
    const auto out = AddRmsNormFunction::apply(x, branch, weight, eps);
    return {out[0], out[1]};
  }
  auto sum = x + branch;
  auto normed = rms_norm(sum, weight, eps);
  return {std::move(sum), std::move(normed)};
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  if (fused_kernel_applies(x, weight)) return RmsNormFunction::apply(x, weight, eps);
  // The same formula in fp32 (bf16 loses the mean of squares); other devices, and mixed dtypes (autocast).
  return compat::rms_norm_fp32(x.to(torch::kFloat), weight.to(torch::kFloat), eps).to(x.scalar_type());
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) { return rms_norm(x, weight, eps_); }

}  // namespace inkstone
