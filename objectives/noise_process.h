// A discrete diffusion forward process as one object (docs/diffusion.md, "Noise processes"): what a corrupted
// token becomes at time t, the NELBO of one token, and the numbers the sampler inverts. Every process here is an
// interpolation in GIDD's sense (von Rütte et al. 2025, eq. 1) between the data and noise that mixes the mask token
// m with uniform draws from the noise support S (|S| = N):
//   q_t(z | x) = α_t [z = x] + μ_t [z = m] + υ_t / N · [z ∈ S],   α_t + μ_t + υ_t = 1,
// α_t the signal kept, μ_t the mass sent to the mask, υ_t the mass spread uniformly. Uniform noise has μ ≡ 0,
// masked noise υ ≡ 0; GIDD's mixture has both. The training objective (objectives/diffusion_objective.h) and the
// sampler (sampler/diffusion_sampler.h) read a process only through this interface, so a new process is one file
// and one line in the objective registry (objectives/registry.cpp).
#pragma once
#include <cstdint>
#include <memory>

#include <torch/types.h>

#include "config/config.h"
#include "objectives/noise_schedule.h"

namespace inkstone {

// α_t, μ_t, υ_t (or their time derivatives) at the times asked, each shaped like t.
struct NoiseLevels {
  torch::Tensor keep;     // α
  torch::Tensor mask;     // μ
  torch::Tensor uniform;  // υ
};

// The three levels at one time as numbers, for the sampler's grid.
struct NoiseLevelsAt {
  double keep = 1, mask = 0, uniform = 0;
};

// One token's NELBO ℓ and the IS-divergence part of it (docs/diffusion.md, "Training weights"), which a process
// without one leaves undefined.
struct DiffusionTokenTerms {
  torch::Tensor nelbo;
  torch::Tensor is_divergence;
};

// Where a process's ids are: N, the support's size, and the mask token (−1: none).
struct NoiseIds {
  int64_t support_size = 0;
  int64_t mask_id = -1;
};

class NoiseProcess {
 public:
  // The process follows `config.schedule` (objectives/noise_schedule.h): α_t is the schedule's α or, for a
  // process that mixes, a function of it.
  explicit NoiseProcess(const DiffusionConfig& config);
  virtual ~NoiseProcess() = default;

  virtual NoiseLevels levels(const torch::Tensor& t) const = 0;
  // d/dt of each level (they sum to 0).
  virtual NoiseLevels rates(const torch::Tensor& t) const = 0;
  // μ ≢ 0: corrupted tokens become the mask, which the tokenizer must have.
  virtual bool masks() const = 0;
  // υ ≢ 0: corrupted tokens become uniform draws from the support.
  virtual bool spreads() const = 0;
  // ℓ per token (and its IS part) from log x̂ [n, V] over the support (−inf elsewhere, the mask included), ids x
  // (clean, in S) and z (noisy) [n], and the levels and rates at each token's time [n].
  virtual DiffusionTokenTerms token_terms(const torch::Tensor& log_x_hat, const torch::Tensor& x,
                                          const torch::Tensor& z, const NoiseLevels& level, const NoiseLevels& rate,
                                          const NoiseIds& ids) const = 0;

  // The levels at one time t (float64).
  NoiseLevelsAt levels_at(double t) const;
  // dλ/dt of the log-SNR λ = log(α / (1 − α)): α' / (α (1 − α)), < 0. The training weights are functions of it.
  torch::Tensor log_snr_rate(const torch::Tensor& t) const;
  const NoiseSchedule& schedule() const { return *schedule_; }

 private:
  std::unique_ptr<NoiseSchedule> schedule_;
};

}  // namespace inkstone
