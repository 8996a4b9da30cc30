#include "sampler/kernels/token_draw.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "sampler/kernels/philox.h"
#include "sampler/kernels/token_draw_row.h"

#ifdef INKSTONE_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "sampler/kernels/token_draw_cuda.h"
#endif

namespace inkstone {
namespace {

template <typename Logit>
void draw_on_cpu(const Logit* logits, const int64_t* sequences, const int64_t* positions, int64_t rows,
                 int64_t vocab, const kernels::FilterParams& filter, uint64_t seed, int64_t* tokens,
                 float* log_probs) {
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    kernels::SerialLanes lanes;
    for (int64_t row = begin; row < end; ++row) {
      kernels::PhiloxUniforms uniforms{
          seed,
          kernels::position_subsequence(static_cast<uint64_t>(sequences[row]), static_cast<uint64_t>(positions[row])),
          0};
      const auto draw = kernels::token_draw_row(logits + row * vocab, vocab, filter, uniforms, lanes);
      tokens[row] = draw.token;
      log_probs[row] = static_cast<float>(draw.log_prob);
    }
  });
}

}  // namespace

KeyedDraws keyed_token_draw(const torch::Tensor& logits_in, const torch::Tensor& sequences_in,
                            const torch::Tensor& positions_in, const kernels::FilterParams& filter, uint64_t seed) {
  TORCH_CHECK(logits_in.dim() == 2 &&
                  (logits_in.scalar_type() == torch::kFloat || logits_in.scalar_type() == torch::kBFloat16),
              "keyed_token_draw: logits must be [N, V] float32 or bfloat16");
  const int64_t rows = logits_in.size(0), vocab = logits_in.size(1);
  for (const auto* keys : {&sequences_in, &positions_in})
    TORCH_CHECK(keys->dim() == 1 && keys->size(0) == rows && keys->scalar_type() == torch::kLong &&
                    keys->device() == logits_in.device(),
                "keyed_token_draw: sequences and positions must be [N] int64 on the logits' device");
  const auto logits = logits_in.contiguous();
  const auto sequences = sequences_in.contiguous();
  const auto positions = positions_in.contiguous();
  KeyedDraws out{torch::empty({rows}, sequences.options()), torch::empty({rows}, logits.options().dtype(torch::kFloat))};
  const bool bf16 = logits.scalar_type() == torch::kBFloat16;
  if (logits.is_cuda()) {
#ifdef INKSTONE_CUDA
    const c10::cuda::CUDAGuard on_logits_device(logits.device());
    void* stream = c10::cuda::getCurrentCUDAStream(logits.device().index()).stream();
    if (bf16) {
      kernels::launch_token_draw_bf16(reinterpret_cast<const kernels::Bf16Bits*>(logits.data_ptr<at::BFloat16>()),
                                      sequences.data_ptr<int64_t>(), positions.data_ptr<int64_t>(), rows, vocab,
                                      filter, seed, out.tokens.data_ptr<int64_t>(), out.log_probs.data_ptr<float>(),
                                      stream);
    } else {
      kernels::launch_token_draw_f32(logits.data_ptr<float>(), sequences.data_ptr<int64_t>(),
                                     positions.data_ptr<int64_t>(), rows, vocab, filter, seed,
                                     out.tokens.data_ptr<int64_t>(), out.log_probs.data_ptr<float>(), stream);
    }
    return out;
#else
    TORCH_CHECK(false, "keyed_token_draw: this build has no CUDA kernels");
#endif
  }
  if (bf16) {
    draw_on_cpu(reinterpret_cast<const kernels::Bf16Bits*>(logits.data_ptr<at::BFloat16>()),
                sequences.data_ptr<int64_t>(), positions.data_ptr<int64_t>(), rows, vocab, filter, seed,
                out.tokens.data_ptr<int64_t>(), out.log_probs.data_ptr<float>());
  } else {
    draw_on_cpu(logits.data_ptr<float>(), sequences.data_ptr<int64_t>(), positions.data_ptr<int64_t>(), rows, vocab,
                filter, seed, out.tokens.data_ptr<int64_t>(), out.log_probs.data_ptr<float>());
  }
  return out;
}

}  // namespace inkstone
