// The CUDA code paths against their CPU twins: forward and backward, bf16 autocast, SDPA, KV-cache decoding (and
// its replayed CUDA graph), the fused diffusion step (cuRAND's Philox against the twin's), the fused rotary
// embedding, RMSNorm, SwiGLU and QK-norm kernels.
// ctest label `cuda`; each test skips, saying why, where no GPU is present (bench/gpu/check runs them on one).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "core/explicit_attention.h"
#include "core/host_copy.h"
#include "core/memory_usage.h"
#include "core/torch_compat.h"
#include "models/kernels/qk_norm_rope.h"
#include "models/kernels/route_sources.h"
#include "models/kernels/swiglu.h"
#include "models/language_model.h"
#include "models/rms_norm.h"
#include "models/rope.h"
#include "objectives/diffusion_objective.h"
#include "sampler/ar_sampler.h"
#include "sampler/kernels/diffusion_step.h"
#include "sampler/kernels/token_draw.h"
#include "tests/cli_run.h"
#include "tests/fixtures.h"
#include "tests/test_paths.h"
#include "train/master_weights.h"
#include "train/optimizer.h"
#include "train/window_source.h"

namespace inkstone {
namespace {

constexpr int64_t kVocab = 29;

#define INKSTONE_REQUIRE_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device (libtorch " << compat::torch_version() << ")"

LanguageModel tiny_model() {
  torch::manual_seed(11);
  return build_language_model(testing::tiny_model_config(/*init_std=*/0.3), kVocab);
}

torch::Tensor next_token_loss(LanguageModel& model, const torch::Tensor& tokens) {
  const auto logits = model(tokens.slice(1, 0, -1));
  return torch::nn::functional::cross_entropy(logits.reshape({-1, kVocab}).to(torch::kFloat),
                                              tokens.slice(1, 1).reshape(-1));
}

struct LossAndGrads {
  double loss;
  std::vector<torch::Tensor> grads;  // on the CPU
};

LossAndGrads loss_and_grads(LanguageModel& model, const torch::Tensor& tokens) {
  model->zero_grad();
  const auto loss = next_token_loss(model, tokens);
  loss.backward();
  LossAndGrads out{loss.item<double>(), {}};
  for (const auto& p : model->parameters()) out.grads.push_back(p.grad().cpu());
  return out;
}

torch::Tensor random_tokens() {
  torch::manual_seed(3);
  return torch::randint(kVocab, {4, 33}, torch::kLong);
}

// The fused multi-tensor AdamW step on CUDA makes the update AdamW makes on the CPU (libtorch's CPU fused kernel
// from 2.4, tested against the per-parameter step in test_schedule.cpp), step after step, with a decaying and a
// non-decaying group.
TEST(Cuda, FusedAdamWUpdatesAsThePerParameterStep) {
  INKSTONE_REQUIRE_CUDA();
  torch::manual_seed(5);
  const std::vector<torch::Tensor> start = {torch::randn({64, 48}), torch::randn({48}), torch::randn({7, 3})};
  auto make = [&](torch::Device device) {
    std::vector<torch::Tensor> params;
    for (const auto& t : start) params.push_back(t.to(device, /*non_blocking=*/false, /*copy=*/true).requires_grad_());
    ParameterGroups groups;
    groups.decay = {{"w", params[0]}, {"v", params[2]}};
    groups.no_decay = {{"norm", params[1]}};
    OptimConfig optim = default_config().optim;
    optim.learning_rate = 1e-2;
    optim.weight_decay = 0.1;
    return std::make_pair(params, make_adamw(groups, optim));
  };
  auto [cpu_params, cpu_adamw] = make(torch::kCPU);
  auto [gpu_params, gpu_adamw] = make(torch::kCUDA);
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < start.size(); ++i) {
      const auto grad = torch::randn_like(start[i]) * static_cast<double>(i + 1);
      cpu_params[i].mutable_grad() = grad.clone();
      gpu_params[i].mutable_grad() = grad.to(torch::kCUDA);
    }
    cpu_adamw->step();
    gpu_adamw->step();
    for (size_t i = 0; i < start.size(); ++i)
      EXPECT_TRUE(torch::allclose(gpu_params[i].detach().cpu(), cpu_params[i].detach(), 1e-6, 1e-6))
          << "step " << step << " parameter " << i;
  }
}

