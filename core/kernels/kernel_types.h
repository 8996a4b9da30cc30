// The element types the kernels (docs/kernels.md) are instantiated for, chosen from a tensor's dtype on the libtorch
// side: float32 rows computed in float, bf16 rows (as their bits) computed in float, float64 rows in double.
#pragma once
#include <torch/types.h>

#include "core/kernels/bf16_bits.h"

namespace inkstone {

// Calls visit(T{}, Compute{}, pointer) where pointer(tensor) returns the tensor's data as T*. Other dtypes are the
// caller's to refuse before it gets here.
template <typename Visit>
void visit_kernel_types(torch::ScalarType dtype, Visit visit) {
  switch (dtype) {
    case torch::kFloat:
      visit(float{}, float{}, [](const torch::Tensor& t) { return t.data_ptr<float>(); });
      break;
    case torch::kDouble:
      visit(double{}, double{}, [](const torch::Tensor& t) { return t.data_ptr<double>(); });
      break;
    case torch::kBFloat16:
      visit(kernels::Bf16Bits{}, float{},
            [](const torch::Tensor& t) { return reinterpret_cast<kernels::Bf16Bits*>(t.data_ptr<at::BFloat16>()); });
      break;
    default:
      TORCH_CHECK(false, "the kernels take float32, bf16 or float64, not ", dtype);
  }
}

// Whether the kernels run on t's device in this build: the CPU always, a CUDA GPU where the build has them.
inline bool kernels_run_on(const torch::Tensor& t) {
#ifdef INKSTONE_CUDA
  return t.is_cpu() || t.is_cuda();
#else
  return t.is_cpu();
#endif
}

// The compute precision's dtype for rows of `dtype`.
inline torch::ScalarType kernel_compute_dtype(torch::ScalarType dtype) {
  return dtype == torch::kDouble ? torch::kDouble : torch::kFloat;
}

}  // namespace inkstone
