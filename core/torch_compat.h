// Every difference between libtorch 1.13 (Debian, CPU) and 2.x (pip wheel, CUDA) lives here.
#pragma once
#include <torch/torch.h>
#include <torch/version.h>
#include <ATen/autocast_mode.h>

#include "core/explicit_attention.h"

#include <sstream>
#include <string>
#include <type_traits>

#define INKSTONE_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace c10d {
class ProcessGroup;
class Backend;
}  // namespace c10d

namespace inkstone::compat {

// Query head h reads KV head ⌊h·H_kv/H⌋: each KV head repeated H/H_kv times in a row ([B, H_kv, T, D] -> [B, H, T, D]).
inline torch::Tensor repeat_kv_heads(const torch::Tensor& x, int64_t query_heads) {
  const int64_t group = query_heads / x.size(1);
  return group > 1 ? x.repeat_interleave(group, 1) : x;
}

// libtorch's scaled dot-product attention (2.x: flash / cuDNN / memory-efficient kernels where they apply, which
// keep O(T) per query for backward). Grouped queries without repeating K and V where libtorch can (2.5+).
#if INKSTONE_TORCH_AT_LEAST(2, 0)
inline torch::Tensor fused_sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const c10::optional<torch::Tensor>& mask, bool is_causal) {
#if INKSTONE_TORCH_AT_LEAST(2, 5)
  return at::scaled_dot_product_attention(q, k, v, mask, 0.0, is_causal, c10::nullopt,
                                          /*enable_gqa=*/q.size(1) != k.size(1));
#else
  return at::scaled_dot_product_attention(q, repeat_kv_heads(k, q.size(1)), repeat_kv_heads(v, q.size(1)), mask,
                                          0.0, is_causal);
#endif
}

// The attention sink as one more key and value, both zero, in slot 0 where every query sees it: its logit q·0 = 0
// joins each softmax's normaliser and its value adds nothing to the output, which is the off-by-one softmax
// exactly (docs/backbones.md, "Attention sink"), in a form the fused kernels compute. Under the causal rule a zero
// query in slot 0 keeps the problem square (libtorch aligns a non-square causal mask top-left): query slot t + 1
// then sees the sink and keys 0..t, and slot 0's output (0) is dropped.
inline torch::Tensor fused_sdpa_with_sink(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                          const c10::optional<torch::Tensor>& mask, bool is_causal) {
  const auto zero_slot = [](const torch::Tensor& x) {
    return torch::cat({torch::zeros_like(x.narrow(2, 0, 1)), x}, 2);
  };
  if (is_causal) return fused_sdpa(zero_slot(q), zero_slot(k), zero_slot(v), c10::nullopt, true).narrow(2, 1, q.size(2));
  c10::optional<torch::Tensor> with_sink;
  if (mask) {
    const auto sink_visible = torch::ones({mask->size(0), mask->size(1), mask->size(2), 1}, mask->options());
    with_sink = torch::cat({sink_visible, *mask}, -1);
  }
  return fused_sdpa(q, zero_slot(k), zero_slot(v), with_sink, false);
}
#endif

// Whether attention keeps O(T) per query for backward (libtorch 2.x's kernels) rather than every weight
// (explicit_attention, 1.13): what the memory plan counts.
#if INKSTONE_TORCH_AT_LEAST(2, 0)
constexpr bool kAttentionKeepsNoWeights = true;
#else
constexpr bool kAttentionKeepsNoWeights = false;
#endif

// Scaled dot-product attention of q [B, H, Tq, D] over k, v [B, H_kv, Tk, D] (H_kv divides H), optionally with the
// sink (the off-by-one softmax). 1.13's own op (private, returning (output, weights)) is only the composite math
// path, whose backward is slow on CPU: explicit_attention is the same forward with a faster backward, and it keeps
// B·H·Tq·Tk weights for backward.
inline torch::Tensor sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          const c10::optional<torch::Tensor>& mask, bool is_causal, bool sink = false) {
#if INKSTONE_TORCH_AT_LEAST(2, 0)
  return sink ? fused_sdpa_with_sink(q, k, v, mask, is_causal) : fused_sdpa(q, k, v, mask, is_causal);
#else
  return explicit_attention(q, repeat_kv_heads(k, q.size(1)), repeat_kv_heads(v, q.size(1)), mask, is_causal, sink);
#endif
}

// The type in which libtorch's memory observers receive allocator totals (int64_t in 1.13, size_t in 2.x), read
// off the observer interface itself.
template <typename>
struct ThirdParameter;
template <typename C, typename R, typename A, typename B, typename T, typename... Rest>
struct ThirdParameter<R (C::*)(A, B, T, Rest...)> {
  using type = T;
};
using AllocatorTotal = ThirdParameter<decltype(&c10::MemoryReportingInfoBase::reportMemoryUsage)>::type;