// The step-or-skip decision on the GPU (docs/training.md, "A step without host synchronisation"): a skip flag of 1
// leaves the weights, the host takes the step count back, and the next steps are those of a run that never saw
// the skipped gradients; the figures arrive through the pinned non-blocking copy.
TEST(Cuda, AStepSkippedOnTheDeviceIsAsIfItNeverHappened) {
  INKSTONE_REQUIRE_CUDA();
  torch::manual_seed(8);
  const auto start = torch::randn({64, 48});
  OptimConfig optim = default_config().optim;
  optim.learning_rate = 1e-2;
  auto make = [&] {
    auto weight = start.cuda().requires_grad_();
    return std::make_pair(weight, make_adamw(ParameterGroups{{{"w", weight}}, {}}, optim));
  };
  auto [skipping, skipping_adamw] = make();
  auto [straight, straight_adamw] = make();
  ASSERT_TRUE(skipping_adamw->runs_fused_kernel());
  const auto no = torch::zeros({}, torch::device(torch::kCUDA)), yes = torch::ones({}, torch::device(torch::kCUDA));
  for (int step = 0; step < 4; ++step) {
    const auto grad = torch::randn({64, 48}).cuda();
    if (step == 1) {
      skipping.mutable_grad() = grad * std::nan("");
      const auto before = skipping.detach().clone();
      skipping_adamw->uncount(skipping_adamw->step_unless(yes));
      EXPECT_TRUE(torch::equal(skipping.detach(), before));
      continue;
    }
    skipping.mutable_grad() = grad.clone();
    straight.mutable_grad() = grad.clone();
    skipping_adamw->step_unless(no);
    straight_adamw->step();
  }
  EXPECT_TRUE(torch::equal(skipping.detach(), straight.detach()));
  HostCopy figures(torch::stack({skipping.detach().sum(), straight.detach().sum()}).to(torch::kDouble));
  const auto host = figures.values();
  EXPECT_EQ(host.device().type(), torch::kCPU);
  EXPECT_EQ(host[0].item<double>(), host[1].item<double>());
  EXPECT_EQ(host[0].item<double>(), skipping.detach().sum().item<double>());
}

// bf16 weights on the GPU (run.param_dtype): the fused AdamW steps the fp32 masters as the CPU's per-parameter
// step does, and each bf16 weight is its master rounded.
TEST(Cuda, MasterWeightsStepLikeTheCpu) {
  INKSTONE_REQUIRE_CUDA();
  torch::manual_seed(6);
  const auto start = torch::randn({64, 48}).to(torch::kBFloat16);
  auto make = [&](torch::Device device) {
    auto weight = start.to(device, /*non_blocking=*/false, /*copy=*/true).requires_grad_();
    NamedTensors stepped{{"w", weight}};
    auto masters = std::make_unique<MasterWeights>(stepped);
    masters->adopt_parameters();
    OptimConfig optim = default_config().optim;
    optim.learning_rate = 1e-3;
    auto adamw = make_adamw(masters->optimized(ParameterGroups{stepped, {}}), optim);
    return std::make_tuple(weight, std::move(masters), std::move(adamw));
  };
  auto [cpu_weight, cpu_masters, cpu_adamw] = make(torch::kCPU);
  auto [gpu_weight, gpu_masters, gpu_adamw] = make(torch::kCUDA);
  for (int step = 0; step < 5; ++step) {
    const auto grad = torch::randn({64, 48}).to(torch::kBFloat16);
    cpu_weight.mutable_grad() = grad.clone();
    gpu_weight.mutable_grad() = grad.to(torch::kCUDA);
    for (auto* m : {cpu_masters.get(), gpu_masters.get()}) m->take_gradients();
    cpu_adamw->step();
    gpu_adamw->step();
    for (auto* m : {cpu_masters.get(), gpu_masters.get()}) m->write_back();
  }
  const auto gpu_master = gpu_masters->optimized().front().second.detach();
  EXPECT_TRUE(torch::allclose(gpu_master.cpu(), cpu_masters->optimized().front().second.detach(), 1e-6, 1e-6));
  EXPECT_TRUE(torch::equal(gpu_weight.detach(), gpu_master.to(torch::kBFloat16)));
}

TEST(Cuda, ForwardAndBackwardMatchTheCpu) {
  INKSTONE_REQUIRE_CUDA();
  auto model = tiny_model();
  const auto tokens = random_tokens();
  const auto cpu = loss_and_grads(model, tokens);
  model->to(torch::kCUDA);
  const auto gpu = loss_and_grads(model, tokens.to(torch::kCUDA));
  EXPECT_NEAR(gpu.loss, cpu.loss, 1e-5 * cpu.loss);
  ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
  for (size_t i = 0; i < cpu.grads.size(); ++i)
    EXPECT_TRUE(torch::allclose(gpu.grads[i], cpu.grads[i], 1e-3, 1e-5)) << "parameter " << i;
}

