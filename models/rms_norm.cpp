#include "models/rms_norm.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "core/torch_compat.h"

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
    for (int lane = 0; lane < 8; ++lane)
      partial[lane] += static_cast<Acc>(a[j + lane]) * static_cast<Acc>(b[j + lane]);
  double sum = 0;
  for (Acc p : partial) sum += p;
  for (; j < n; ++j) sum += static_cast<double>(a[j]) * static_cast<double>(b[j]);
  return sum;
}

// Fixed row chunks for the weight gradient: each chunk sums its rows' dy ⊙ x̂ alone, so the result does not
// depend on the thread count.
constexpr int64_t kWeightGradChunks = 64;

// One pass per row and direction on contiguous CPU rows of width D:
//   forward   r = (Σ x² / D + ε)^(−1/2),  y = x r g
//   backward  dx = r (dy ⊙ g) − x r³ ⟨dy ⊙ g, x⟩ / D,  dg = Σ_rows dy ⊙ x r
// bf16 rows are computed in fp32 (acc_t) and keep only their bf16 input and an fp32 r per row for backward.
struct RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, const torch::Tensor& weight,
                               double eps) {
    const auto x = input.contiguous();
    const int64_t width = x.size(-1), rows = x.numel() / width;
    auto y = torch::empty_like(x);
    torch::Tensor rstd;
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "rms_norm_forward", [&] {
      using acc_t = at::opmath_type<scalar_t>;
      rstd = torch::empty({rows}, x.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
      const auto* xp = x.data_ptr<scalar_t>();
      const auto* g = weight.data_ptr<scalar_t>();
      auto* yp = y.data_ptr<scalar_t>();
      auto* rp = rstd.data_ptr<acc_t>();
      at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const scalar_t* row = xp + i * width;
          const auto r = static_cast<acc_t>(1.0 / std::sqrt(row_dot<acc_t>(row, row, width) / width + eps));
          rp[i] = r;
          for (int64_t j = 0; j < width; ++j)
            yp[i * width + j] = static_cast<scalar_t>(static_cast<acc_t>(row[j]) * r * static_cast<acc_t>(g[j]));
        }
      });
    });
    ctx->save_for_backward({x, weight, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &rstd = saved[2];
    const auto dy = grads[0].contiguous();
    const int64_t width = x.size(-1), rows = x.numel() / width;
    const int64_t chunks = std::min(rows, kWeightGradChunks), rows_per_chunk = (rows + chunks - 1) / chunks;
    auto dx = torch::empty_like(x);
    auto dg_partial = torch::zeros({chunks, width}, rstd.options());
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "rms_norm_backward", [&] {
      using acc_t = at::opmath_type<scalar_t>;
      const auto* xp = x.data_ptr<scalar_t>();
      const auto* g = weight.data_ptr<scalar_t>();
      const auto* rp = rstd.data_ptr<acc_t>();
      const auto* dyp = dy.data_ptr<scalar_t>();
      auto* dxp = dx.data_ptr<scalar_t>();
      auto* dgp = dg_partial.data_ptr<acc_t>();
      at::parallel_for(0, chunks, 1, [&](int64_t chunk_begin, int64_t chunk_end) {
        std::vector<acc_t> dy_g(width);
        for (int64_t c = chunk_begin; c < chunk_end; ++c) {
          acc_t* dg_row = dgp + c * width;
          for (int64_t i = c * rows_per_chunk; i < std::min(rows, (c + 1) * rows_per_chunk); ++i) {
            const scalar_t *x_row = xp + i * width, *dy_row = dyp + i * width;
            const acc_t r = rp[i];
            for (int64_t j = 0; j < width; ++j) dy_g[j] = static_cast<acc_t>(dy_row[j]) * static_cast<acc_t>(g[j]);
            const auto coefficient = static_cast<acc_t>(row_dot<acc_t>(dy_g.data(), x_row, width) * r * r * r / width);
            for (int64_t j = 0; j < width; ++j) {
              const auto x_j = static_cast<acc_t>(x_row[j]);
              dxp[i * width + j] = static_cast<scalar_t>(r * dy_g[j] - x_j * coefficient);
              dg_row[j] += static_cast<acc_t>(dy_row[j]) * x_j * r;
            }
          }
        }
      });
    });
    return {dx, dg_partial.sum(0).to(weight.scalar_type()), torch::Tensor()};
  }
};

bool fused_kernel_applies(const torch::Tensor& x, const torch::Tensor& weight) {
  const auto type = x.scalar_type();
  return x.device().is_cpu() && x.numel() > 0 && type == weight.scalar_type() &&
         (type == torch::kFloat || type == torch::kDouble || type == torch::kBFloat16) && weight.is_contiguous();
}

}  // namespace

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
