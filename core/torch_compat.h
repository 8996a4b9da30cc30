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

// Scaled dot-product attention on [B, H, T, D] tensors. 2.x dispatches to flash / memory-efficient kernels.
// 1.13's (a private op returning (output, weights)) is only the composite math path, whose backward is slow on
// CPU: explicit_attention is the same forward with a faster backward.
inline torch::Tensor sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          const c10::optional<torch::Tensor>& mask, bool is_causal) {
#if INKSTONE_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v, mask, 0.0, is_causal);
#else
  return explicit_attention(q, k, v, mask, is_causal);
#endif
}

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

// The key of a parameter in torch::optim::Optimizer::state(): 1.13 keys by the TensorImpl pointer printed as
// text (what c10::guts::to_string streams), later releases by the pointer itself. Chosen by the map's key type,
// so no release number has to be guessed; tests/core/test_checkpoint.cpp checks it against a real step().
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

inline std::string torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

}  // namespace inkstone::compat