// A packed batch's documents stay on the host (core/batch.h): the model lays its document buckets out from them
// and uploads them for the layers. Its hidden states and gradients equal those from documents on the device and
// those of the CPU model.
TEST(Cuda, PackedDocumentsFromTheHostTrainAsOnTheCpu) {
  INKSTONE_REQUIRE_CUDA();
  auto model = tiny_model();
  const auto tokens = random_tokens();
  // Four documents of 9, 6, 15 and 3 tokens in every row of 33.
  const auto documents = torch::tensor({0, 0, 0, 1, 1, 2, 2, 2, 2, 2, 3}, torch::kLong).repeat_interleave(3);
  const auto documents_per_row = documents.unsqueeze(0).repeat({4, 1});
  // The hidden states, then every parameter's gradient, on the CPU.
  const auto hidden_and_grads = [&](const torch::Tensor& on, const torch::Tensor& docs) {
    model->zero_grad();
    WindowInputs window;
    window.documents = docs;
    const auto hidden = model->hidden_states(on, window);
    hidden.pow(2).sum().backward();
    std::vector<torch::Tensor> out{hidden.detach().cpu()};
    for (const auto& p : model->parameters()) out.push_back(p.grad().cpu());
    return out;
  };
  const auto cpu = hidden_and_grads(tokens, documents_per_row);
  model->to(torch::kCUDA);
  const auto from_host = hidden_and_grads(tokens.to(torch::kCUDA), documents_per_row);
  const auto from_device = hidden_and_grads(tokens.to(torch::kCUDA), documents_per_row.to(torch::kCUDA));
  ASSERT_EQ(from_host.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    // (attention's backward kernels may add in any order: close, not equal)
    EXPECT_TRUE(torch::allclose(from_host[i], from_device[i], 1e-5, 1e-6)) << "tensor " << i;
    EXPECT_TRUE(torch::allclose(from_host[i], cpu[i], 1e-3, 1e-4)) << "tensor " << i;
  }
}

// A window batch uploaded to the GPU keeps its packed documents on the host, worked out from the host tokens; a
// diffusion model's shifted outputs read them there beside outputs on the device.
TEST(Cuda, TheWindowUploadKeepsPackedDocumentsOnTheHost) {
  INKSTONE_REQUIRE_CUDA();
  const auto tokens = random_tokens();
  TokenBatch host;
  host.rows = tokens.size(0);
  host.cols = tokens.size(1);
  const auto ids = tokens.to(torch::kInt);
  host.tokens.assign(ids.data_ptr<int32_t>(), ids.data_ptr<int32_t>() + ids.numel());
  host.real.assign(static_cast<size_t>(ids.numel()), 1);
  const DocumentSplit split{/*eos=*/5, /*eos_opens=*/false};
  const auto batch = token_batch_to_device(host, 0, host.rows, torch::kCUDA, split);
  EXPECT_TRUE(batch.tokens.is_cuda());
  ASSERT_TRUE(batch.documents.is_cpu());
  EXPECT_TRUE(torch::equal(batch.documents, packed_documents(tokens, split)));
  EXPECT_GT(batch.documents.max().item<int64_t>(), 0);  // the rows hold eos: more than one document
  const auto values = torch::randn({host.rows, host.cols, 2});
  EXPECT_TRUE(torch::equal(outputs_shifted_right(values.to(torch::kCUDA), batch.documents).cpu(),
                           outputs_shifted_right(values, batch.documents)));
}

TEST(Cuda, Bf16AutocastStaysNearFp32) {
  INKSTONE_REQUIRE_CUDA();
  auto model = tiny_model();
  model->to(torch::kCUDA);
  const auto tokens = random_tokens().to(torch::kCUDA);
  const double fp32 = next_token_loss(model, tokens).item<double>();
  compat::set_cuda_autocast(true);
  const double bf16 = next_token_loss(model, tokens).item<double>();
  compat::set_cuda_autocast(false);
  // bf16 keeps 8 bits of mantissa: a relative error near 2^-8 per op, well inside 3% on the loss.
  EXPECT_NEAR(bf16, fp32, 0.03 * fp32);
  EXPECT_NE(bf16, fp32);  // autocast really ran in bf16
}

TEST(Cuda, SdpaMatchesTheExplicitAttentionInFloat64) {
  INKSTONE_REQUIRE_CUDA();
  torch::manual_seed(5);
  const auto q = torch::randn({2, 4, 24, 16}), k = torch::randn({2, 4, 24, 16}), v = torch::randn({2, 4, 24, 16});
  const auto reference =
      explicit_attention(q.to(torch::kDouble), k.to(torch::kDouble), v.to(torch::kDouble), c10::nullopt, true);
  const auto gpu = compat::sdpa(q.cuda(), k.cuda(), v.cuda(), c10::nullopt, true).cpu();
  EXPECT_TRUE(torch::allclose(gpu.to(torch::kDouble), reference, 1e-4, 1e-5));
}

TEST(Cuda, GreedyKvCacheDecodingMatchesTheCpu) {
  INKSTONE_REQUIRE_CUDA();
  auto model = tiny_model();
  ArSampleOptions options;
  options.num_samples = 2;
  options.max_new_tokens = 16;
  options.sampling.temperature = 0.0;
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {4, 5, 6, 7, 8, 9}, {10}};
  const auto cpu = sample_autoregressive(model, prompts, options);
  model->to(torch::kCUDA);
  const auto gpu = sample_autoregressive(model, prompts, options);
  EXPECT_TRUE(gpu.cuda_graph);  // a plain attention model's steps are replayed by default
  ASSERT_EQ(gpu.samples.size(), cpu.samples.size());
  for (size_t i = 0; i < cpu.samples.size(); ++i) EXPECT_EQ(gpu.samples[i].tokens, cpu.samples[i].tokens) << i;
}