// bf16 autocast on CUDA (fp32 master weights stay in the module).
inline void set_cuda_autocast(bool enabled) {
#if INKSTONE_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(at::kCUDA, enabled);
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
#else
  at::autocast::set_enabled(enabled);
  at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
#endif
  if (!enabled) at::autocast::clear_cache();
}

inline bool cuda_autocast_enabled() {
#if INKSTONE_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(at::kCUDA);
#else
  return at::autocast::is_enabled();
#endif
}

// bf16 autocast on CUDA for one scope; nothing when `enabled` is false.
class CudaAutocastScope {
 public:
  explicit CudaAutocastScope(bool enabled) : enabled_(enabled) {
    if (enabled_) set_cuda_autocast(true);
  }
  ~CudaAutocastScope() {
    if (enabled_) set_cuda_autocast(false);
  }
  CudaAutocastScope(const CudaAutocastScope&) = delete;
  CudaAutocastScope& operator=(const CudaAutocastScope&) = delete;

 private:
  bool enabled_;
};

// The key of a parameter in torch::optim::Optimizer::state(): 1.13 keys by the TensorImpl pointer printed as
// text (what c10::guts::to_string streams), later releases by the pointer itself. Chosen by the map's key type,
// so no release number has to be guessed; tests/checkpoint/test_checkpoint.cpp checks it against a real step().
using OptimizerStateKey =
    std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;

namespace detail {
inline std::string optimizer_state_key(const torch::Tensor& p, std::string*) {
  std::ostringstream text;
  text << p.unsafeGetTensorImpl();
  return text.str();
}
inline void* optimizer_state_key(const torch::Tensor& p, void**) { return p.unsafeGetTensorImpl(); }
}  // namespace detail

inline OptimizerStateKey optimizer_state_key(const torch::Tensor& p) {
  return detail::optimizer_state_key(p, static_cast<OptimizerStateKey*>(nullptr));
}

// The c10d class the Gloo and NCCL process groups derive from: ProcessGroup in 1.13; from 2.0 a ProcessGroup
// dispatches to per-device Backends, and ProcessGroupGloo / ProcessGroupNCCL are Backends.
#if INKSTONE_TORCH_AT_LEAST(2, 0)
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif

// libtorch's multi-tensor fused AdamW kernel (aten::_fused_adamw_): one launch per parameter group in place of
// about ten per parameter. 2.1+ on CUDA, 2.4+ on the CPU too; 1.13 has none, and its callers take the
// per-parameter step. steps: float32 0-d tensors on the parameters' device, already counting this step. skip
// (undefined: none): a 0-d float32 tensor on that device, 1 or 0; at 1 the kernel leaves weights and moments
// untouched and the step counts are taken back, all on the device, so that the host never has to read it.
inline bool has_fused_adamw(torch::DeviceType device) {
  if (device == torch::kCUDA) return INKSTONE_TORCH_AT_LEAST(2, 1);
  if (device == torch::kCPU) return INKSTONE_TORCH_AT_LEAST(2, 4);
  return false;
}
inline void fused_adamw(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                        const std::vector<torch::Tensor>& exp_avgs, const std::vector<torch::Tensor>& exp_avg_sqs,
                        const std::vector<torch::Tensor>& steps, double lr, double beta1, double beta2,
                        double weight_decay, double eps, const torch::Tensor& skip) {
#if INKSTONE_TORCH_AT_LEAST(2, 1)
  const std::optional<torch::Tensor> found_inf = skip.defined() ? std::optional<torch::Tensor>(skip) : std::nullopt;
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, {}, steps, lr, beta1, beta2, weight_decay, eps,
                    /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/std::nullopt, found_inf);
  if (skip.defined()) at::_foreach_add_(steps, skip, /*alpha=*/-1);
#else
  TORCH_CHECK(false, "this libtorch has no fused AdamW kernel with an on-device skip");
#endif
}

// tensors[i] *= scale (a 0-d tensor on their device) for every i: one multi-tensor launch where libtorch has the
// tensor-scalar overload (2.1+), else one multiply each. Either way no host synchronisation.
inline void scale_all_(const std::vector<torch::Tensor>& tensors, const torch::Tensor& scale) {
#if INKSTONE_TORCH_AT_LEAST(2, 1)
  at::_foreach_mul_(tensors, scale);
#else
  for (const auto& t : tensors) t.mul_(scale.to(t.dtype()));
#endif
}

// RMSNorm in float32 (x and weight already float32): libtorch's fused kernel where it has one (2.4+, on CUDA one
// kernel each way), else the composite x · rsqrt(mean(x²) + ε) · g.
inline torch::Tensor rms_norm_fp32(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
#if INKSTONE_TORCH_AT_LEAST(2, 4)
  return at::rms_norm(x, {x.size(-1)}, weight, eps);
#else
  return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * weight;
#endif
}

inline std::string torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

}  // namespace inkstone::compat
