#include "models/kernels/route_sources.h"

#include <vector>

#include <ATen/Dispatch.h>
#include <torch/torch.h>

#include "core/host_copy.h"
#include "models/kernels/route_sources_row.h"

#ifdef INKSTONE_CUDA
#include "core/kernels/kernel_stream.h"
#include "models/kernels/route_sources_cuda.h"
#endif

namespace inkstone {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

kernels::RouteShape shape_of(at::TensorList sources, int64_t heads, double eps) {
  kernels::RouteShape shape;
  shape.sources = static_cast<int64_t>(sources.size());
  shape.width = sources[0].size(-1);
  shape.heads = heads;
  shape.positions = sources[0].numel() / shape.width;
  shape.eps = eps;
  return shape;
}

// The CPU twin's per-position scratch.
struct CpuScratch {
  int64_t block;  // S H
  std::vector<double> buffer;
  explicit CpuScratch(const kernels::RouteShape& s)
      : block(s.sources * s.heads), buffer(static_cast<size_t>(3 * block + s.sources)) {}
  kernels::RouteScratch view() {
    double* base = buffer.data();
    return {base, base + block, base + 2 * block, base + 3 * block};
  }
};

// The data pointers of the tensors, as a host vector; for the GPU also copied into a device array the kernel reads.
template <typename Pointer>
struct PointerArray {
  std::vector<Pointer> host;
  torch::Tensor device;
  PointerArray(const std::vector<torch::Tensor>& tensors, const torch::Device& on) {
    for (const auto& t : tensors) host.push_back(static_cast<Pointer>(t.data_ptr()));
    if (!on.is_cuda()) return;
    std::vector<int64_t> addresses;
    for (Pointer p : host) addresses.push_back(reinterpret_cast<int64_t>(p));
    device = to_device_async(torch::tensor(addresses, torch::kLong), on);  // per call: no wait
  }
  const Pointer* get() const {
    return device.defined() ? reinterpret_cast<const Pointer*>(device.data_ptr<int64_t>()) : host.data();
  }
};

std::vector<torch::Tensor> contiguous_rows(at::TensorList sources, torch::ScalarType dtype) {
  std::vector<torch::Tensor> rows;
  for (const auto& s : sources) rows.push_back(s.to(dtype).contiguous());
  return rows;
}

struct FusedRouteFunction : public torch::autograd::Function<FusedRouteFunction> {
  static torch::Tensor forward(AutogradContext* ctx, at::TensorList sources_in, const torch::Tensor& query_in,
                               const torch::Tensor& gain_in, double eps, int64_t heads) {
    const auto dtype = sources_in[0].scalar_type();
    const auto sources = contiguous_rows(sources_in, dtype);
    const auto query = query_in.to(dtype).contiguous();
    const auto gain = gain_in.to(dtype).contiguous();
    const auto shape = shape_of(sources, heads, eps);
    const auto device = sources[0].device();
    auto out = torch::empty_like(sources[0]);
    const auto stats = sources[0].options().dtype(torch::kDouble);
    auto weights = torch::empty({shape.positions, shape.sources * heads}, stats);
    auto inv_rms = torch::empty({shape.positions, shape.sources}, stats);
    AT_DISPATCH_FLOATING_TYPES(dtype, "fused_route_forward", [&] {
      const PointerArray<const scalar_t*> rows(sources, device);
      if (device.is_cuda()) {
#ifdef INKSTONE_CUDA
        kernels::launch_route_forward(rows.get(), query.data_ptr<scalar_t>(), gain.data_ptr<scalar_t>(), shape,
                                      out.data_ptr<scalar_t>(), weights.data_ptr<double>(),
                                      inv_rms.data_ptr<double>(), KernelPlace(out.device()).stream());
#endif
        return;
      }
      CpuScratch scratch(shape);
      kernels::SerialRouteLanes lanes;
      for (int64_t p = 0; p < shape.positions; ++p)
        kernels::route_forward_row(rows.get(), query.data_ptr<scalar_t>(), gain.data_ptr<scalar_t>(), shape, p,
                                   out.data_ptr<scalar_t>() + p * shape.width,
                                   weights.data_ptr<double>() + p * shape.sources * heads,
                                   inv_rms.data_ptr<double>() + p * shape.sources, scratch.view(), lanes);
    });
    std::vector<torch::Tensor> saved = sources;
    saved.insert(saved.end(), {query, gain, weights, inv_rms});
    ctx->save_for_backward(saved);
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["query_dtype"] = static_cast<int64_t>(query_in.scalar_type());
    ctx->saved_data["gain_dtype"] = static_cast<int64_t>(gain_in.scalar_type());
    return out;
  }