// The replayed graph computes what its eager twin computes: the same draws and log-probabilities at temperature 1
// over many steps (each step's logits feed the next draw), against the eager fixed window and the growing cache.
TEST(Cuda, ReplayedDecodeGraphSamplesAsTheEagerSteps) {
  INKSTONE_REQUIRE_CUDA();
  auto model = tiny_model();
  model->to(torch::kCUDA);
  ArSampleOptions options;
  options.num_samples = 3;
  options.max_new_tokens = 40;
  options.seed = 9;
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {4, 5, 6, 7, 8, 9}, {10}};
  options.decode = DecodeMode::cuda_graph;
  const auto graph = sample_autoregressive(model, prompts, options);
  EXPECT_TRUE(graph.cuda_graph);
  for (const auto mode : {DecodeMode::fixed_window, DecodeMode::growing_cache}) {
    options.decode = mode;
    const auto eager = sample_autoregressive(model, prompts, options);
    EXPECT_FALSE(eager.cuda_graph);
    ASSERT_EQ(eager.samples.size(), graph.samples.size());
    for (size_t i = 0; i < graph.samples.size(); ++i) {
      EXPECT_EQ(graph.samples[i].tokens, eager.samples[i].tokens) << "row " << i;
      for (size_t t = 0; t < graph.samples[i].log_probs.size(); ++t)
        EXPECT_NEAR(graph.samples[i].log_probs[t], eager.samples[i].log_probs[t], 1e-5) << "row " << i;
    }
  }
}

// Three samples of each of four prompts on four rows, ending at ids 5 and 11 or after 30 tokens: rows refill and
// compact.
ArSampleOptions refilling_options() {
  ArSampleOptions options;
  options.num_samples = 3;
  options.max_new_tokens = 30;
  options.seed = 9;
  options.end_ids = {5, 11};
  options.max_rows = 4;
  options.decode = DecodeMode::growing_cache;
  return options;
}
const std::vector<std::vector<int32_t>> kRefillPrompts = {{1, 2, 3}, {4, 5, 6, 7, 8, 9}, {10}, {12, 13}};

// Continuous batching under CUDA graphs: rows refilled from the queue, then compacted into buckets (one graph
// each), ends noticed every few steps: the samples of the CPU's eager engine.
TEST(Cuda, ContinuousBatchingUnderGraphsSamplesAsTheCpu) {
  INKSTONE_REQUIRE_CUDA();
  auto model = tiny_model();
  ArSampleOptions options = refilling_options();
  const auto& prompts = kRefillPrompts;
  const auto cpu = sample_autoregressive(model, prompts, options);
  model->to(torch::kCUDA);
  options.decode = DecodeMode::cuda_graph;
  const auto gpu = sample_autoregressive(model, prompts, options);
  EXPECT_TRUE(gpu.cuda_graph);
  ASSERT_EQ(gpu.samples.size(), cpu.samples.size());
  for (size_t i = 0; i < cpu.samples.size(); ++i) {
    EXPECT_EQ(gpu.samples[i].tokens, cpu.samples[i].tokens) << "sample " << i;
    EXPECT_EQ(gpu.samples[i].finish, cpu.samples[i].finish) << "sample " << i;
    for (size_t t = 0; t < std::min(gpu.samples[i].log_probs.size(), cpu.samples[i].log_probs.size()); ++t)
      EXPECT_NEAR(gpu.samples[i].log_probs[t], cpu.samples[i].log_probs[t], 1e-4) << "sample " << i;
  }
}

// A decoder kept across calls replays in later calls the graphs it captured (one per bucket a call reaches), with
// the weights updated in place between calls as an optimizer step updates them, and samples what the CPU engine
// samples with those weights; a later call captures only buckets no earlier call reached.
TEST(Cuda, AKeptDecoderReplaysItsGraphsInLaterCalls) {
  INKSTONE_REQUIRE_CUDA();
  auto cpu_model = tiny_model();
  auto gpu_model = tiny_model();
  gpu_model->to(torch::kCUDA);
  ArSampleOptions options = refilling_options();
  const auto& prompts = kRefillPrompts;
  KeptRowDecoder kept;
  int64_t captured = 0;
  for (int64_t call = 0; call < 3; ++call) {
    if (call > 0) {
      torch::NoGradGuard no_grad;
      for (auto& parameter : cpu_model->parameters()) parameter.mul_(0.9);
      for (auto& parameter : gpu_model->parameters()) parameter.mul_(0.9);
    }
    options.first_prompt = 10 * call;
    options.decode = DecodeMode::growing_cache;
    const auto cpu = sample_autoregressive(cpu_model, prompts, options);
    options.decode = DecodeMode::cuda_graph;
    const auto gpu = sample_autoregressive(gpu_model, prompts, options, &kept);
    EXPECT_TRUE(gpu.cuda_graph);
    captured += gpu.graphs_captured;
    EXPECT_LE(captured, 3) << "buckets 4, 2 and 1 are captured once each";
    if (call == 0) EXPECT_GE(gpu.graphs_captured, 1);
    ASSERT_EQ(gpu.samples.size(), cpu.samples.size());
    for (size_t i = 0; i < cpu.samples.size(); ++i) {
      EXPECT_EQ(gpu.samples[i].tokens, cpu.samples[i].tokens) << "call " << call << " sample " << i;
      EXPECT_EQ(gpu.samples[i].finish, cpu.samples[i].finish) << "call " << call << " sample " << i;
    }
  }
  EXPECT_EQ(kept.reuses(), 2);
}

