#include "models/joint_linear.h"

#include <torch/torch.h>

#include "core/torch_compat.h"

namespace inkstone {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The product's dtype: bf16 under CUDA autocast (as torch::linear would take it there), else x's.
torch::ScalarType product_dtype(const torch::Tensor& x) {
  return x.is_cuda() && compat::cuda_autocast_enabled() ? torch::kBFloat16 : x.scalar_type();
}

torch::Tensor joined(torch::TensorList parts, torch::ScalarType dtype) {
  return (parts.size() == 1 ? parts[0] : torch::cat(parts)).to(dtype);
}

// y = x Wᵀ + b with W = [W_0; W_1; ...] formed for the product and dropped after it:
//   dx = dy W,  dW = dyᵀ x (split by rows into each dW_i),  db = Σ_rows dy (split likewise).
struct JointLinearFunction : public torch::autograd::Function<JointLinearFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, torch::TensorList weights,
                               torch::TensorList biases) {
    const auto dtype = product_dtype(x);
    const auto x_compute = x.to(dtype);
    const auto product = torch::linear(x_compute, joined(weights, dtype),
                                       biases.empty() ? torch::Tensor() : joined(biases, dtype));
    std::vector<torch::Tensor> saved{x_compute};
    saved.insert(saved.end(), weights.begin(), weights.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["has_bias"] = !biases.empty();
    return product;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const std::vector<torch::Tensor> weights(saved.begin() + 1, saved.end());
    const auto dtype = x.scalar_type();
    const auto dy = grads[0].to(dtype);
    const auto dy_rows = dy.reshape({-1, dy.size(-1)});
    // Inputs in order: x, the weights, the biases. Frozen ones (LoRA's base, models/lora.h) get no gradient, and
    // with every weight frozen the weight product is skipped.
    const size_t n = weights.size();
    const auto needed = [&](size_t input) { return ctx->needs_input_grad(input); };
    variable_list result;
    const auto x_dtype = static_cast<torch::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    result.push_back(needed(0) ? dy.matmul(joined(weights, dtype)).to(x_dtype) : torch::Tensor());
    std::vector<int64_t> widths;
    bool any_weight = false;
    for (size_t i = 0; i < n; ++i) {
      widths.push_back(weights[i].size(0));
      any_weight = any_weight || needed(1 + i);
    }
    std::vector<torch::Tensor> dw(n);
    if (any_weight) dw = dy_rows.t().mm(x.reshape({-1, x.size(-1)})).split_with_sizes(widths);
    for (size_t i = 0; i < n; ++i)
      result.push_back(needed(1 + i) ? dw[i].to(weights[i].scalar_type()) : torch::Tensor());
    if (ctx->saved_data["has_bias"].toBool()) {
      const auto db = dy_rows.sum(0).split_with_sizes(widths);
      for (size_t i = 0; i < n; ++i)
        result.push_back(needed(1 + n + i) ? db[i].to(weights[i].scalar_type()) : torch::Tensor());
    }
    return result;
  }
};

}  // namespace

torch::Tensor joint_linear(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                        const std::vector<torch::Tensor>& biases) {
  TORCH_CHECK(biases.empty() || biases.size() == weights.size(), "joint_linear: one bias per weight or none");
  const int64_t features = x.size(-1);
  // Under gradient the joint form is taken at any row count: the row count can differ between data-parallel ranks,
  // and the two forms hand the weights' gradients to the gradient buckets in different orders.
  if (!torch::GradMode::is_enabled() && x.numel() < features * features) {
    std::vector<torch::Tensor> separate;
    for (size_t i = 0; i < weights.size(); ++i)
      separate.push_back(torch::linear(x, weights[i], biases.empty() ? torch::Tensor() : biases[i]));
    return torch::cat(separate, -1);
  }
  // As TensorLists, so that autograd sees every weight and bias as an input.
  return JointLinearFunction::apply(x, torch::TensorList(weights), torch::TensorList(biases));
}

}  // namespace inkstone
