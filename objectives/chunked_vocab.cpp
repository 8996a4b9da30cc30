// The gradient of one chunk, derived once (docs/training.md, "The vocabulary loss in chunks"). With raw logits
// R = H Wᵀ (the head's dtype) and the terms built from L = float(R), for an upstream gradient G of the terms:
//   ∂/∂L = autograd through the chunk's terms only (one chunk's graph alive),
//   ∂/∂H = (∂/∂L) W,  ∂/∂W = Σ_chunks (∂/∂L)ᵀ H,
// the products in R's dtype, as the composite's linear backward forms them; ∂/∂W sums over chunks in float32.
#include "objectives/chunked_vocab.h"

#include <algorithm>

#include <torch/autograd.h>
#include <torch/torch.h>

#include "core/host_copy.h"
#include "core/torch_compat.h"

namespace inkstone {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The logits the terms read: float32 from a bf16 / fp16 / float32 head, float64 kept (the oracle tests).
torch::Tensor wide_logits(const torch::Tensor& raw) {
  return raw.scalar_type() == torch::kDouble ? raw : raw.to(torch::kFloat);
}

// Gradient accumulators; an undefined one is not formed (its input needs none).
struct HeadGradients {
  torch::Tensor hidden;  // [N, d], hidden's dtype
  torch::Tensor weight;  // [V, d] float32
};

HeadGradients gradients_for(const torch::Tensor& hidden, const torch::Tensor& weight) {
  HeadGradients grads;
  if (hidden.requires_grad()) grads.hidden = torch::empty_like(hidden);
  if (weight.requires_grad()) {
    const auto wide = weight.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
    grads.weight = torch::zeros(weight.sizes(), weight.options().dtype(wide));
  }
  return grads;
}

// The terms of rows [begin, begin + n); with `grads`, also the gradient of Σ upstream ⊙ terms added there.
torch::Tensor run_chunk(const torch::Tensor& hidden, const torch::Tensor& weight, const ChunkTermsFn& fn,
                        int64_t begin, int64_t n, const torch::Tensor& upstream, HeadGradients* grads) {
  const auto h = hidden.narrow(0, begin, n);
  torch::Tensor raw;
  {
    torch::NoGradGuard no_grad;
    raw = torch::mm(h, weight.t());
  }
  if (!grads) {
    torch::NoGradGuard no_grad;
    return fn(wide_logits(raw), begin);
  }
  torch::AutoGradMode grad_on(true);
  const auto logits = wide_logits(raw).detach().requires_grad_(true);
  const auto terms = fn(logits, begin);
  const auto found = torch::autograd::grad({terms}, {logits}, {upstream.expand_as(terms).contiguous()},
                                           /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
  if (!found[0].defined()) return terms.detach();
  torch::NoGradGuard no_grad;
  const auto d_raw = found[0].to(raw.scalar_type());
  if (grads->hidden.defined()) grads->hidden.narrow(0, begin, n).copy_(torch::mm(d_raw, weight));
  if (grads->weight.defined()) {
    if (d_raw.scalar_type() == grads->weight.scalar_type() && h.scalar_type() == grads->weight.scalar_type())
      grads->weight.addmm_(d_raw.t(), h);
    else
      grads->weight.add_(torch::mm(d_raw.t(), h));
  }
  return terms.detach();
}

// Every chunk's terms, [N, K]; with `grads`, their gradients for `upstream` ([1, K] for every row, or [N, K]).
torch::Tensor run_chunks(const torch::Tensor& hidden, const torch::Tensor& weight, const ChunkTermsFn& fn,
                         int64_t chunk_rows, const torch::Tensor& upstream, HeadGradients* grads) {
  TORCH_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
              "chunked vocabulary loss: hidden [N, d] and weight [V, d]");
  TORCH_CHECK(chunk_rows > 0, "chunked vocabulary loss: chunk_rows must be positive");
  const int64_t rows = hidden.size(0);
  std::vector<torch::Tensor> parts;
  for (int64_t begin = 0; begin < rows; begin += chunk_rows) {
    const int64_t n = std::min(chunk_rows, rows - begin);
    const auto up = upstream.defined() && upstream.size(0) == rows ? upstream.narrow(0, begin, n) : upstream;
    parts.push_back(run_chunk(hidden, weight, fn, begin, n, up, grads));
  }
  TORCH_CHECK(!parts.empty(), "chunked vocabulary loss: no rows");
  return parts.size() == 1 ? parts[0] : torch::cat(parts);
}

// The caller's terms function travels to backward in a capsule (saved_data holds IValues only).
struct TermsHolder : torch::CustomClassHolder {
  explicit TermsHolder(ChunkTermsFn f) : fn(std::move(f)) {}
  ChunkTermsFn fn;
};

// An accumulated gradient in its input's dtype (undefined stays undefined).
torch::Tensor in_dtype_of(const torch::Tensor& grad, const torch::Tensor& input) {
  return grad.defined() ? grad.to(input.scalar_type()) : torch::Tensor();
}

// Σ_k c_k · (Σ_rows terms[row, k]): column by column, so a loss of one column with coefficient 1 is exactly that
// column's sum (the metric the objective reports beside it).
torch::Tensor weighted_sum(const torch::Tensor& terms, const std::vector<double>& coefficients) {
  TORCH_CHECK(terms.size(1) == static_cast<int64_t>(coefficients.size()), "chunked vocabulary loss: ",
              terms.size(1), " terms per row but ", coefficients.size(), " coefficients");
  auto total = torch::zeros({}, terms.options());
  for (size_t k = 0; k < coefficients.size(); ++k) {
    if (coefficients[k] == 0.0) continue;
    const auto column = terms.select(1, static_cast<int64_t>(k)).sum();
    total = total + (coefficients[k] == 1.0 ? column : column * coefficients[k]);
  }
  return total;
}

// Forms every chunk's gradient in forward (the loss is a fixed weighted sum of the terms); backward scales them.
struct ChunkedLossFunction : torch::autograd::Function<ChunkedLossFunction> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const ChunkTermsFn* fn, const std::vector<double>& coefficients,
                               int64_t chunk_rows) {
    auto grads = gradients_for(hidden, weight);
    const auto upstream =
        to_device_async(torch::tensor(coefficients, torch::kDouble)
                            .to(hidden.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat),
                        hidden.device())
            .unsqueeze(0);  // [1, K]: the same for every row
    const auto terms = run_chunks(hidden, weight, *fn, chunk_rows, upstream, &grads);
    const auto loss = weighted_sum(terms, coefficients);
    ctx->save_for_backward({grads.hidden, grads.weight, hidden, weight});
    ctx->mark_non_differentiable({terms});
    return {loss, terms};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& g = grad_outputs[0];
    const auto times_g = [&](const torch::Tensor& grad) { return grad.defined() ? grad * g : grad; };
    return {in_dtype_of(times_g(saved[0]), saved[2]), in_dtype_of(times_g(saved[1]), saved[3]), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

// Keeps only the inputs; backward recomputes each chunk with the upstream gradient of its rows.
struct ChunkedTermsFunction : torch::autograd::Function<ChunkedTermsFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const ChunkTermsFn* fn, int64_t chunk_rows) {
    ctx->save_for_backward({hidden, weight});
    ctx->saved_data["terms"] = c10::IValue::make_capsule(c10::make_intrusive<TermsHolder>(*fn));
    ctx->saved_data["chunk_rows"] = chunk_rows;
    // The backward pass runs on autograd's thread, where the forward's autocast state is not set.
    ctx->saved_data["autocast"] = compat::cuda_autocast_enabled();
    return run_chunks(hidden, weight, *fn, chunk_rows, {}, nullptr);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& hidden = saved[0];
    const auto& weight = saved[1];
    const auto holder = ctx->saved_data["terms"].toCapsule();
    const auto& fn = static_cast<TermsHolder*>(holder.get())->fn;
    const bool autocast = ctx->saved_data["autocast"].toBool() && !compat::cuda_autocast_enabled();
    compat::CudaAutocastScope scope(autocast);
    auto grads = gradients_for(hidden, weight);
    run_chunks(hidden, weight, fn, ctx->saved_data["chunk_rows"].toInt(), grad_outputs[0], &grads);
    return {in_dtype_of(grads.hidden, hidden), in_dtype_of(grads.weight, weight), torch::Tensor(), torch::Tensor()};
  }
};

