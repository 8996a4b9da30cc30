// The routing kernels' launchers, declared without libtorch so that nvcc compiles the kernel file alone.
#pragma once
#include <cstdint>

#include "models/kernels/route_sources_row.h"

namespace inkstone::kernels {

// One block per position; `sources` and `grad_sources` are device arrays of S pointers to [P, d] rows; `weights`
// [P, S H] and `inv_rms` [P, S] are written by the forward and read by the backward; grad_query and grad_gain [d]
// (float64, zeroed by the caller) are accumulated atomically.
void launch_route_forward(const float* const* sources, const float* query, const float* gain, const RouteShape& shape,
                          float* out, double* weights, double* inv_rms, void* stream);
void launch_route_forward(const double* const* sources, const double* query, const double* gain, const RouteShape& shape,
                          double* out, double* weights, double* inv_rms, void* stream);
void launch_route_backward(const float* const* sources, const float* query, const float* gain, const float* grad_out,
                           const RouteShape& shape, const double* weights, const double* inv_rms,
                           float* const* grad_sources, double* grad_query, double* grad_gain, void* stream);
void launch_route_backward(const double* const* sources, const double* query, const double* gain, const double* grad_out,
                           const RouteShape& shape, const double* weights, const double* inv_rms,
                           double* const* grad_sources, double* grad_query, double* grad_gain, void* stream);

}  // namespace inkstone::kernels
