#include "core/explicit_attention.h"

#include <cmath>
#include <limits>

#include <torch/torch.h>

namespace inkstone {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// S = (q/√D) kᵀ + M, P = softmax(S), O = P v.  Backward: dV = Pᵀ dO, dP = dO vᵀ, dS = P ⊙ (dP − rowsum(dP ⊙ P)),
// dq = dS k / √D, dk = dSᵀ (q/√D): the products autograd forms for the same forward.
struct AttentionFunction : public torch::autograd::Function<AttentionFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const c10::optional<torch::Tensor>& additive_mask,
                               bool sink) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    const auto scaled_q = q * scale;
    auto scores = torch::matmul(scaled_q, k.transpose(-2, -1));
    if (additive_mask) scores.add_(*additive_mask);
    // The sink's logit 0 joins the normaliser: log(1 + Σ exp s) = logaddexp(logsumexp(s), 0).
    const auto probs =
        sink ? (scores - torch::logaddexp(torch::logsumexp(scores, -1, /*keepdim=*/true), torch::zeros({}, scores.options())))
                   .exp()
             : torch::softmax(scores, -1);
    ctx->save_for_backward({scaled_q, k, v, probs});
    ctx->saved_data["scale"] = scale;
    return torch::matmul(probs, v);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &scaled_q = saved[0], &k = saved[1], &v = saved[2], &probs = saved[3];
    const double scale = ctx->saved_data["scale"].toDouble();
    const auto grad_out = grads[0].contiguous();
    const auto grad_v = torch::matmul(probs.transpose(-2, -1), grad_out);
    const auto grad_probs = torch::matmul(grad_out, v.transpose(-2, -1)).contiguous();
    const auto grad_scores = torch::_softmax_backward_data(grad_probs, probs, -1, probs.scalar_type());
    const auto grad_q = torch::matmul(grad_scores, k).mul_(scale);
    const auto grad_k = torch::matmul(grad_scores.transpose(-2, -1), scaled_q);
    return {grad_q, grad_k, grad_v, torch::Tensor(), torch::Tensor()};  // mask and sink: not differentiable
  }
};

}  // namespace

torch::Tensor explicit_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const c10::optional<torch::Tensor>& allowed, bool is_causal, bool sink) {
  c10::optional<torch::Tensor> additive_mask;  // 0 where a query may attend, −inf elsewhere
  if (is_causal) {
    TORCH_CHECK(!allowed, "explicit_attention: is_causal with a mask tensor");
    const auto causal = torch::ones({q.size(-2), k.size(-2)}, q.options().dtype(torch::kBool)).tril();
    additive_mask = torch::zeros(causal.sizes(), q.options()).masked_fill_(causal.logical_not(), -INFINITY);
  } else if (allowed) {
    additive_mask = torch::zeros(allowed->sizes(), q.options()).masked_fill_(allowed->logical_not(), -INFINITY);
  }
  return AttentionFunction::apply(q, k, v, additive_mask, sink);
}

}  // namespace inkstone