  // One gradient per source, then the query's and the gain's, then none for eps and heads.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto inv_rms = saved.back();
    const auto weights = saved[saved.size() - 2];
    const auto gain = saved[saved.size() - 3];
    const auto query = saved[saved.size() - 4];
    const std::vector<torch::Tensor> sources(saved.begin(), saved.end() - 4);
    const auto shape = shape_of(sources, ctx->saved_data["heads"].toInt(), ctx->saved_data["eps"].toDouble());
    const auto dtype = sources[0].scalar_type();
    const auto device = sources[0].device();
    const auto grad_out = grads[0].to(dtype).contiguous();
    std::vector<torch::Tensor> grad_sources;
    for (const auto& s : sources) grad_sources.push_back(torch::empty_like(s));
    auto grad_query = torch::zeros({shape.width}, sources[0].options().dtype(torch::kDouble));
    auto grad_gain = torch::zeros_like(grad_query);
    AT_DISPATCH_FLOATING_TYPES(dtype, "fused_route_backward", [&] {
      const PointerArray<const scalar_t*> rows(sources, device);
      const PointerArray<scalar_t*> grad_rows(grad_sources, device);
      if (device.is_cuda()) {
#ifdef INKSTONE_CUDA
        kernels::launch_route_backward(rows.get(), query.data_ptr<scalar_t>(), gain.data_ptr<scalar_t>(),
                                       grad_out.data_ptr<scalar_t>(), shape, weights.data_ptr<double>(),
                                       inv_rms.data_ptr<double>(), grad_rows.get(), grad_query.data_ptr<double>(),
                                       grad_gain.data_ptr<double>(), KernelPlace(grad_out.device()).stream());
#endif
        return;
      }
      CpuScratch scratch(shape);
      kernels::SerialRouteLanes lanes;
      for (int64_t p = 0; p < shape.positions; ++p)
        kernels::route_backward_row(rows.get(), query.data_ptr<scalar_t>(), gain.data_ptr<scalar_t>(),
                                    grad_out.data_ptr<scalar_t>(), shape, p,
                                    weights.data_ptr<double>() + p * shape.sources * shape.heads,
                                    inv_rms.data_ptr<double>() + p * shape.sources, grad_rows.get(),
                                    grad_query.data_ptr<double>(), grad_gain.data_ptr<double>(), scratch.view(), lanes);
    });
    variable_list out(grad_sources.begin(), grad_sources.end());
    out.push_back(grad_query.to(static_cast<torch::ScalarType>(ctx->saved_data["query_dtype"].toInt())));
    out.push_back(grad_gain.to(static_cast<torch::ScalarType>(ctx->saved_data["gain_dtype"].toInt())));
    out.emplace_back();
    out.emplace_back();
    return out;
  }
};

}  // namespace

torch::Tensor fused_route_sources(const std::vector<torch::Tensor>& sources, const torch::Tensor& query,
                                  const torch::Tensor& key_gain, double norm_eps, int64_t heads) {
  TORCH_CHECK(!sources.empty() && sources[0].size(-1) % heads == 0, "fused_route_sources: sources [..., d], H | d");
  const auto dtype = sources[0].scalar_type();
  TORCH_CHECK(dtype == torch::kFloat || dtype == torch::kDouble, "fused_route_sources: float32 or float64 sources");
  for (const auto& s : sources)
    TORCH_CHECK(s.sizes() == sources[0].sizes() && s.scalar_type() == dtype && s.device() == sources[0].device(),
                "fused_route_sources: sources of one shape, dtype and device");
#ifndef INKSTONE_CUDA
  TORCH_CHECK(!sources[0].is_cuda(), "fused_route_sources: this build has no CUDA kernels");
#endif
  // As a TensorList each source is an input of its own (a std::vector would pass as one opaque argument).
  return FusedRouteFunction::apply(at::TensorList(sources), query, key_gain, norm_eps, heads);
}

}  // namespace inkstone