// The keyed token draw's kernel and its CPU twin draw the same tokens with the same log-probs from float32 and
// bf16 logits, with and without filters, and greedily.
TEST(Cuda, KeyedTokenDrawMatchesTheCpuTwin) {
  INKSTONE_REQUIRE_CUDA();
  torch::manual_seed(12);
  const int64_t vocab = 5000;
  const auto logits = torch::randn({64, vocab}) * 2;
  const auto sequences = torch::arange(64, torch::kLong) * 7;
  const auto positions = torch::arange(64, torch::kLong) % 13;
  for (const kernels::FilterParams filter : {kernels::FilterParams{1.0, 0, 1.0, 0.0, vocab},
                                             kernels::FilterParams{0.7, 40, 0.9, 0.02, vocab},
                                             kernels::FilterParams{0.0, 0, 1.0, 0.0, vocab}}) {
    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
      const auto rows = logits.to(dtype);
      const auto cpu = keyed_token_draw(rows, sequences, positions, filter, 5);
      const auto gpu = keyed_token_draw(rows.cuda(), sequences.cuda(), positions.cuda(), filter, 5);
      EXPECT_TRUE(torch::equal(gpu.tokens.cpu(), cpu.tokens)) << "temperature " << filter.temperature;
      EXPECT_TRUE(torch::allclose(gpu.log_probs.cpu(), cpu.log_probs, 1e-5, 1e-5));
    }
  }
}

// The kernel and its CPU twin draw the same token from the same logits at every position, for float32 and bf16
// logits, uniform and absorbing noise, with filters, with the posterior in float64 and in float32: the same row
// code, and cuRAND's Philox equal to the twin's.
TEST(Cuda, FusedDiffusionStepDrawsTheCpuTwinsTokens) {
  INKSTONE_REQUIRE_CUDA();
  torch::manual_seed(8);
  const int64_t rows = 4, length = 37, vocab = 50000;
  const auto logits = (3.0 * torch::randn({rows, length, vocab})).contiguous();
  auto support = torch::ones({vocab}, torch::kBool);
  support[vocab - 1] = false;  // the absorbing state
  const auto z = torch::randint(0, vocab - 1, {rows, length}, torch::kLong);
  const auto sequences = torch::tensor({0, 1, 977, 123456789}, torch::kLong);
  for (const bool absorbing : {false, true}) {
    for (const bool filtered : {false, true}) {
      kernels::DiffusionRowParams p;
      p.temperature = filtered ? 0.8 : 1.0;
      p.top_k = filtered ? 200 : 0;
      p.top_p = filtered ? 0.9 : 1.0;
      p.min_p = filtered ? 0.01 : 0.0;
      p.alpha_t = 0.3;
      p.alpha_s = 0.5;
      // Absorbing noise (υ = 0) or uniform (μ = 0).
      (absorbing ? p.mask_t : p.uniform_t) = 1 - p.alpha_t;
      (absorbing ? p.mask_s : p.uniform_s) = 1 - p.alpha_s;
      p.mask_id = vocab - 1;
      p.support_size = vocab - 1;
      p.seed = 31;
      p.step = 6;
      auto state = absorbing ? torch::where(torch::rand({rows, length}) < 0.5, torch::full_like(z, vocab - 1), z) : z;
      for (const bool float32_posterior : {false, true}) {
        p.float32 = float32_posterior;
        for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
          const auto on_cpu = fused_diffusion_step(logits.to(dtype), state, support, sequences, p);
          const auto on_gpu =
              fused_diffusion_step(logits.to(dtype).cuda(), state.cuda(), support.cuda(), sequences.cuda(), p).cpu();
          EXPECT_TRUE(torch::equal(on_cpu, on_gpu))
              << "absorbing " << absorbing << " filtered " << filtered << " float32 posterior " << float32_posterior
              << " dtype " << dtype << ": " << on_cpu.ne(on_gpu).sum().item<int64_t>() << " positions differ";
        }
      }
    }
  }
}

