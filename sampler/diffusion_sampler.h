// Discrete diffusion sampling (docs/diffusion.md, "Samplers"): from the prior (uniform tokens or all-mask) to text
// in T steps on a time grid, by ancestral posterior steps or by confidence-ordered commits, with prompt and infill
// positions clamped at every step. Batched on the model's device; x̂ and the posteriors are float64
// (docs/diffusion.md, "Precision").
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "dataset/tokenizer.h"
#include "models/language_model.h"
#include "objectives/diffusion_objective.h"
#include "objectives/noise_process.h"
#include "objectives/noise_support.h"
#include "sampler/sampling.h"

namespace inkstone {

// The forward process a model was trained with: what the sampler inverts.
struct DiffusionProcess {
  std::shared_ptr<const NoiseProcess> noise;    // the levels α, μ, υ of the grid's times
  std::shared_ptr<const NoiseSupport> support;  // ids x̂ ranges over (and uniform noise emits)
  int64_t mask_id = -1;                         // the mask token (noise that masks)
  bool time_conditioned = false;                // the denoiser reads σ_t, so x̂ cannot be reused across steps
  int64_t end_id = -1;                          // end of text (eos): the adaptive sampler's anchor
  int64_t block_size = 0;                       // > 0: trained as block diffusion (block-causal; BD3-LM)
  bool shifted_outputs = false;                 // token i is read from the output at i − 1 (diffusion.shifted_outputs)
};

// The process the run's objective trains with (a DiffusionObjective holds its noise); InputError for an objective
// that is not a diffusion objective.
DiffusionProcess diffusion_process_for(const Objective& objective, const Config& config, const Tokenizer& tokenizer,
                                       int64_t model_vocab);

// Logits [B, L, V] for noisy tokens z [B, L] at noise level σ = −log α_t ([B]).
using Denoiser = std::function<torch::Tensor(const torch::Tensor& z, const torch::Tensor& sigma)>;
// A bidirectional forward of `model`, fed σ only when it is time-conditioned, its outputs read as `process` was
// trained (shifted one position on with diffusion.shifted_outputs).
Denoiser model_denoiser(LanguageModel model, const DiffusionProcess& process);

// ancestral: posterior draws on the time grid. confidence: each step commits the open positions x̂ is most sure
// of (docs/diffusion.md, "Confidence sampling"). adaptive (Sumi's): confidence commits with an end-of-text token
// fixed right after the canvas, so that the model places the text's end inside the window.
enum class DiffusionMethod { ancestral, confidence, adaptive };
enum class NoiseRemoval { ancestral, greedy, none };
// Their names (sample.diffusion_sampler, sample.noise_removal, `sample --sampler` and `--noise-removal`), defined
// here alone; the from_name functions refuse any other by the key `key`.
std::vector<std::string> diffusion_method_names();
std::vector<std::string> noise_removal_names();
DiffusionMethod diffusion_method_from_name(const std::string& name, const char* key = "sample.diffusion_sampler");
NoiseRemoval noise_removal_from_name(const std::string& name, const char* key = "sample.noise_removal");

struct DiffusionSampleOptions {
  int64_t steps = 64;
  DiffusionMethod method = DiffusionMethod::ancestral;
  NoiseRemoval noise_removal = NoiseRemoval::ancestral;
  // temperature, top-k, top-p and (fused step only) min-p on x̂ — never on the posterior (docs/diffusion.md,
  // "Filters on the model output")
  SamplingParams filter;
  // Confidence and adaptive samplers: a step commits, beside its share of the schedule, every open position whose
  // score reaches this, and sampling ends once none is open (docs/diffusion.md, "Threshold decoding"); 0: off.
  double confidence_threshold = 0;
  int64_t seed = 0;
  // The fused step (sampler/kernels/diffusion_step.h): no [B, L, V] float64 tensors, draws keyed by (seed, step,
  // sequence, position) so a sequence's sample does not depend on its batch; the CUDA kernel on a GPU. false: the
  // eager float64 reference, whose draws come from one generator over the whole batch.
  bool fused = true;
  // x̂, the posterior and the draw in float64 (the reference) or float32 (docs/diffusion.md, "Posterior
  // precision"); the model's logits are float32 or bf16 either way.
  torch::ScalarType posterior_dtype = torch::kDouble;
  int64_t first_sequence = 0;  // the global number of the canvas's first row (its random stream)
  double t_end = 1e-5;    // the grid runs t = 1 → t_end; never t = 0 (docs/diffusion.md, "Pitfalls")
  // Keep the trajectory and the log-probabilities of its draws (DiffusionSampleResult): ancestral sampling with
  // ancestral or no noise removal and a filter of temperature alone, whose every draw has a probability under x̂.
  bool record_trajectory = false;
  // Called with (step, z) every trace_every steps and after the last one; 0: never.
  int64_t trace_every = 0;
  std::function<void(int64_t, const torch::Tensor&)> on_trace;
};

// What each row starts from: `fixed` positions keep their `tokens` (prompt, infill context) at every step; the
// others are generated.
struct DiffusionCanvas {
  torch::Tensor tokens;  // [B, L] int64
  torch::Tensor fixed;   // [B, L] bool
};

struct DiffusionSampleResult {
  torch::Tensor tokens;     // [B, L] int64 on the CPU
  // With record_trajectory (on the CPU): the canvas before the first step and after each of the T transitions
  // [B, T + 1, L] int64; each transition's time t [T] and levels (α_t, μ_t, υ_t, α_s, μ_s, υ_s) [T, 6] float64;
  // per position the sum over transitions of log q(z_s | z_t, x̂) of its draws (objectives/transition_log_prob.h)
  // [B, L] float64, 0 at fixed positions.
  torch::Tensor trajectory;
  torch::Tensor transition_times;
  torch::Tensor transition_levels;
  torch::Tensor log_probs;
  int64_t model_calls = 0;  // with x̂ reuse, at most steps + 1
  double seconds = 0;
};

// InputError unless options.record_trajectory is off or the sampling it asks for can be recorded.
void check_trajectory_recording(const DiffusionSampleOptions& options);

DiffusionSampleResult sample_diffusion(const Denoiser& denoiser, const DiffusionProcess& process,
                                       const DiffusionCanvas& canvas, const DiffusionSampleOptions& options,
                                       torch::Device device);

// The generated ids of one sampled row [L] (positions not `fixed` [L]) up to, not including, the first end_id:
// a diffusion sample's text ends at its first end of text (end_id < 0: never).
std::vector<int32_t> generated_until_end(const torch::Tensor& row, const torch::Tensor& fixed, int64_t end_id);

// Per sample, H = −Σ_v (c_v/L) log(c_v/L) in nats over its token histogram (docs/diffusion.md, "Unigram entropy").
double unigram_entropy(const std::vector<int32_t>& tokens);

}  // namespace inkstone
