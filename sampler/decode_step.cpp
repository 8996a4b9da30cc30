#include "sampler/decode_step.h"

#include <torch/torch.h>

#include "models/block_registry.h"

#ifdef INKSTONE_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace inkstone {

std::string graph_decode_obstacle(const ModelConfig& config) {
  for (int64_t layer = 0; layer < config.n_layers; ++layer) {
    const auto& mixer = token_mixer_of(config, layer).graph_decode_obstacle;
    if (!mixer.empty()) return "model.mixer_pattern has " + mixer;
    const auto& ffn = feed_forward_of(config, layer).graph_decode_obstacle;
    if (!ffn.empty()) return "model.ffn_pattern has " + ffn;
  }
  if (config.qkv_conv) return "model.qkv_conv is on";
  if (config.residual != ResidualMode::plain) return std::string("model.residual is ") + choice_name(config.residual);
  if (config.width_profile != WidthProfile::uniform) return std::string("model.width_profile is ") + choice_name(config.width_profile);
  if (config.hidden_streams > 1) return "model.hidden_streams > 1";
  if (config.time_conditioning) return "model.time_conditioning is on";
  return "";
}

#ifdef INKSTONE_CUDA
struct FixedWindowDecoder::CapturedGraph {
  at::cuda::CUDAGraph graph;
};
#else
struct FixedWindowDecoder::CapturedGraph {};
#endif

FixedWindowDecoder::FixedWindowDecoder(LanguageModel model, KVCache& cache, int64_t rows, bool use_graph)
    : model_(std::move(model)), cache_(cache), use_graph_(use_graph) {
  const auto device = model_->parameters().front().device();
  TORCH_CHECK(!use_graph || device.is_cuda(), "CUDA graphs need a CUDA model");
  TORCH_CHECK(!use_graph || graph_decode_obstacle(model_->config()).empty(), "this model's decode step cannot be "
              "captured: ", graph_decode_obstacle(model_->config()));
  const auto i64 = torch::TensorOptions().dtype(torch::kLong).device(device);
  tokens_ = torch::zeros({rows, 1}, i64);
  positions_ = torch::zeros({rows, 1}, i64);
  slots_ = torch::zeros({rows}, i64);
}

FixedWindowDecoder::~FixedWindowDecoder() = default;

torch::Tensor FixedWindowDecoder::forward() {
  return model_->logits(model_->decode_at_slot(tokens_, positions_, cache_, slots_).select(1, 0), HeadRows::tokens);
}

torch::Tensor FixedWindowDecoder::step(const torch::Tensor& tokens, const torch::Tensor& positions,
                                       const torch::Tensor& slots) {
  tokens_.copy_(tokens.view({-1, 1}));
  positions_.copy_(positions.view({-1, 1}));
  slots_.copy_(slots);
  torch::Tensor logits;
  if (!use_graph_) {
    logits = forward();
  } else {
#ifdef INKSTONE_CUDA
    if (!graph_) {
      // Capture on a side stream of the model's device (whichever device is current: a data-parallel rank's model
      // need not be on it), after warm-up forwards that create what the forward makes lazily (cuBLAS handles and
      // workspaces, the cache's slot index, RoPE frequencies on the device). They write this step's keys and values
      // into their own slots, which the replay writes again.
      const auto device = tokens_.device().index();
      c10::cuda::CUDAGuard on_model_device(tokens_.device());
      torch::cuda::synchronize(device);
      // Held only once captured whole: a capture that throws leaves no graph to replay.
      auto captured = std::make_unique<CapturedGraph>();
      {
        c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device));
        for (int warmup = 0; warmup < 2; ++warmup) forward();
        captured->graph.capture_begin();
        logits_ = forward();
        captured->graph.capture_end();
      }
      torch::cuda::synchronize(device);
      graph_ = std::move(captured);
    }
    c10::cuda::CUDAGuard on_model_device(tokens_.device());
    graph_->graph.replay();
    logits = logits_;
#endif
  }
  return logits;
}

}  // namespace inkstone