// The routing kernel against its CPU twin, forward and backward, float32 and float64, at a zoo-like shape.
TEST(Cuda, FusedRoutingMatchesTheCpuTwin) {
  INKSTONE_REQUIRE_CUDA();
  for (const auto dtype : {torch::kFloat, torch::kDouble}) {
    torch::manual_seed(5);
    const auto options = torch::TensorOptions().dtype(dtype);
    const auto sources = torch::randn({9, 2, 64, 256}, options);
    const auto query = torch::randn({256}, options), gain = 1.0 + 0.2 * torch::randn({256}, options);
    const auto grad_out = torch::randn({2, 64, 256}, options);
    std::vector<torch::Tensor> results[2];
    for (const bool gpu : {false, true}) {
      const auto place = [gpu](const torch::Tensor& t) { return (gpu ? t.cuda() : t.clone()).requires_grad_(true); };
      auto s = place(sources), q = place(query), g = place(gain);
      const auto out = fused_route_sources(s.unbind(0), q, g, 1e-6, 4);
      out.backward(gpu ? grad_out.cuda() : grad_out);
      results[gpu] = {out.detach().cpu(), s.grad().cpu(), q.grad().cpu(), g.grad().cpu()};
    }
    const double tolerance = dtype == torch::kDouble ? 1e-10 : 1e-4;
    for (size_t k = 0; k < results[0].size(); ++k) {
      const double scale = std::max(1.0, results[0][k].abs().max().item<double>());
      EXPECT_LT((results[1][k] - results[0][k]).abs().max().item<double>(), tolerance * scale)
          << "tensor " << k << " dtype " << dtype;
    }
  }
}

// The rotary embedding kernel against its CPU twin, bit for bit: float32 and bf16, forward and gradient, on the
// attention's transposed layout (tables built on the CPU, so both read the same cos and sin).
TEST(Cuda, FusedRopeEqualsTheCpuTwinBitForBit) {
  INKSTONE_REQUIRE_CUDA();
  torch::manual_seed(6);
  for (const int64_t table_batch : {2, 1})
    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
      const auto table = rope_table(torch::randint(0, 40000, {table_batch, 64}, torch::kLong), 128, 1e6);
      const auto x = torch::randn({2, 64, 8, 128}).to(dtype).transpose(1, 2);
      const auto grad_out = torch::randn({2, 8, 64, 128}).to(dtype);
      torch::Tensor out[2], grad[2];
      for (const bool gpu : {false, true}) {
        const auto place = [gpu](const torch::Tensor& t) { return gpu ? t.cuda() : t; };
        auto input = place(x).detach().requires_grad_(true);
        const auto rotated = apply_rope(input, {place(table.cos), place(table.sin)});
        rotated.backward(place(grad_out));
        out[gpu] = rotated.detach().cpu();
        grad[gpu] = input.grad().cpu();
      }
      EXPECT_TRUE(torch::equal(out[1], out[0])) << dtype << " table batch " << table_batch;
      EXPECT_TRUE(torch::equal(grad[1], grad[0])) << dtype << " table batch " << table_batch;
    }
}

// The RMSNorm kernel against the CPU op over the same coordinate code: float64, float32 and bf16 rows, forward and
// both gradients (row sums added in another order, so to rounding).
TEST(Cuda, RmsNormKernelMatchesTheCpu) {
  INKSTONE_REQUIRE_CUDA();
  torch::manual_seed(9);
  for (const auto& [dtype, tolerance] : std::vector<std::pair<torch::ScalarType, double>>{
           {torch::kDouble, 1e-12}, {torch::kFloat, 1e-5}, {torch::kBFloat16, 1e-2}}) {
    const auto x = (torch::randn({3000, 768}) * 2).to(dtype);
    const auto weight = (torch::rand({768}) + 0.5).to(dtype);
    const auto grad_out = torch::randn({3000, 768}).to(dtype);
    torch::Tensor out[2], grad_x[2], grad_weight[2];
    for (const bool gpu : {false, true}) {
      const auto place = [gpu](const torch::Tensor& t) { return gpu ? t.cuda() : t; };
      auto leaf = place(x).detach().requires_grad_(true);
      auto gain = place(weight).detach().requires_grad_(true);
      const auto y = rms_norm(leaf, gain, 1e-6);
      y.backward(place(grad_out));
      out[gpu] = y.detach().cpu();
      grad_x[gpu] = leaf.grad().cpu();
      grad_weight[gpu] = gain.grad().cpu();
    }
    EXPECT_LT(testing::max_relative_diff(out[1], out[0]), tolerance) << dtype;
    EXPECT_LT(testing::max_relative_diff(grad_x[1], grad_x[0]), tolerance) << dtype;
    EXPECT_LT(testing::max_relative_diff(grad_weight[1], grad_weight[0]), tolerance) << dtype;
  }
}

