#include "sampler/kernels/diffusion_step.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#ifdef INKSTONE_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "sampler/kernels/diffusion_step_cuda.h"
#endif

namespace inkstone {
namespace {

void check_shapes(const torch::Tensor& logits, const torch::Tensor& z, const torch::Tensor& support,
                  const torch::Tensor& sequences) {
  TORCH_CHECK(logits.dim() == 3 && (logits.scalar_type() == torch::kFloat || logits.scalar_type() == torch::kBFloat16),
              "fused_diffusion_step: logits must be [B, L, V] float32 or bfloat16");
  TORCH_CHECK(z.dim() == 2 && z.size(0) == logits.size(0) && z.size(1) == logits.size(1) &&
                  z.scalar_type() == torch::kLong,
              "fused_diffusion_step: z must be [B, L] int64 matching the logits");
  TORCH_CHECK(support.dim() == 1 && support.size(0) == logits.size(2) && support.scalar_type() == torch::kBool,
              "fused_diffusion_step: support must be [V] bool");
  TORCH_CHECK(sequences.dim() == 1 && sequences.size(0) == logits.size(0) && sequences.scalar_type() == torch::kLong,
              "fused_diffusion_step: sequences must be [B] int64");
  TORCH_CHECK(logits.size(1) < (int64_t{1} << 24), "fused_diffusion_step: at most 2^24 positions per row");
  TORCH_CHECK(z.device() == logits.device() && support.device() == logits.device() &&
                  sequences.device() == logits.device(),
              "fused_diffusion_step: z, support and sequences must be on the logits' device");
}

template <typename Logit>
void step_on_cpu(const Logit* logits, const int64_t* z, const bool* support, const int64_t* sequences, int64_t rows,
                 int64_t length, int64_t vocab, const kernels::DiffusionRowParams& params, int64_t* next) {
  at::parallel_for(0, rows * length, 1, [&](int64_t begin, int64_t end) {
    kernels::SerialLanes lanes;
    for (int64_t position = begin; position < end; ++position) {
      const auto sequence = static_cast<uint64_t>(sequences[position / length]);
      kernels::PhiloxUniforms uniforms{
          params.seed, kernels::position_subsequence(sequence, static_cast<uint64_t>(position % length)), params.step};
      next[position] =
          kernels::diffusion_step_row(logits + position * vocab, vocab, support, z[position], params, uniforms, lanes);
    }
  });
}

}  // namespace

torch::Tensor fused_diffusion_step(const torch::Tensor& logits_in, const torch::Tensor& z_in,
                                   const torch::Tensor& support_in, const torch::Tensor& sequences_in,
                                   const kernels::DiffusionRowParams& params) {
  check_shapes(logits_in, z_in, support_in, sequences_in);
  const auto logits = logits_in.contiguous();
  const auto z = z_in.contiguous();
  const auto support = support_in.contiguous();
  const auto sequences = sequences_in.contiguous();
  auto next = torch::empty_like(z);
  const int64_t rows = logits.size(0), length = logits.size(1), vocab = logits.size(2);
  const bool bf16 = logits.scalar_type() == torch::kBFloat16;
  if (logits.is_cuda()) {
#ifdef INKSTONE_CUDA
    const c10::cuda::CUDAGuard on_logits_device(logits.device());
    void* stream = c10::cuda::getCurrentCUDAStream(logits.device().index()).stream();
    if (bf16) {
      kernels::launch_diffusion_step_bf16(reinterpret_cast<const kernels::Bf16Bits*>(logits.data_ptr<at::BFloat16>()),
                                          z.data_ptr<int64_t>(), support.data_ptr<bool>(),
                                          sequences.data_ptr<int64_t>(), rows, length, vocab, params,
                                          next.data_ptr<int64_t>(), stream);
    } else {
      kernels::launch_diffusion_step_f32(logits.data_ptr<float>(), z.data_ptr<int64_t>(), support.data_ptr<bool>(),
                                         sequences.data_ptr<int64_t>(), rows, length, vocab, params,
                                         next.data_ptr<int64_t>(), stream);
    }
    return next;
#else
    TORCH_CHECK(false, "fused_diffusion_step: this build has no CUDA kernels");
#endif
  }
  if (bf16) {
    step_on_cpu(reinterpret_cast<const kernels::Bf16Bits*>(logits.data_ptr<at::BFloat16>()), z.data_ptr<int64_t>(),
                support.data_ptr<bool>(), sequences.data_ptr<int64_t>(), rows, length, vocab, params,
                next.data_ptr<int64_t>());
  } else {
    step_on_cpu(logits.data_ptr<float>(), z.data_ptr<int64_t>(), support.data_ptr<bool>(),
                sequences.data_ptr<int64_t>(), rows, length, vocab, params, next.data_ptr<int64_t>());
  }
  return next;
}

torch::Tensor keyed_prior_tokens(const torch::Tensor& support, const torch::Tensor& sequences, int64_t length,
                                 uint64_t seed, double mask_share, int64_t mask_id) {
  const auto members = support.cpu().nonzero().flatten().contiguous();
  const auto ids = members.accessor<int64_t, 1>();
  const int64_t n = members.size(0);
  TORCH_CHECK(n > 0, "keyed_prior_tokens: empty support");
  const auto rows = sequences.cpu().contiguous();
  auto tokens = torch::empty({rows.size(0), length}, torch::kLong);
  auto out = tokens.accessor<int64_t, 2>();
  const auto sequence = rows.accessor<int64_t, 1>();
  for (int64_t r = 0; r < rows.size(0); ++r) {
    for (int64_t i = 0; i < length; ++i) {
      const auto block = kernels::philox4x32_10(
          seed, kernels::position_subsequence(static_cast<uint64_t>(sequence[r]), static_cast<uint64_t>(i)),
          kernels::step_offset(kPriorStep, 0));
      const auto pick = static_cast<int64_t>(kernels::uniform_from_words(block.x, block.y) * static_cast<double>(n));
      const bool masked = mask_share > 0 && kernels::uniform_from_words(block.z, block.w) < mask_share;
      out[r][i] = masked ? mask_id : ids[pick < n ? pick : n - 1];
    }
  }
  return tokens;
}

}  // namespace inkstone