bool needs_gradient(const torch::Tensor& hidden, const torch::Tensor& weight) {
  return torch::GradMode::is_enabled() && (hidden.requires_grad() || weight.requires_grad());
}

}  // namespace

int64_t chunk_rows_for(int64_t vocab, int64_t budget_mib, bool cuda) {
  const int64_t budget_bytes = (budget_mib > 0 ? budget_mib : cuda ? 256 : 16) * 1024 * 1024;
  return std::max<int64_t>(1, budget_bytes / (4 * std::max<int64_t>(1, vocab)));
}

ChunkedLoss chunked_vocab_loss(const torch::Tensor& hidden, const torch::Tensor& weight, const ChunkTermsFn& terms,
                               const std::vector<double>& coefficients, int64_t chunk_rows) {
  if (!needs_gradient(hidden, weight)) {
    auto all = run_chunks(hidden, weight, terms, chunk_rows, {}, nullptr);
    return {weighted_sum(all, coefficients), all};
  }
  const auto out = ChunkedLossFunction::apply(hidden, weight, &terms, coefficients, chunk_rows);
  return {out[0], out[1]};
}

torch::Tensor chunked_vocab_terms(const torch::Tensor& hidden, const torch::Tensor& weight, const ChunkTermsFn& terms,
                                  int64_t chunk_rows) {
  if (!needs_gradient(hidden, weight)) return run_chunks(hidden, weight, terms, chunk_rows, {}, nullptr);
  return ChunkedTermsFunction::apply(hidden, weight, &terms, chunk_rows);
}

}  // namespace inkstone