// The residual add fused with RMSNorm on the GPU against the CPU op: both outputs and the three gradients.
TEST(Cuda, ResidualAddFusedWithRmsNormMatchesTheCpu) {
  INKSTONE_REQUIRE_CUDA();
  torch::manual_seed(10);
  for (const auto& [dtype, tolerance] : std::vector<std::pair<torch::ScalarType, double>>{
           {torch::kDouble, 1e-12}, {torch::kFloat, 1e-5}, {torch::kBFloat16, 1e-2}}) {
    const auto x = (torch::randn({3000, 768}) * 2).to(dtype), o = torch::randn({3000, 768}).to(dtype);
    const auto weight = (torch::rand({768}) + 0.5).to(dtype);
    const auto grad_sum = torch::randn({3000, 768}).to(dtype), grad_normed = torch::randn({3000, 768}).to(dtype);
    std::vector<torch::Tensor> results[2];
    for (const bool gpu : {false, true}) {
      const auto place = [gpu](const torch::Tensor& t) { return gpu ? t.cuda() : t; };
      auto x_leaf = place(x).detach().requires_grad_(true), o_leaf = place(o).detach().requires_grad_(true);
      auto gain = place(weight).detach().requires_grad_(true);
      const auto [sum, normed] = add_rms_norm(x_leaf, o_leaf, gain, 1e-6);
      torch::autograd::backward({sum, normed}, {place(grad_sum), place(grad_normed)});
      results[gpu] = {sum.detach().cpu(), normed.detach().cpu(), x_leaf.grad().cpu(), o_leaf.grad().cpu(),
                      gain.grad().cpu()};
    }
    for (size_t k = 0; k < results[0].size(); ++k)
      EXPECT_LT(testing::max_relative_diff(results[1][k], results[0][k]), tolerance) << dtype << " output " << k;
  }
}

// The SwiGLU kernel against its CPU twin, forward and gradient: float64 and float32 to the ulps by which CUDA's
// exp and the C library's differ, bf16 to one rounding of those.
TEST(Cuda, FusedSwigluMatchesTheCpuTwin) {
  INKSTONE_REQUIRE_CUDA();
  torch::manual_seed(7);
  for (const auto& [dtype, tolerance] : std::vector<std::pair<torch::ScalarType, double>>{
           {torch::kDouble, 1e-13}, {torch::kFloat, 1e-6}, {torch::kBFloat16, 1e-2}}) {
    const auto gate_up = (torch::randn({4, 64, 2 * 352}) * 3).to(dtype);
    const auto grad_out = torch::randn({4, 64, 352}).to(dtype);
    const auto twin = swiglu_row_code_on_cpu(gate_up, grad_out);
    auto input = gate_up.cuda().requires_grad_(true);
    const auto hidden = fused_swiglu(input);
    hidden.backward(grad_out.cuda());
    EXPECT_LT(testing::max_relative_diff(hidden.detach().cpu(), twin.hidden), tolerance) << dtype;
    EXPECT_LT(testing::max_relative_diff(input.grad().cpu(), twin.grad_gate_up), tolerance) << dtype;
  }
}

// The QK-norm + rotary kernel against its CPU twin on the attention's strided view of a joint projection: the row
// sums are added in another order (warp shuffles), so to float rounding, not bit for bit.
TEST(Cuda, FusedQkNormRopeMatchesTheCpuTwin) {
  INKSTONE_REQUIRE_CUDA();
  torch::manual_seed(8);
  for (const int64_t table_batch : {2, 1})
    for (const auto& [dtype, tolerance] : std::vector<std::pair<torch::ScalarType, double>>{
             {torch::kDouble, 1e-12}, {torch::kFloat, 1e-5}, {torch::kBFloat16, 1e-2}}) {
      const auto table = rope_table(torch::randint(0, 40000, {table_batch, 64}, torch::kLong), 128, 1e6);
      const auto joint = torch::randn({2, 64, 10 * 128}).to(dtype);
      const auto weight = (torch::rand({128}) + 0.5).to(dtype);
      const auto grad_out = torch::randn({2, 8, 64, 128}).to(dtype);
      torch::Tensor out[2], grad_x[2], grad_weight[2];
      for (const bool gpu : {false, true}) {
        const auto place = [gpu](const torch::Tensor& t) { return gpu ? t.cuda() : t; };
        auto leaf = place(joint).detach().requires_grad_(true);
        auto gain = place(weight).detach().requires_grad_(true);
        const auto q = leaf.narrow(-1, 0, 8 * 128).view({2, 64, 8, 128}).transpose(1, 2);
        const auto y = fused_qk_norm_rope(q, gain, 1e-6, place(table.cos), place(table.sin));
        y.backward(place(grad_out));
        out[gpu] = y.detach().cpu();
        grad_x[gpu] = leaf.grad().cpu();
        grad_weight[gpu] = gain.grad().cpu();
      }
      EXPECT_LT(testing::max_relative_diff(out[1], out[0]), tolerance) << dtype << " table batch " << table_batch;
      EXPECT_LT(testing::max_relative_diff(grad_x[1], grad_x[0]), tolerance) << dtype << " table batch " << table_batch;
      EXPECT_LT(testing::max_relative_diff(grad_weight[1], grad_weight[0]), tolerance) << dtype;
    }
}

// An MHAR model, whose routing sites take the fused kernel on the GPU: loss and gradients as on the CPU (composite).
TEST(Cuda, MharModelTrainsAsOnTheCpu) {
  INKSTONE_REQUIRE_CUDA();
  auto config = testing::tiny_model_config(/*init_std=*/0.3);
  config.residual = ResidualMode::mhar;
  config.residual_heads = 2;
  torch::manual_seed(11);
  auto model = build_language_model(config, kVocab);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.add_(0.05 * torch::randn_like(p));  // non-zero pseudo-queries
  }
  const auto tokens = random_tokens();
  const auto cpu = loss_and_grads(model, tokens);
  model->to(torch::kCUDA);
  const auto gpu = loss_and_grads(model, tokens.cuda());
  EXPECT_NEAR(gpu.loss, cpu.loss, 1e-4);
  for (size_t i = 0; i < cpu.grads.size(); ++i)
    EXPECT_LT((gpu.grads[i] - cpu.grads[i]).abs().max().item<double>(), 1e-3) << i;
}

