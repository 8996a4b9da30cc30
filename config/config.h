// Typed run configuration: one struct per TOML section. Defaults, documentation and ranges live in
// config/config_schema.cpp, the single place that describes every key.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace inkstone {

// Keys with a fixed set of values are parsed once into an enum; ChoiceNames<E>::names spells its values, in
// declaration order, as the TOML does (the schema's allowed values and config_to_toml read them there).
template <typename Choice>
struct ChoiceNames;
#define INKSTONE_CHOICE(Choice, ...)                           \
  template <>                                                  \
  struct ChoiceNames<Choice> {                                 \
    static constexpr auto names = std::array{__VA_ARGS__};     \
  }

enum class DeviceChoice { automatic, cpu, cuda };  // run.device (auto picks CUDA when present)
INKSTONE_CHOICE(DeviceChoice, "auto", "cpu", "cuda");
enum class FloatFormat { fp32, bf16 };  // run.precision, run.param_dtype
INKSTONE_CHOICE(FloatFormat, "fp32", "bf16");
enum class ReferencePolicy { initial, old };  // rl.reference
INKSTONE_CHOICE(ReferencePolicy, "initial", "old");
// How an RL objective reads a diffusion policy's sequence log-likelihood (docs/rl.md, "Diffusion policies").
enum class SequenceLikelihood { elbo, one_step, transitions };  // rl.likelihood
INKSTONE_CHOICE(SequenceLikelihood, "elbo", "one_step", "transitions");
enum class ImportanceRatio { raw, geometric };  // gflowrl.is_ratio (docs/rl.md)
INKSTONE_CHOICE(ImportanceRatio, "raw", "geometric");
enum class LengthNorm { none, both, paper };  // gflowrl.norm (docs/rl.md, "Length normalisation")
INKSTONE_CHOICE(LengthNorm, "none", "both", "paper");
enum class RewardScale { group, none };  // grpo.scale_rewards
INKSTONE_CHOICE(RewardScale, "group", "none");
enum class Architecture { qwen3, qwen2, llama, mistral };  // model.arch
INKSTONE_CHOICE(Architecture, "qwen3", "qwen2", "llama", "mistral");
enum class AttentionBias { none, qkv, all };  // model.attention_bias
INKSTONE_CHOICE(AttentionBias, "none", "qkv", "all");
enum class RopeScalingKind { none, linear, llama3 };  // model.rope_scaling (docs/rope.md, "Scaling")
INKSTONE_CHOICE(RopeScalingKind, "none", "linear", "llama3");
enum class ResidualMode { plain, attnres, block_attnres, mhar, delta };  // model.residual (docs/backbones.md)
INKSTONE_CHOICE(ResidualMode, "plain", "attnres", "block_attnres", "mhar", "delta");
enum class DeltaSources { sublayer, block };  // model.residual_delta
INKSTONE_CHOICE(DeltaSources, "sublayer", "block");
enum class DeltaGate { zero, sigmoid, sigmoid_token, none };  // model.residual_delta_gate
INKSTONE_CHOICE(DeltaGate, "zero", "sigmoid", "sigmoid_token", "none");
enum class WidthProfile { uniform, geometric };  // model.width_profile
INKSTONE_CHOICE(WidthProfile, "uniform", "geometric");
enum class WidthExpand { carry_forward, zero_pad };  // model.width_expand
INKSTONE_CHOICE(WidthExpand, "carry_forward", "zero_pad");
enum class QkvConvPosition { before_norm, after_norm };  // model.qkv_conv_position
INKSTONE_CHOICE(QkvConvPosition, "before_norm", "after_norm");
enum class MoeRouter { softmax, sigmoid };  // model.moe_router
INKSTONE_CHOICE(MoeRouter, "softmax", "sigmoid");
enum class HiddenPositions { interleaved, per_token };  // model.hidden_positions
INKSTONE_CHOICE(HiddenPositions, "interleaved", "per_token");
enum class NoiseScheduleKind { log_linear, cosine, log_snr };  // diffusion.schedule (objectives/noise_schedule.h)
INKSTONE_CHOICE(NoiseScheduleKind, "log_linear", "cosine", "log_snr");
enum class ChatFormat { raw, chatml, llama3 };  // chat.format (dataset/prompt_format.h)
INKSTONE_CHOICE(ChatFormat, "raw", "chatml", "llama3");
enum class PromptStart { eos, bos, none };  // chat.prompt_start
INKSTONE_CHOICE(PromptStart, "eos", "bos", "none");
enum class TimeSampling { stratified, iid };  // diffusion.time_sampling
INKSTONE_CHOICE(TimeSampling, "stratified", "iid");
enum class LossWeighting { elbo, snr };  // diffusion.weighting
INKSTONE_CHOICE(LossWeighting, "elbo", "snr");
enum class WindowMode { pack, pad };  // data.mode
INKSTONE_CHOICE(WindowMode, "pack", "pad");
enum class LrScheduleKind { cosine, wsd, constant };  // schedule.kind
INKSTONE_CHOICE(LrScheduleKind, "cosine", "wsd", "constant");
enum class CacheFormat { weights, bf16 };  // sample.cache_dtype: the layers' own dtype, or bf16
INKSTONE_CHOICE(CacheFormat, "weights", "bf16");
enum class PosteriorPrecision { float64, float32 };  // sample.posterior
INKSTONE_CHOICE(PosteriorPrecision, "float64", "float32");
// grpo.aggregation (docs/rl.md, "Loss aggregation")
enum class LossAggregation { token_mean, seq_mean_token_mean, seq_mean_token_sum, dr_grpo };
INKSTONE_CHOICE(LossAggregation, "token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "dr_grpo");
#undef INKSTONE_CHOICE

// A choice's value as the config spells it, and the value a text spells (none if it spells none).
template <typename Choice>
const char* choice_name(Choice value) {
  return ChoiceNames<Choice>::names.at(static_cast<size_t>(value));
}
template <typename Choice>
std::optional<Choice> choice_named(const std::string& text) {
  const auto& names = ChoiceNames<Choice>::names;
  for (size_t i = 0; i < names.size(); ++i)
    if (text == names[i]) return static_cast<Choice>(i);
  return std::nullopt;
}

struct RunConfig {
  std::string name;
  int64_t seed;
  std::string run_dir;    // empty: runs/<name>
  DeviceChoice device;
  FloatFormat precision;    // bf16: autocast on CUDA
  FloatFormat param_dtype;  // bf16: bf16 weights and gradients; the optimizer steps fp32 master copies
  int64_t threads;        // libtorch intra-op threads
  bool tf32;              // CUDA: fp32 matmuls and convolutions on TF32 tensor cores
};

struct ModelConfig {
  Architecture arch; // qwen3
  int64_t vocab_size;       // 0: taken from the tokenizer
  int64_t d_model;
  int64_t n_layers;
  int64_t n_heads;
  int64_t n_kv_heads;
  int64_t head_dim;         // 0: d_model / n_heads
  int64_t ffn_dim;          // 0: SwiGLU width from 8/3 d_model rounded up to a multiple of 64
  int64_t max_seq_len;
  double rope_theta;
  double norm_eps;
  bool qk_norm;             // per-head RMSNorm of q and k before RoPE (Qwen3); Llama and Qwen2 have none
  bool attention_sink;      // off-by-one softmax: a zero logit every query also sees (models/attention.h)
  AttentionBias attention_bias; // none | qkv (Qwen2) | all (q, k, v and o; Llama's attention_bias)
  RopeScalingKind rope_scaling; // none | linear | llama3 (models/rope.h)
  double rope_scaling_factor;
  double rope_low_freq_factor;   // llama3
  double rope_high_freq_factor;  // llama3
  int64_t rope_original_max_len; // llama3: the context the base frequencies were trained for
  bool tie_embeddings;
  std::string init;         // normal
  double init_std;
  double init_gamma;            // init = gamma: std = fan_in^(-gamma), one exponent for every weight
  double init_gamma_embedding;  // per-group gamma; < 0: init_gamma
  double init_gamma_attention;  // W_q, W_k, W_v, W_o
  double init_gamma_mlp;
  // Residual routing (models/residual_routing.h).
  ResidualMode residual; // plain | attnres | block_attnres | mhar | delta
  int64_t residual_heads;       // H of mhar, block_attnres and delta
  int64_t residual_blocks;      // N_b of block_attnres, and of delta with residual_delta = block
  DeltaSources residual_delta; // delta sources: sublayer | block
  DeltaGate residual_delta_gate; // delta gate α: zero | sigmoid | sigmoid_token | none
  // Variable width (models/width_profile.h).
  WidthProfile width_profile; // uniform | geometric
  double width_bottleneck_ratio;
  int64_t width_bottleneck_layer;  // k, 1-based; 0: 3/4 of the depth
  int64_t width_quantum;
  WidthExpand width_expand; // carry_forward | zero_pad
  bool time_conditioning;   // adaLN-Zero on the noise level (diffusion objectives)
  int64_t cond_dim;
  // Block zoo: per-layer mixer and feed-forward kinds, each a pattern tiled over n_layers.
  std::string mixer_pattern;     // A attention | C gated short conv
  int64_t conv_kernel;           // short conv taps
  bool qkv_conv;                 // depthwise residual conv on [q | k | v] before RoPE
  int64_t qkv_conv_kernel;
  QkvConvPosition qkv_conv_position; // before_norm | after_norm (of the per-head QK-norm)
  bool qkv_conv_zero_init;       // zero taps: exactly the base model at init
  std::string ffn_pattern;       // D dense SwiGLU | M mixture of experts
  int64_t moe_experts;
  int64_t moe_top_k;
  int64_t moe_expert_ffn_dim;    // 0: the dense ffn width
  int64_t moe_shared_experts;
  MoeRouter moe_router; // softmax | sigmoid
  double moe_route_scale;
  double moe_aux_loss_coef;      // Switch load-balancing loss
  double moe_z_loss_coef;        // router z-loss
  double moe_bias_update_rate;   // aux-loss-free balancing step u; 0: off
  // Hidden decoding (models/hidden_streams.h).
  int64_t hidden_streams;        // n embedding copies per token; 1: the plain model
  HiddenPositions hidden_positions; // interleaved | per_token
  std::string hidden_attention;  // per layer, tiled: L stream-local | X cross-stream mixing
  bool hidden_local_sees_token;  // stream-local layers also see the earlier streams of their own token
  // LoRA (models/lora.h): adapters of this rank on the named projections, every other weight frozen; 0: off.
  int64_t lora_rank;
  double lora_alpha;             // the adapter's output is scaled by lora_alpha / lora_rank
  std::vector<std::string> lora_targets;  // empty: every projection LoRA can adapt
};

struct ObjectiveConfig {
  std::string name;  // a registered objective (objectives/registry.cpp)
  double z_loss;     // weight of log²Z of the logits per token (ar, diffusion; objectives/z_loss.h)
  int64_t logit_chunk_mib;  // float32 logits of one row chunk of the vocabulary loss, 0: the device's (chunked_vocab.h)
};

// Discrete diffusion (the denoising objectives); formulas in objectives/*_noise.h and diffusion_objective.h.
struct DiffusionConfig {
  NoiseScheduleKind schedule;  // log_linear | cosine | log_snr
  double schedule_eps;         // log_linear, cosine: alpha_1 = eps
  double log_snr_min;          // log_snr: lambda(1)
  double log_snr_max;          // log_snr: lambda(0)
  double t_min;                // smallest training/eval time; t = t_min + (1 - t_min) u
  TimeSampling time_sampling; // stratified | iid
  double time_mix;             // fraction of sequences with a t per token (models without time input only)
  LossWeighting weighting; // elbo | snr (training loss; eval always reports the ELBO)
  double max_weight;           // clip of the small-t weight |dlambda/dt|; 0: none
  double is_weight;            // uniform, mixture: β_IS, the weight of the IS-divergence term of the training loss
  double mixture_uniform;      // mixture: p_u, the uniform share of the tokens at α = ½ (objectives/mixture_noise.h)
  double mixture_gamma;        // mixture: γ of the uniform share's bump
  int64_t block_size;          // > 0: block diffusion (BD3-LM) on [x_0 | x_t] with a block-causal mask
  int64_t attention_anneal_steps;  // AR -> diffusion: causal attention opened to bidirectional over these steps
  bool shifted_outputs;        // AR -> diffusion (Dream): the output at position i predicts token i + 1
  bool noise_specials;         // uniform noise also emits special ids (never pad or mask)
};

// RL post-training from a pretrained checkpoint (objectives that consume rollouts); see rl/rollout_source.h.
struct RlConfig {
  std::string init_checkpoint;        // checkpoint or run folder the policy (and the reference) start from
  std::string task;                   // gsm8k | math | arithmetic | countdown (rl/task.h)
  std::string task_path;              // gsm8k, math: the training problems
  std::string eval_path;              // gsm8k, math: the held-out problems
  int64_t task_size;                  // procedural tasks: distinct problems
  int64_t difficulty;                 // procedural tasks
  int64_t task_seed;                  // procedural tasks: training problems
  int64_t eval_seed;                  // procedural tasks: held-out problems
  std::string prompt_template;        // "{question}" is replaced by the problem
  std::vector<std::string> rewards;   // "name" or "name=weight", summed
  int64_t prompts_per_step;
  int64_t group_size;                 // G rollouts per prompt
  int64_t epochs;                     // optimisation passes over one rollout batch
  int64_t mini_batches;               // optimizer steps per epoch; each holds whole groups
  int64_t max_new_tokens;
  double temperature;                 // rollouts and the trainer's log-probs
  double top_p;
  std::vector<std::string> stop;      // a completion ends after the first of these strings
  ReferencePolicy reference;          // initial: frozen copy of the initial policy | old: the rollout policy
  bool keep_decoder;                  // causal policies: the rollouts' KV cache and CUDA graphs kept across steps
  // The policy's own objective (read from rl.init_checkpoint): ar decodes left to right, a diffusion objective
  // denoises; it decides the rollouts and how log-probs are read.
  std::string policy;
  SequenceLikelihood likelihood;      // diffusion policies: the sequence log-likelihood estimate
  int64_t elbo_samples;               // elbo: K noise levels per completion
  double prompt_mask;                 // one_step: share of prompt tokens noised (d1)
  int64_t eval_prompts;
  int64_t eval_samples;               // k samples per held-out problem (pass@1 = mean, pass@k for powers of 2)
  double eval_temperature;
};

// GFlowRL.
struct GflowrlConfig {
  double beta;
  double push_up;            // flow-gap clip bound on the side that raises log pi (g < 0)
  double push_down;          // bound on the side that lowers it (g > 0)
  double is_eps;             // IS weight cap 1 + is_eps
  ImportanceRatio is_ratio;
  LengthNorm norm;
  bool filter_degenerate;    // drop groups whose rewards are all equal
  double tis_cap;            // truncated IS against rollout/trainer drift; 0: off
};

// GRPO / DAPO.
struct GrpoConfig {
  double eps_low;
  double eps_high;
  RewardScale scale_rewards;
  double adv_eps;
  LossAggregation aggregation;
  double kl_coef;             // k3 KL to the reference; 0: off
};

// FlowRL.
struct FlowrlConfig {
  double beta;
  double is_cap;        // w = min(exp(rho), is_cap), one-sided
  double head_dropout;  // in the log Z head
};

struct DataConfig {
  std::string path;       // folder made by `inkstone data prepare`
  std::vector<std::string> mixture;  // "folder=weight" entries drawn by weight instead of `path` (data_folders)
  std::string tokenizer;  // empty: the tokenizer stored with the data
  int64_t seq_len;
  WindowMode mode; // pack | pad
  bool document_mask;     // pack: attention and convolutions stay within each packed document
  int64_t seed;           // the training windows' order; -1: run.seed (data_order_seed)
  // The counterfactual twin (docs/sweeps.md, "Twin runs"): at update inject_step (1-based; 0: never) row inject_row
  // of the global batch starts with the tokens of inject_text instead of its own.
  std::string inject_text;
  int64_t inject_step;
  int64_t inject_row;
};

// A prepared folder a run trains on, with its share of the training windows and the key that names it in errors.
struct DataFolder {
  std::string path;
  double weight = 1;
  std::string key;  // "data.path" or "data.mixture[i]"
};
// The folders of data.mixture (InputError for an entry that is not "folder=weight" with a positive finite weight,
// or for data.path set beside it), or data.path alone.
std::vector<DataFolder> data_folders(const DataConfig& data);

struct OptimConfig {
  double learning_rate;
  double beta1;
  double beta2;
  double eps;
  double weight_decay;
  std::vector<std::string> no_decay;  // parameter groups without weight decay: norm, bias, embedding
  double grad_clip;                   // 0: no clipping
};

struct ScheduleConfig {
  LrScheduleKind kind; // cosine | wsd | constant
  int64_t warmup_steps;
  double min_lr_ratio;
  double decay_fraction;  // wsd: fraction of steps in the final decay
};

struct TrainConfig {
  std::string init_checkpoint;  // run, checkpoint or imported folder whose weights the run starts from (windows)
  int64_t steps;
  int64_t batch_size;
  int64_t grad_accum;
  int64_t log_interval;
  int64_t eval_interval;
  int64_t eval_batches;  // 0: the whole validation split
  int64_t checkpoint_interval;
  int64_t keep_checkpoints;
  int64_t max_bad_steps;
  int64_t spike_window;  // the spike guard's window of updates (train/spike_guard.h)
  double spike_loss_z;   // 0: off
  double spike_grad_z;   // 0: off
  int64_t activation_checkpointing;  // 0: none; k: blocks 0, k, 2k, ... recompute their forward in backward
};

// Data-parallel runs (train/distributed.h); a single process ignores it.
struct DistributedConfig {
  double timeout_s;  // a collective or the rendezvous waiting longer than this fails instead of hanging
  double bucket_mb;  // gradient all-reduce bucket size
  int64_t zero_stage;  // 0: every rank holds everything; 1: optimizer state sharded; 2: gradients too; 3: block
                       // weights too (zero_sharding.h)
};

struct SampleConfig {
  int64_t num;
  int64_t max_new_tokens;
  double temperature;
  int64_t top_k;
  double top_p;
  int64_t seed;
  std::string prompt;
  int64_t steps;               // diffusion: denoising steps (per block when generating in blocks)
  int64_t block_size;          // diffusion: generate in blocks of this many positions; 0: the run's block size
  std::string diffusion_sampler;  // named by sampler/diffusion_sampler.cpp
  std::string noise_removal;      // diffusion final step, named there too
  double min_p;                // keep tokens at least min_p times as likely as the likeliest (diffusion: on x̂)
  int64_t batch_size;          // sequences decoded at once (AR rows; diffusion sequences per denoiser call)
  double confidence_threshold;  // diffusion confidence samplers: also commit every open position scoring >= this
  bool approximate_cache;      // diffusion in blocks, whole-window models: reuse the context's keys per block
  bool noisy_suffix;           // diffusion in blocks, whole-window models: the blocks still to come read as noise
  bool fused;                  // diffusion: the fused step (sampler/kernels/diffusion_step.h)
  PosteriorPrecision posterior; // diffusion: float64 | float32, the precision of x̂, the posterior and the draw
  bool cuda_graphs;            // AR decoding on CUDA: a replayed graph (sampler/decode_step.h)
  CacheFormat cache_dtype;     // AR decoding: the KV cache's keys and values as the layers make them, or bf16
};

// What a run shows besides metrics.jsonl (docs/observability.md).
struct MetricsConfig {
  bool tensorboard;                         // TensorBoard event file in the run folder (rank 0)
  int64_t sample_interval;                  // every k steps samples of sample_prompts go into the metrics; 0: never
  std::vector<std::string> sample_prompts;  // empty: [sample] prompt
  double peak_tflops;  // the device's bf16 peak for MFU; 0: known CUDA devices' datasheet value, none on CPU
  std::string watch_text;  // scored by the objective at every evaluation as watch_loss_nats; empty: none
};

// How prompts are rendered for `sample` and RL (dataset/prompt_format.h): a chat model expects its own turn markers.
struct ChatConfig {
  ChatFormat format;                     // raw | chatml | llama3
  std::string system;                    // system message of the chat formats; empty: none
  PromptStart prompt_start;              // eos | bos | none: the token a prompt starts from
  std::vector<std::string> stop_tokens;  // texts of tokens that end a completion besides eos (<|im_end|>)
};

struct Config {
  RunConfig run;
  ModelConfig model;
  ObjectiveConfig objective;
  DiffusionConfig diffusion;
  DataConfig data;
  OptimConfig optim;
  ScheduleConfig schedule;
  TrainConfig train;
  DistributedConfig distributed;
  SampleConfig sample;
  MetricsConfig metrics;
  ChatConfig chat;
  RlConfig rl;
  GflowrlConfig gflowrl;
  GrpoConfig grpo;
  FlowrlConfig flowrl;
};

// The documented defaults.
Config default_config();
// The keys ("section.key") the config file at `path` and the --set `overrides` give; every other key is a default.
std::set<std::string> given_keys(const std::string& path, const std::vector<std::string>& overrides);

// The seed of the training windows' order: data.seed, or run.seed where data.seed is -1. Apart from run.seed (the
// weights' initialisation), so that a sweep can vary the two separately.
inline int64_t data_order_seed(const Config& config) {
  return config.data.seed >= 0 ? config.data.seed : config.run.seed;
}

// Parses a TOML file over the defaults, then applies `section.key=value` overrides. Unknown keys, wrong types
// and out-of-range values throw InputError naming file:line and key (with a near-miss suggestion).
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
Config config_from_string(const std::string& toml_text, const std::string& origin,
                          const std::vector<std::string>& overrides = {});
void apply_override(Config& config, const std::string& assignment);

// The fully resolved config as TOML; with_docs adds each key's documentation as a comment.
std::string config_to_toml(const Config& config, bool with_docs = false);

}  // namespace inkstone