// A block recomputed in backward reruns under the bf16 autocast its forward ran under (backward itself runs
// outside the autocast scope, as in the trainer): the gradients are the ordinary forward's. An fp32 rerun would
// differ by bf16's rounding, about 1e-2 relative.
TEST(Cuda, CheckpointedBlocksRerunUnderTheForwardsAutocast) {
  INKSTONE_REQUIRE_CUDA();
  auto model = tiny_model();
  model->to(torch::kCUDA);
  const auto tokens = random_tokens().to(torch::kCUDA);
  auto grads_with = [&](int64_t every) {
    model->set_branch_execution(BranchExecution(every, nullptr));
    model->zero_grad();
    torch::Tensor loss;
    {
      compat::CudaAutocastScope autocast(true);
      loss = next_token_loss(model, tokens);
    }
    loss.backward();
    std::vector<torch::Tensor> grads;
    for (const auto& p : model->parameters()) grads.push_back(p.grad().cpu());
    return grads;
  };
  const auto plain = grads_with(0);
  const auto recomputed = grads_with(1);
  for (size_t i = 0; i < plain.size(); ++i) {
    const double scale = plain[i].abs().max().item<double>() + 1e-12;
    EXPECT_LT((recomputed[i] - plain[i]).abs().max().item<double>(), 1e-3 * scale) << i;
  }
}

// A GPU run's checkpoint mixes CUDA weights and moments with CPU step counters: the finiteness check must take
// each device's tensors on their own (a cross-device stack failed every GPU checkpoint).
TEST(Cuda, ACheckpointOfCudaAndCpuTensorsIsWrittenAndNaNIsStillCaught) {
  INKSTONE_REQUIRE_CUDA();
  const auto dir = testing::temp_dir("cuda_checkpoint");
  CheckpointData data;
  data.step = 1;
  data.model = {{"w", torch::ones({3}, torch::kCUDA)}};
  data.optimizer = {{"w.exp_avg", torch::zeros({3}, torch::kCUDA)}, {"w.step", torch::tensor(int64_t{1})}};
  EXPECT_NO_THROW(save_checkpoint(dir, data, 0));
  data.step = 2;
  data.optimizer[0].second[1] = NAN;
  EXPECT_THROW(save_checkpoint(dir, data, 0), NonFiniteError);
  std::filesystem::remove_all(dir);
}

// A config's device "cuda" names no index: the allocator's statistics are read for the current device (index -1
// made libtorch refuse every GPU training run at its first metrics line).
TEST(Cuda, AllocatorMemoryOfAnUnindexedDevice) {
  INKSTONE_REQUIRE_CUDA();
  const torch::Device device("cuda");
  reset_cuda_peak(device);
  const auto held = torch::empty({8 << 20}, torch::dtype(torch::kByte).device(device));
  const auto memory = cuda_memory(device);
  ASSERT_TRUE(memory.has_value());
  EXPECT_GE(memory->max_allocated_mib, 8.0);
  EXPECT_GE(memory->reserved_mib, 8.0);
}

// The CLI trains on the GPU end to end and logs the allocator's memory. The CLI is the one built beside this test,
// or, in a bundle moved to a GPU machine (bench/gpu/bundle), the one a folder above it.
TEST(Cuda, TheCliTrainsOnTheGpu) {
  INKSTONE_REQUIRE_CUDA();
  const auto dir = testing::temp_dir("cuda_cli_train");
  const auto data = testing::prepare_word_corpus(dir);
  std::ofstream(dir / "run.toml") << "[run]\ndevice = \"cuda\"\n[model]\nd_model = 32\nn_layers = 2\nn_heads = 2\n"
                                  << "n_kv_heads = 1\nmax_seq_len = 32\n[data]\npath = \"" << data.string()
                                  << "\"\nseq_len = 16\n[train]\nsteps = 3\nbatch_size = 4\nlog_interval = 1\n"
                                  << "eval_interval = 0\neval_batches = 2\n";
  auto cli = testing::cli_binary();
  if (!std::filesystem::exists(cli))
    cli = std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() / "inkstone";
  const auto result =
      testing::run_command({cli.string(), "train", (dir / "run.toml").string(), "--run-dir", (dir / "run").string()});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::ifstream metrics(dir / "run" / "metrics.jsonl");
  int lines_with_memory = 0;
  for (std::string line; std::getline(metrics, line);) {
    const auto json = nlohmann::json::parse(line);
    if (json.contains("cuda_max_allocated_mib") && json["cuda_max_allocated_mib"].get<double>() > 0)
      ++lines_with_memory;
  }
  EXPECT_GE(lines_with_memory, 3) << result.output;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace inkstone
